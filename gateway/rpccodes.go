package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Every JSON-RPC error airlock answers has a code JSON-RPC defines or
// MCP names; never 0, which the SDK gives a plain Go error. Handlers'
// errors are coded where they are returned (rpcCoded, in the server's
// outermost middleware); what the SDK refuses before any handler runs —
// a request before initialize, initialize's malformed params — is coded
// on its way out, over stdio (lockedWriter) and HTTP (codedWriter).

// rpcCoded is err as a JSON-RPC error with a valid code. The SDK answers a
// plain Go error (airlock's own, an upstream that could not be reached)
// with code 0, and an upstream's refusal passed back as it came may carry
// 0 too: both become -32603 (internal error), with their message and data.
func rpcCoded(err error) error {
	var e *jsonrpc.Error
	if errors.As(err, &e) && e.Code != 0 {
		return err
	}
	out := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	if e != nil {
		out.Data = e.Data
	}
	return out
}

// codeZero marks what may be an error response with code 0, as the SDK
// writes it (compact JSON).
var codeZero = []byte(`"code":0`)

// codedMessage is a JSON-RPC error response with code 0 given a valid
// code: -32600 (invalid request) for a request the session cannot take
// yet, -32602 (invalid params) for params the SDK could not decode (it
// codes all but initialize's), -32603 (internal error) otherwise. ok
// false: msg is not such a response, and stays as it is.
func codedMessage(msg []byte) (fixed []byte, ok bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(msg, &m) != nil || m["error"] == nil {
		return nil, false
	}
	var e struct {
		Code    *int64          `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	}
	if json.Unmarshal(m["error"], &e) != nil || e.Code == nil || *e.Code != 0 {
		return nil, false
	}
	code := int64(jsonrpc.CodeInternalError)
	switch {
	case strings.Contains(e.Message, "invalid during session initialization"):
		code = rpcInvalidRequest
		e.Message += ": send initialize first, and notifications/initialized after its answer"
	case strings.HasPrefix(e.Message, "handling '"):
		code = rpcInvalidParams
	}
	e.Code = &code
	b, err := json.Marshal(e)
	if err != nil {
		return nil, false
	}
	m["error"] = b
	if fixed, err = json.Marshal(m); err != nil {
		return nil, false
	}
	return fixed, true
}

// codedLine is codedMessage over one line of stdio (the SDK writes one
// message per Write, ending in a newline).
func codedLine(p []byte) ([]byte, bool) {
	if !bytes.Contains(p, codeZero) {
		return nil, false
	}
	fixed, ok := codedMessage(bytes.TrimSpace(p))
	if !ok {
		return nil, false
	}
	return append(fixed, '\n'), true
}

// codedWriter gives an SDK's answer over HTTP a valid code: a JSON body,
// or an event of its stream (the SDK writes each event whole, in one
// Write).
type codedWriter struct {
	http.ResponseWriter
}

func (c *codedWriter) Write(p []byte) (int, error) {
	if !bytes.Contains(p, codeZero) {
		return c.ResponseWriter.Write(p)
	}
	if fixed, ok := codedMessage(bytes.TrimSpace(p)); ok {
		if _, err := c.ResponseWriter.Write(fixed); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	// An event: its data line is the message.
	lines := bytes.Split(p, []byte("\n"))
	changed := false
	for i, line := range lines {
		data, isData := bytes.CutPrefix(line, []byte("data: "))
		if !isData {
			continue
		}
		if fixed, ok := codedMessage(data); ok {
			lines[i] = append([]byte("data: "), fixed...)
			changed = true
		}
	}
	if !changed {
		return c.ResponseWriter.Write(p)
	}
	if _, err := c.ResponseWriter.Write(bytes.Join(lines, []byte("\n"))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *codedWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *codedWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
