package gateway

import (
	"bytes"
	"encoding/json"
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

// The fast path answers the hot request of /mcp — a plain tools/call of a
// guarded write — before the SDK, with the same answer the SDK's handler
// gives (mcpHandlerNamed and toolResult build both), as one JSON response.
// On this SDK a request costs about as much CPU as the guarded call itself
// (every message is decoded several times, each time with a fresh 32 KiB
// buffer, and a stateless request connects a whole server session), and
// it is what makes airlock's /mcp slower than a hand-written server on the
// same SDK (docs/BENCHMARKS.md; decision 66).
//
// The fast path takes only what the SDK would accept and answer the same:
// anything else — another method, a read, a plan, a task, a progress
// token, an answer to input requests, a header the SDK checks against the
// body, a request the SDK would refuse — goes to the SDK unchanged, and
// the SDK answers it (with its error, where it has one).

// fastParam reports whether a tools/call param is one the fast path
// serves; any other member (task, inputResponses, requestState, one a
// later revision adds) sends the request to the SDK.
func fastParam(name string) bool {
	switch name {
	case "name", "arguments", "_meta":
		return true
	}
	return false
}

// fastCall answers msg, a request to /mcp of principal, if it is one the
// fast path serves, and reports whether it did; owned says session is one
// airlock saw principal open.
func (g *Gateway) fastCall(w http.ResponseWriter, d *dropWriter, r *http.Request, principal, session string, owned bool, requested string, msg *edgeMessage) bool {
	if g.fastOff || msg.Method != "tools/call" || msg.task || len(msg.ID) == 0 || msg.params == nil {
		return false
	}
	for k := range msg.params {
		if !fastParam(k) {
			return false
		}
	}
	name, ok := jsonString(msg.params["name"])
	if !ok {
		return false
	}
	rt := g.routes[name]
	if rt == nil || rt.kind != routeWrite || !fastHeaders(r, name) {
		return false
	}
	if _, ok := msg.meta["progressToken"]; ok {
		return false
	}
	if _, ok := msg.meta[metaTaskRequest]; ok {
		return false
	}
	var stateless bool
	switch {
	case session != "":
		// A session airlock saw this principal open, on a revision with
		// sessions; the SDK ends it (DELETE, idle, shutdown) before airlock
		// forgets it, so an ended one goes to the SDK, which says so.
		if requested >= firstStatelessRevision || msg.protocolVersion() != "" || !owned {
			return false
		}
	case requested >= firstStatelessRevision:
		// 2026-07-28: the header and _meta name the same revision, and
		// _meta holds the client's capabilities (and its info, if any) as
		// objects, as the SDK requires; a client that declares the Tasks
		// extension may get a task, which the SDK's path makes.
		if msg.protocolVersion() != requested || r.Header.Get("Mcp-Protocol-Version") != requested {
			return false
		}
		if caps := msg.meta[metaClientCapabilities]; len(caps) == 0 || caps[0] != '{' || declaresTasksRaw(caps) {
			return false
		}
		if info, ok := msg.meta[metaClientInfo]; ok && (len(info) == 0 || info[0] != '{') {
			return false
		}
		stateless = true
	default:
		return false
	}

	ctx := r.Context()
	var giveUp <-chan struct{}
	if d != nil {
		// A notifications/cancelled for this request silences its answer
		// (d) and ends its wait (d.gone); the work goes on, as on the SDK's
		// path. (A stateless request is cancelled by closing its stream,
		// which ends r's context.)
		w, giveUp = d, d.gone
	}
	if principal != "" {
		ctx = airlock.WithActor(ctx, principal)
	}
	creq := g.mcpCallRequest(name, msg.params["arguments"], msg.metaString, r.Header, session, principal, stateless)
	// A stateless request's context ends only when its stream closes: its
	// answer then goes nowhere. (A session's request may be cancelled by
	// notifications/cancelled while its stream stays open, which must then
	// end at once, so it keeps the guard's wait.)
	creq.WaitsToEnd = stateless
	creq.GiveUp = giveUp
	a, err := g.Call(ctx, creq)
	if err != nil {
		res, refusal := g.mcpCallError(name, err)
		if refusal != nil {
			writeJSON(w, http.StatusOK, rpcError(int(refusal.Code), refusal.Message, refusal.Data, msg.ID))
			return true
		}
		writeFastResult(w, msg.ID, res, stateless, g.impl)
		return true
	}
	writeFastResult(w, msg.ID, g.toolResult(rt, a), stateless, g.impl)
	return true
}

// writeFastResult writes a tools/call's result as its JSON-RPC response.
func writeFastResult(w http.ResponseWriter, id json.RawMessage, res *mcp.CallToolResult, stateless bool, impl *mcp.Implementation) {
	if stateless {
		// As the SDK does for a 2026-07-28 request: the server names itself
		// in the result's _meta, and the result says it is complete.
		if res.Meta == nil {
			res.Meta = mcp.Meta{}
		}
		res.Meta[mcp.MetaKeyServerInfo] = impl
	}
	body, err := json.Marshal(res)
	if err != nil {
		e := asError(airlock.Errorf(airlock.CodeInternal, "the answer could not be written as JSON: %v", err))
		body, _ = json.Marshal(&mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: e.Message}}, StructuredContent: errorBody{e}})
	}
	var out bytes.Buffer
	out.Grow(len(body) + len(id) + 64)
	out.WriteString(`{"jsonrpc":"2.0","id":`)
	out.Write(id)
	out.WriteString(`,"result":`)
	if stateless {
		out.WriteString(`{"resultType":"complete",`)
		body = body[1:]
	}
	out.Write(body)
	out.WriteString("}\n")
	h := w.Header()
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("Content-Type", "application/json")
	_, _ = w.Write(out.Bytes())
}

// fastHeaders reports whether a tools/call of tool carries only headers
// the fast path answers as the SDK would: a JSON body, an Accept of both
// JSON and an event stream, Mcp-Method and Mcp-Name (if sent) that agree
// with the body, no Mcp-Param-* header (the SDK checks those against the
// tool's schema), no Last-Event-ID, and a Host the SDK's DNS rebinding
// protection lets through.
func fastHeaders(r *http.Request, tool string) bool {
	if ct, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || ct != "application/json" {
		return false
	}
	jsonOK, streamOK := accepts(r.Header.Values("Accept"))
	if !jsonOK || !streamOK || r.Header.Get("Last-Event-ID") != "" {
		return false
	}
	if m := r.Header.Values("Mcp-Method"); len(m) > 1 || (len(m) == 1 && m[0] != "tools/call") {
		return false
	}
	if n := r.Header.Values("Mcp-Name"); len(n) > 1 || (len(n) == 1 && n[0] != tool) {
		return false
	}
	for k := range r.Header {
		if strings.HasPrefix(k, "Mcp-Param-") {
			return false
		}
	}
	if local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && loopback(local.String()) && !loopback(r.Host) {
		return false
	}
	return true
}

// accepts reads Accept as the SDK does: the base media types, with
// wildcards.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, v := range values {
		for raw := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(raw, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// loopback reports whether a host (with or without a port) is a loopback
// address or localhost.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// metaClientInfo is the _meta field in which a 2026-07-28 request names
// its client.
const metaClientInfo = "io.modelcontextprotocol/clientInfo"

// declaresTasksRaw is declaresTasks over the clientCapabilities' JSON.
func declaresTasksRaw(caps json.RawMessage) bool {
	var c map[string]any
	if json.Unmarshal(caps, &c) != nil {
		return true // the SDK's path reads it, and says what is wrong
	}
	return declaresTasks(map[string]any{metaClientCapabilities: c})
}
