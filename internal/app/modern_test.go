package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const modernManifest = `version: 1
upstreams:
  docs: {mcp: {url: "DOCS", resources: true, prompts: true}}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: docs, tool: lookup}
  - name: note
    kind: write
    input_schema: {type: object, properties: {id: {type: string}}, required: [id]}
    natural_key: [{field: id}]
    window: forever
    upstream: {name: docs, tool: lookup}
    answers: {undo: "Yes, delete it.", approver: "No one.", on_repeat: "One note per id."}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// modernPost sends one 2026-07-28 request (no session; the revision in the
// header and in _meta, the method and name in their headers) with the
// agent's token and returns the JSON-RPC response.
func modernPost(t *testing.T, url, method, name string, params map[string]any) map[string]any {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	meta, _ := params["_meta"].(map[string]any)
	if meta == nil {
		meta = map[string]any{}
	}
	meta["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
	meta["io.modelcontextprotocol/clientCapabilities"] = map[string]any{}
	params["_meta"] = meta
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, _ := http.NewRequest("POST", url+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+agentToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The response is the stream's last message.
		var last string
		for line := range strings.SplitSeq(string(raw), "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				last = strings.TrimSpace(d)
			}
		}
		raw = []byte(last)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: HTTP %d %q: %v", method, resp.StatusCode, raw, err)
	}
	return out
}

// serverInfoName is the name in a result's _meta serverInfo ("" when none).
func serverInfoName(meta map[string]any) string {
	si, _ := meta[mcp.MetaKeyServerInfo].(map[string]any)
	name, _ := si["name"].(string)
	return name
}

// On 2026-07-28 every result airlock answers is a result of that revision,
// whatever revision its upstream speaks: resultType "complete" and
// airlock's own serverInfo in _meta, never the upstream's (clients such as
// @ai-sdk/mcp refuse a result without resultType). The upstreams: the
// go-sdk's server with sessions (airlock's client settles on 2025-11-25
// with it) and the same server stateless (2026-07-28). A session agent
// never sees the upstream's serverInfo either.
func TestMCPModernResultsWhateverTheUpstream(t *testing.T) {
	t.Parallel()
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("StatelessUpstream=%v", stateless), func(t *testing.T) {
			t.Parallel()
			s := contentMCPServer("docs-server", "file:///readme.txt")
			up := upstreamServer(t, s, &mcp.StreamableHTTPOptions{Stateless: stateless})
			url := startApp(t, modernManifest, "DOCS", up.URL)
			for _, tc := range []struct {
				method, name string
				params       map[string]any
			}{
				{"tools/list", "", nil},
				{"resources/list", "", nil},
				{"resources/templates/list", "", nil},
				{"resources/read", "file:///readme.txt", map[string]any{"uri": "file:///readme.txt"}},
				{"resources/read", "notes://docs-server/7", map[string]any{"uri": "notes://docs-server/7"}},
				{"prompts/list", "", nil},
				{"prompts/get", "summarize", map[string]any{"name": "summarize", "arguments": map[string]any{"topic": "dogs"}}},
				{"completion/complete", "", map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "summarize"}, "argument": map[string]any{"name": "topic", "value": "d"}}},
				{"tools/call", "lookup", map[string]any{"name": "lookup", "arguments": map[string]any{}}},
				// A write on the fast path, its repeat, and one on the
				// SDK's path (a progress token), whose upstream result
				// is stored with the record.
				{"tools/call", "note", map[string]any{"name": "note", "arguments": map[string]any{"id": "N-1"}}},
				{"tools/call", "note", map[string]any{"name": "note", "arguments": map[string]any{"id": "N-1"}}},
				{"tools/call", "note", map[string]any{"name": "note", "arguments": map[string]any{"id": "N-2"}, "_meta": map[string]any{"progressToken": "p-1"}}},
				{"tools/call", "note", map[string]any{"name": "note", "arguments": map[string]any{"id": "N-2"}, "_meta": map[string]any{"progressToken": "p-2"}}},
			} {
				out := modernPost(t, url, tc.method, tc.name, tc.params)
				res, _ := out["result"].(map[string]any)
				if res == nil {
					t.Errorf("%s %s: %v", tc.method, tc.name, out)
					continue
				}
				meta, _ := res["_meta"].(map[string]any)
				if res["resultType"] != "complete" || serverInfoName(meta) != "airlock" {
					t.Errorf("%s %s: resultType %v, _meta serverInfo %v; want complete and airlock's", tc.method, tc.name, res["resultType"], meta[mcp.MetaKeyServerInfo])
				}
			}

			// In a session (2025-11-25) the upstream's serverInfo is not
			// airlock's to pass on either.
			cs := connectAgent(t, url, nil, "2025-11-25")
			ctx := context.Background()
			read, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "file:///readme.txt"})
			if err != nil {
				t.Fatal(err)
			}
			prompt, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize", Arguments: map[string]string{"topic": "cats"}})
			if err != nil {
				t.Fatal(err)
			}
			call, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "lookup", Arguments: map[string]any{}})
			if err != nil {
				t.Fatal(err)
			}
			write, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "note", Arguments: map[string]any{"id": "N-2"}})
			if err != nil {
				t.Fatal(err)
			}
			for what, meta := range map[string]mcp.Meta{"resources/read": read.Meta, "prompts/get": prompt.Meta, "a read": call.Meta, "a write's repeat": write.Meta} {
				if si, ok := meta[mcp.MetaKeyServerInfo]; ok {
					t.Errorf("in a session, %s carries serverInfo %v", what, si)
				}
			}
		})
	}
}
