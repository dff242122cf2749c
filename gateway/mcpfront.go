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
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

// JSON-RPC error codes answered at the edge of /mcp, before the SDK.
const (
	rpcParseError                 = -32700
	rpcInvalidRequest             = -32600
	rpcInvalidParams              = -32602
	rpcUnsupportedProtocolVersion = -32022 // MCP 2026-07-28
	rpcHeaderMismatch             = -32020 // MCP 2026-07-28: a header disagrees with the body
)

// textProblem says what in a message's text the decoder would rewrite
// (invalid UTF-8, an unpaired surrogate: two different run ids or
// arguments would read as one) before the SDK decodes it; "" when nothing.
// A NUL is refused where its field is read (run_id, args), by name.
// A member named twice anywhere in the message is refused too: the SDK
// would read the last, a proxy or log before it perhaps the first.
func textProblem(body []byte) string {
	if err := airlock.CheckJSONEncoding("message", body); err != nil {
		return "invalid params: the message " + asError(err).Message + "; nothing was executed"
	}
	if err := airlock.CheckJSONNames("", body); err != nil {
		e := asError(err)
		return "invalid params: " + e.Field + ": " + e.Message
	}
	return ""
}

// firstStatelessRevision is the MCP revision that removed sessions and
// initialize: a request of it (or later) is served by the stateless
// handler, one of an earlier revision in a session (docs/gateway.md).
const firstStatelessRevision = "2026-07-28"

// ServedMCPVersions are the MCP revisions /mcp serves, newest first:
// 2026-07-28 without sessions, the ones before it with initialize.
func ServedMCPVersions() []string { return slices.Clone(servedVersions) }

// servedVersions is read on every request that names a revision; the SDK's
// accessor copies its list each call.
var servedVersions = mcp.SupportedProtocolVersions()

// MetaProtocolVersion is the _meta field in which a 2026-07-28 request
// names its revision.
const MetaProtocolVersion = "io.modelcontextprotocol/protocolVersion"

// mcpFront checks each POST to /mcp before the SDK sees it, and sends it
// to the handler of its revision. A body over the limit, a body that is
// not JSON, a message that is not JSON-RPC, a malformed _meta and a
// protocol version no revision has get a JSON-RPC error naming what is
// wrong (the SDK answers some of them in plain text, and reads others
// into another value). A request without a session that speaks 2026-07-28
// — server/discover, or the revision in its MCP-Protocol-Version header
// or its _meta — goes to the stateless handler; everything else (an
// initialize, a session's requests, GET and DELETE) to the stateful one.
func (g *Gateway) mcpFront(stateful, stateless http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := PrincipalFrom(r.Context())
		if r.Method != http.MethodPost {
			g.guardSession(w, r, p.Name, "", nil, func(w http.ResponseWriter) { stateful.ServeHTTP(w, r) })
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
		msg, code, problem := parseEdge(body)
		if code != 0 {
			writeRPCError(w, http.StatusBadRequest, code, problem, nil, msg.id())
			return
		}
		if problem := textProblem(body); problem != "" {
			writeRPCError(w, http.StatusBadRequest, rpcInvalidParams, problem, nil, msg.ID)
			return
		}
		session := r.Header.Get("Mcp-Session-Id")
		var d *dropWriter // the answer of a request of the session
		owned := false    // a session airlock saw this principal open
		if session != "" {
			if msg.Method != "" && len(msg.ID) > 0 {
				d = &dropWriter{ResponseWriter: w, gone: make(chan struct{})}
			}
			reqID := string(msg.ID)
			if s := g.sessions.begin(session, p.Name, reqID, d); s != nil {
				owned = true
				defer g.sessions.end(s, reqID, d)
			} else {
				d = nil // not airlock's to track: the SDK refuses the session
			}
		}
		requested := r.Header.Get("Mcp-Protocol-Version")
		if requested == "" {
			requested = msg.protocolVersion()
		}
		if requested != "" && !slices.Contains(servedVersions, requested) {
			writeRPCError(w, http.StatusBadRequest, rpcUnsupportedProtocolVersion,
				fmt.Sprintf("protocol version %q is not one airlock speaks; use one of %s", requested, strings.Join(servedVersions, ", ")),
				map[string]any{"supported": servedVersions, "requested": requested}, msg.ID)
			return
		}
		if name := r.Header.Get("Mcp-Name"); name != "" && strings.HasPrefix(msg.Method, "tasks/") && name != msg.taskID {
			// The Tasks extension routes on Mcp-Name: a header that names
			// another task than the body would send the request where the
			// task is not (the SDK checks the header of its own methods).
			writeRPCError(w, http.StatusBadRequest, rpcHeaderMismatch,
				fmt.Sprintf("header mismatch: Mcp-Name %s is not the request's params.taskId %s; nothing was done", quoteShort(name), quoteShort(msg.taskID)), nil, msg.ID)
			return
		}
		if g.fastCall(w, d, r, p.Name, session, owned, requested, &msg) {
			return
		}
		if msg.task {
			body = liftTask(body)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		w = &codedWriter{ResponseWriter: w} // the SDK's code 0 (rpccodes.go)
		if session == "" && (msg.Method == "server/discover" || requested >= firstStatelessRevision) {
			// No session: the principal rides on the request's context.
			stateless.ServeHTTP(w, r)
			return
		}
		switch {
		case msg.Method == "notifications/cancelled" && session != "":
			// Mark the cancelled request before the SDK cancels its handler,
			// so that the answer the handler still returns is not sent: the
			// receiver of a cancellation SHOULD NOT respond. The work goes on,
			// and the next repeat gets its result.
			g.sessions.cancel(session, p.Name, string(msg.cancelledID))
		case d != nil:
			w = &codedWriter{ResponseWriter: d}
		}
		g.guardSession(w, r, p.Name, msg.Method, msg.ID, func(w http.ResponseWriter) { stateful.ServeHTTP(w, r) })
	})
}

// dropWriter passes a response through until its request is cancelled,
// then swallows what is written.
type dropWriter struct {
	http.ResponseWriter
	dropped atomic.Bool
	// gone closes when the request is cancelled: airlock's own wait for
	// the answer ends (the fast path; the SDK ends its handler itself).
	gone chan struct{}
}

// giveUp silences the answer and ends the wait for it, once.
func (d *dropWriter) giveUp() {
	if d.dropped.CompareAndSwap(false, true) {
		close(d.gone)
	}
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

// edgeMessage is what the edge reads of a JSON-RPC message, in one pass.
type edgeMessage struct {
	ID     json.RawMessage
	Method string
	// cancelledID is a notifications/cancelled's requestId.
	cancelledID json.RawMessage
	// task says a tools/call is task-augmented (2025-11-25's params.task).
	task bool
	// taskID is a task method's params.taskId.
	taskID string
	// params and meta are the request's params and params._meta, member
	// by member (nil when absent or not objects), for the fast path.
	params, meta map[string]json.RawMessage
	// metaText are the metaStrings fields of _meta, in their order, as
	// decoded ("" when absent or null).
	metaText [len(metaStrings)]string
}

// protocolVersion is _meta's io.modelcontextprotocol/protocolVersion
// (metaStrings' first field).
func (m *edgeMessage) protocolVersion() string { return m.metaText[0] }

// metaString is the text of one of the metaStrings fields of _meta.
func (m *edgeMessage) metaString(field string) string {
	for i, f := range metaStrings {
		if f == field {
			return m.metaText[i]
		}
	}
	return ""
}

// liftTask moves a tools/call's params.task into its _meta, where the
// SDK keeps it for the handler (its CallToolParams has no such field).
// body has passed parseEdge.
func liftTask(body []byte) []byte {
	var msg, params, meta map[string]json.RawMessage
	if json.Unmarshal(body, &msg) != nil || json.Unmarshal(msg["params"], &params) != nil {
		return body
	}
	if raw := params["_meta"]; len(raw) > 0 && raw[0] == '{' {
		_ = json.Unmarshal(raw, &meta)
	}
	if meta == nil {
		meta = map[string]json.RawMessage{}
	}
	meta[metaTaskRequest] = params["task"]
	delete(params, "task")
	var err error
	if params["_meta"], err = json.Marshal(meta); err != nil {
		return body
	}
	if msg["params"], err = json.Marshal(params); err != nil {
		return body
	}
	out, err := json.Marshal(msg)
	if err != nil {
		return body
	}
	return out
}

// id is the message's id when it is one an answer may name.
func (m *edgeMessage) id() json.RawMessage {
	if len(m.ID) == 0 || idProblem(m.ID, false) != "" {
		return nil
	}
	return m.ID
}

// parseEdge reads a message and says, with a JSON-RPC error code, what
// keeps the SDK from reading it whole: not JSON, a batch (no revision
// airlock serves over HTTP takes one, and the SDK's stdio reader would end
// the session on it), not an object with "jsonrpc": "2.0" and a method, an
// id that is not a string or an integer the SDK can hold (it would end a
// stdio session on an object id, and answer 1.5 as 1 or an id beyond int64
// as another number: the answer must name the request's own id or none),
// or a _meta whose fields airlock reads are not of their type (the SDK or
// airlock would drop them, and a call would run under another run id).
func parseEdge(body []byte) (edgeMessage, int, string) {
	var out edgeMessage
	trimmed := bytes.TrimSpace(body)
	notJSON := func(err error) (int, string) {
		return rpcParseError, "parse error: the body is not JSON (" + err.Error() + "); send one JSON-RPC 2.0 message"
	}
	if len(trimmed) == 0 {
		code, problem := notJSON(errors.New("the body is empty"))
		return out, code, problem
	}
	// Members are read by their exact names, as the SDK reads them (a map,
	// not a struct: encoding/json would match "Method" or "_META" too).
	var msg map[string]json.RawMessage
	if trimmed[0] == '{' {
		// One pass: the decoder checks the whole body is JSON before it
		// fills anything in.
		if err := json.Unmarshal(trimmed, &msg); err != nil {
			code, problem := notJSON(err)
			return out, code, problem
		}
		out.ID = msg["id"]
		if tooDeep(trimmed) {
			return out, rpcInvalidRequest, fmt.Sprintf("invalid request: the message nests deeper than %d levels; nothing was executed", maxDepth)
		}
	} else {
		var v any
		if err := json.Unmarshal(trimmed, &v); err != nil {
			code, problem := notJSON(err)
			return out, code, problem
		}
		if trimmed[0] == '[' {
			return out, rpcInvalidRequest, "invalid request: a batch (a JSON array of messages) is not served; send one JSON-RPC 2.0 message at a time"
		}
		return out, rpcInvalidRequest, "invalid request: a JSON-RPC message is an object with \"jsonrpc\": \"2.0\""
	}
	out.ID = msg["id"]
	if v, ok := msg["jsonrpc"]; !ok || string(v) != `"2.0"` {
		if s, isString := jsonString(v); !ok || !isString || s != "2.0" {
			return out, rpcInvalidRequest, "invalid request: \"jsonrpc\" must be \"2.0\""
		}
	}
	method, hasMethod := msg["method"]
	_, hasResult := msg["result"]
	_, hasError := msg["error"]
	if !hasMethod && !hasResult && !hasError {
		return out, rpcInvalidRequest, "invalid request: \"method\" is required (a string such as \"tools/call\")"
	}
	if hasMethod {
		var isString bool
		if out.Method, isString = jsonString(method); !isString || out.Method == "" {
			return out, rpcInvalidRequest, "invalid request: \"method\" must be a non-empty string such as \"tools/call\""
		}
	}
	if id, ok := msg["id"]; ok {
		// A response may carry a null id (its request could not be read).
		if problem := idProblem(id, !hasMethod); problem != "" {
			return out, rpcInvalidRequest, "invalid request: \"id\" " + problem
		}
	}
	rawParams := msg["params"]
	if out.Method == "" || len(rawParams) == 0 || rawParams[0] != '{' {
		return out, 0, ""
	}
	var params map[string]json.RawMessage
	_ = json.Unmarshal(rawParams, &params)
	out.params = params
	out.cancelledID = params["requestId"]
	if strings.HasPrefix(out.Method, "tasks/") {
		out.taskID, _ = jsonString(params["taskId"])
	}
	if task := params["task"]; out.Method == "tools/call" && len(task) > 0 && string(task) != "null" {
		if task[0] != '{' {
			return out, rpcInvalidParams, fmt.Sprintf("invalid params: \"task\" must be an object such as {\"ttl\": 60000}, not %s; nothing was executed", kindOf(task))
		}
		out.task = true
	}
	rawMeta := params["_meta"]
	if len(rawMeta) == 0 || string(rawMeta) == "null" {
		return out, 0, ""
	}
	if rawMeta[0] != '{' {
		return out, rpcInvalidParams, "invalid params: \"_meta\" must be an object; nothing was executed"
	}
	var meta map[string]json.RawMessage
	_ = json.Unmarshal(rawMeta, &meta)
	out.meta = meta
	for i, field := range metaStrings {
		v, ok := meta[field]
		if !ok || string(v) == "null" {
			continue
		}
		s, isString := jsonString(v)
		if !isString {
			return out, rpcInvalidParams, fmt.Sprintf("invalid params: _meta[%q] must be a string, not %s; nothing was executed", field, kindOf(v))
		}
		out.metaText[i] = s
	}
	if v, ok := meta[metaClientCapabilities]; ok && (len(v) == 0 || v[0] != '{') {
		return out, rpcInvalidParams, fmt.Sprintf("invalid params: _meta[%q] must be an object, not %s; nothing was executed", metaClientCapabilities, kindOf(v))
	}
	return out, 0, ""
}

// jsonString decodes v, a valid JSON value, when it is a string (null
// reads as "", as encoding/json reads it into a string). A string
// with no escape and valid UTF-8 is its own text between the quotes (the
// common case, without the decoder's allocations); any other goes through
// encoding/json, which reads it as the SDK does.
func jsonString(v json.RawMessage) (string, bool) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		inner := v[1 : len(v)-1]
		if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
			return string(inner), true
		}
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// maxDepth is how deep a message may nest: the SDK refuses deeper ones,
// and over stdio a message it cannot read would end the session.
const maxDepth = 1000

// tooDeep says whether a JSON text (already known to be valid) nests
// deeper than maxDepth.
func tooDeep(b []byte) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
			if depth > maxDepth {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// metaStrings are the _meta fields airlock reads as text; the protocol
// version first (edgeMessage.protocolVersion reads it from there).
var metaStrings = [...]string{MetaProtocolVersion, MetaRun, MetaCallID, metaTraceParent, metaTraceState}

const metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"

// kindOf names a JSON value's kind for an error message.
func kindOf(v json.RawMessage) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
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
