package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// StdioTransport is MCP over newline-delimited JSON on r and w (airlock
// mcp), with the same edge as /mcp over HTTP: a message over the request
// limit, a line that is not JSON and a message that is not JSON-RPC get a
// JSON-RPC error and are dropped, and the session goes on (the SDK alone
// would end it at the first bad line).
func (g *Gateway) StdioTransport(r io.Reader, w io.Writer) mcp.Transport {
	out := &lockedWriter{w: w}
	pr, pw := io.Pipe()
	go g.filterLines(r, pw, out)
	return &mcp.IOTransport{Reader: pr, Writer: out, MaxLineLength: -1}
}

// filterLines copies good lines from r to pw and answers bad ones on out,
// until r ends or the reading side closes.
func (g *Gateway) filterLines(r io.Reader, pw *io.PipeWriter, out io.Writer) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if int64(len(line)+len(chunk)) > g.maxBody+2 { // room for \r\n
				tooLong, line = true, line[:0]
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // the line goes on
		}
		if len(chunk) > 0 || len(line) > 0 || tooLong {
			if werr := g.passLine(line, tooLong, pw, out); werr != nil {
				return
			}
		}
		line, tooLong = line[:0], false
		if err != nil {
			_ = pw.CloseWithError(err) // io.EOF: the client went away
			return
		}
	}
}

func (g *Gateway) passLine(line []byte, tooLong bool, pw *io.PipeWriter, out io.Writer) error {
	if tooLong {
		return writeRPCLine(out, rpcInvalidRequest, fmt.Sprintf("the message is larger than %d bytes (the limit is limits.request_bytes in the manifest); nothing was executed", g.maxBody))
	}
	trimmed := bytes.TrimSpace(line)
	if len(trimmed) == 0 {
		return nil // a blank line
	}
	msg, code, problem := parseEdge(trimmed)
	if code != 0 {
		return writeRPCLine(out, code, problem, msg.id())
	}
	if problem := textProblem(trimmed); problem != "" {
		return writeRPCLine(out, rpcInvalidParams, problem, msg.ID)
	}
	if lw, ok := out.(*lockedWriter); ok && msg.Method == "notifications/cancelled" {
		lw.silence(string(msg.cancelledID)) // before the SDK cancels the handler
	}
	if msg.task {
		trimmed = liftTask(trimmed)
	}
	_, err := pw.Write(append(trimmed, '\n'))
	return err
}

func writeRPCLine(w io.Writer, code int, message string, id ...json.RawMessage) error {
	b, err := json.Marshal(rpcError(code, message, nil, id...))
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// lockedWriter keeps the SDK's messages and the edge's errors whole, and
// swallows the answer to a request the client cancelled (the SDK writes
// one message per Write).
type lockedWriter struct {
	mu        sync.Mutex
	w         io.Writer
	cancelled map[string]bool // JSON ids
}

func (l *lockedWriter) silence(id string) {
	if id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancelled == nil || len(l.cancelled) >= 1024 {
		// Cancellations of requests already answered are never matched;
		// they must not pile up.
		l.cancelled = map[string]bool{}
	}
	l.cancelled[id] = true
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.cancelled) > 0 {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(p, &msg) == nil && msg.Method == "" && l.cancelled[string(msg.ID)] {
			delete(l.cancelled, string(msg.ID))
			return len(p), nil
		}
	}
	if fixed, ok := codedLine(p); ok {
		if _, err := l.w.Write(fixed); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return nil }
