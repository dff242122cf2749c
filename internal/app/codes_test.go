package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const codesManifest = `version: 1
upstreams:
  docs: {mcp: {url: "DOCS", resources: true}}
tools:
  - name: lookup
    kind: read
    input_schema: {type: object}
    upstream: {name: docs, tool: lookup}
auth:
  tokens:
    - {name: agent-1, role: agent, sha256: "HASH"}
`

// Every error airlock answers over MCP has a JSON-RPC code: an upstream's
// refusal with code 0 (the go-sdk answers a handler's plain error so),
// passed back as it came, becomes -32603 with its message; an upstream's
// refusal with a code keeps it. In a session and on 2026-07-28.
func TestMCPErrorsHaveJSONRPCCodes(t *testing.T) {
	t.Parallel()
	s := contentMCPServer("docs", "file:///readme.txt")
	s.AddResource(&mcp.Resource{URI: "file:///broken.txt", Name: "broken"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, errors.New("the disk is on fire")
	})
	docs := upstreamServer(t, s, nil)
	url := startApp(t, codesManifest, "DOCS", docs.URL)
	ctx := context.Background()
	for _, version := range []string{"", "2025-11-25"} {
		cs := connectAgent(t, url, nil, version)
		for _, tc := range []struct {
			uri     string
			code    int64
			message string
		}{
			{"file:///broken.txt", jsonrpc.CodeInternalError, "the disk is on fire"},
			{"file:///nowhere.txt", jsonrpc.CodeInvalidParams, "not found"}, // resource not found (SEP-2164)
		} {
			_, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: tc.uri})
			var e *jsonrpc.Error
			if !errors.As(err, &e) || e.Code != tc.code || !strings.Contains(e.Message, tc.message) {
				t.Errorf("revision %q, %s: %v (%#v), want code %d naming %q", version, tc.uri, err, e, tc.code, tc.message)
			}
		}
	}
}
