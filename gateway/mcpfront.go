package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

// JSON-RPC error codes answered at the edge of /mcp, before the SDK.
const (
	rpcParseError                 = -32700
	rpcInvalidRequest             = -32600
	rpcInvalidParams              = -32602
	rpcUnsupportedProtocolVersion = -32022 // MCP 2026-07-28
)

// textProblem says what in a message's text the decoder would rewrite
// (invalid UTF-8, an unpaired surrogate: two different run ids or
// arguments would read as one) before the SDK decodes it; "" when nothing.
// A NUL is refused where its field is read (run_id, args), by name.
func textProblem(body []byte) string {
	err := airlock.CheckJSONEncoding("message", body)
	if err == nil {
		return ""
	}
	return "invalid params: the message " + asError(err).Message + "; nothing was executed"
}

// firstStatelessRevision is the MCP revision that removed sessions; airlock
// serves /mcp with sessions (the run of a call, notifications to the
// caller), so it serves the revisions before it (docs/gateway.md).
const firstStatelessRevision = "2026-07-28"

// ServedMCPVersions are the MCP revisions /mcp negotiates, newest first.
func ServedMCPVersions() []string {
	return slices.DeleteFunc(mcp.SupportedProtocolVersions(), func(v string) bool { return v >= firstStatelessRevision })
}

// mcpFront checks each POST to /mcp before the SDK sees it: a body over
// the limit, a body that is not JSON and a message that is not JSON-RPC
// get a JSON-RPC error naming what is wrong (the SDK answers them in plain
// text); server/discover — the 2026-07-28 probe — is answered with
// "unsupported protocol version" and the revisions served, so that every
// client falls back to initialize at a revision both sides speak, rather
// than taking a success for a stateless server it is not talking to.
func (g *Gateway) mcpFront(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := PrincipalFrom(r.Context())
		if r.Method != http.MethodPost {
			g.guardSession(w, r, p.Name, "", nil, func(w http.ResponseWriter) { next.ServeHTTP(w, r) })
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
		if err == nil {
			bodyRead(w)
		}
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				writeRPCError(w, http.StatusRequestEntityTooLarge, rpcInvalidRequest,
					fmt.Sprintf("the request is larger than %d bytes (the limit is limits.request_bytes in the manifest); nothing was executed", g.maxBody), nil)
				return
			}
			writeRPCError(w, http.StatusBadRequest, rpcParseError, "the request body could not be read: "+err.Error(), nil)
			return
		}
		if code, msg := checkJSONRPC(body); code != 0 {
			writeRPCError(w, http.StatusBadRequest, code, msg, nil)
			return
		}
		if msg := textProblem(body); msg != "" {
			writeRPCError(w, http.StatusBadRequest, rpcInvalidParams, msg, nil, idOf(body))
			return
		}
		m := methodOf(body)
		if m == "server/discover" {
			requested := r.Header.Get("Mcp-Protocol-Version")
			if requested == "" {
				requested = metaProtocolVersion(body)
			}
			writeRPCError(w, http.StatusOK, rpcUnsupportedProtocolVersion,
				fmt.Sprintf("protocol version %q is not served here; initialize with one of the supported versions", requested),
				map[string]any{"supported": ServedMCPVersions(), "requested": requested}, idOf(body))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		session := r.Header.Get("Mcp-Session-Id")
		switch id := idOf(body); {
		case m == "notifications/cancelled":
			// Mark the cancelled request before the SDK cancels its handler,
			// so that the answer the handler still returns is not sent: the
			// receiver of a cancellation SHOULD NOT respond. The work goes on,
			// and the next repeat gets its result.
			g.cancels.cancel(session, cancelledID(body))
		case m != "" && len(id) > 0 && session != "":
			d := &dropWriter{ResponseWriter: w}
			done := g.cancels.track(session, string(id), d)
			defer done()
			w = d
		}
		g.guardSession(w, r, p.Name, m, body, func(w http.ResponseWriter) { next.ServeHTTP(w, r) })
	})
}

// cancelledID is the requestId of a notifications/cancelled, as JSON.
func cancelledID(body []byte) string {
	var msg struct {
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &msg)
	return string(msg.Params.RequestID)
}

// cancels are the requests in flight on /mcp, by session and JSON id, so
// that a cancellation can silence the answer.
type cancels struct {
	mu       sync.Mutex
	inflight map[[2]string]*dropWriter
}

func (c *cancels) track(session, id string, d *dropWriter) (done func()) {
	k := [2]string{session, id}
	c.mu.Lock()
	if c.inflight == nil {
		c.inflight = map[[2]string]*dropWriter{}
	}
	c.inflight[k] = d
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.inflight[k] == d {
			delete(c.inflight, k)
		}
		c.mu.Unlock()
	}
}

func (c *cancels) cancel(session, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d := c.inflight[[2]string{session, id}]; d != nil {
		d.dropped.Store(true)
	}
}

// dropWriter passes a response through until its request is cancelled,
// then swallows what is written.
type dropWriter struct {
	http.ResponseWriter
	dropped atomic.Bool
}

func (d *dropWriter) Write(p []byte) (int, error) {
	if d.dropped.Load() {
		return len(p), nil
	}
	return d.ResponseWriter.Write(p)
}

func (d *dropWriter) Flush() {
	if f, ok := d.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (d *dropWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// checkJSONRPC returns a JSON-RPC error code and message when body is not
// one JSON-RPC message the SDK can read whole: not JSON, a batch (no
// revision airlock serves over HTTP takes one, and the SDK's stdio reader
// would end the session on it), not an object with "jsonrpc": "2.0" and a
// method, or an id that is not a string or an integer the SDK can hold
// (it would end a stdio session on an object id, and answer 1.5 as 1 or an
// id beyond int64 as another number: the answer must name the request's
// own id or none).
func checkJSONRPC(body []byte) (int, string) {
	trimmed := bytes.TrimSpace(body)
	if !json.Valid(trimmed) {
		var v any
		err := json.Unmarshal(trimmed, &v)
		if len(trimmed) == 0 {
			err = errors.New("the body is empty")
		}
		return rpcParseError, "parse error: the body is not JSON (" + err.Error() + "); send one JSON-RPC 2.0 message"
	}
	if trimmed[0] == '[' {
		return rpcInvalidRequest, "invalid request: a batch (a JSON array of messages) is not served; send one JSON-RPC 2.0 message at a time"
	}
	var msg struct {
		JSONRPC *string         `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  json.RawMessage `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   json.RawMessage `json:"error"`
	}
	if trimmed[0] != '{' || json.Unmarshal(trimmed, &msg) != nil {
		return rpcInvalidRequest, "invalid request: a JSON-RPC message is an object with \"jsonrpc\": \"2.0\""
	}
	if msg.JSONRPC == nil || *msg.JSONRPC != "2.0" {
		return rpcInvalidRequest, "invalid request: \"jsonrpc\" must be \"2.0\""
	}
	if msg.Method == nil && msg.Result == nil && msg.Error == nil {
		return rpcInvalidRequest, "invalid request: \"method\" is required (a string such as \"tools/call\")"
	}
	if msg.Method != nil {
		var m string
		if json.Unmarshal(msg.Method, &m) != nil || m == "" {
			return rpcInvalidRequest, "invalid request: \"method\" must be a non-empty string such as \"tools/call\""
		}
	}
	if msg.ID != nil {
		// A response may carry a null id (its request could not be read).
		if problem := idProblem(msg.ID, msg.Method == nil); problem != "" {
			return rpcInvalidRequest, "invalid request: \"id\" " + problem
		}
	}
	return 0, ""
}

// idProblem says what is wrong with a message's id, "" when nothing: it
// is a string or an integer within int64 (null only where nullOK).
func idProblem(id json.RawMessage, nullOK bool) string {
	const want = "must be a string or an integer"
	switch id[0] {
	case '"':
		return ""
	case 'n':
		if nullOK {
			return ""
		}
		return want + ", not null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		if bytes.ContainsAny(id, ".eE") {
			return want + fmt.Sprintf(", not the fraction or exponent %s", id)
		}
		if _, err := strconv.ParseInt(string(id), 10, 64); err != nil {
			return fmt.Sprintf("%s is beyond a 64-bit integer; send it as a string", id)
		}
		return ""
	case '{':
		return want + ", not an object"
	case '[':
		return want + ", not an array"
	default:
		return want + ", not a boolean"
	}
}

func methodOf(body []byte) string {
	var msg struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &msg)
	return msg.Method
}

func idOf(body []byte) json.RawMessage {
	var msg struct {
		ID json.RawMessage `json:"id"`
	}
	_ = json.Unmarshal(body, &msg)
	return msg.ID
}

func metaProtocolVersion(body []byte) string {
	var msg struct {
		Params struct {
			Meta map[string]any `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(body, &msg)
	v, _ := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string)
	return v
}

// writeRPCError writes a JSON-RPC error response; id is null when the
// request's id could not be read.
func writeRPCError(w http.ResponseWriter, status, code int, message string, data any, id ...json.RawMessage) {
	writeJSON(w, status, rpcError(code, message, data, id...))
}

func rpcError(code int, message string, data any, id ...json.RawMessage) map[string]any {
	rid := json.RawMessage("null")
	if len(id) > 0 && len(id[0]) > 0 {
		rid = id[0]
	}
	e := map[string]any{"code": code, "message": message}
	if data != nil {
		e["data"] = data
	}
	return map[string]any{"jsonrpc": "2.0", "id": rid, "error": e}
}
