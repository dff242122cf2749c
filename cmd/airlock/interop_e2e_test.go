package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
)

// mcp-go (github.com/mark3labs/mcp-go), a second MCP client
// implementation, with its default settings: over streamable HTTP against
// airlock serve and over stdio against airlock mcp it lists the tools,
// calls a write tool, and a repeat gets the first result without a second
// execution.
func TestE2EMCPGoClient(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "airlock.db")
	srv := serve(t, config, dsn)

	for _, tc := range []struct {
		name    string
		connect func(t *testing.T) *mcpgoclient.Client
	}{
		{"streamable HTTP", func(t *testing.T) *mcpgoclient.Client {
			c, err := mcpgoclient.NewStreamableHttpClient(srv.url()+"/mcp", transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + agentToken}))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"stdio", func(t *testing.T) *mcpgoclient.Client {
			c, err := mcpgoclient.NewStdioMCPClient(bin(t, "airlock"), tokenEnv, "mcp", "--config", config, "--db", "sqlite:"+filepath.Join(t.TempDir(), "stdio.db"))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			c := tc.connect(t)
			defer c.Close()
			init, err := c.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{ClientInfo: mcpgo.Implementation{Name: "mcp-go-agent", Version: "v1"}}})
			if err != nil {
				t.Fatalf("initialize: %v", err)
			}
			if init.ServerInfo.Name != "airlock" {
				t.Errorf("server %+v", init.ServerInfo)
			}
			tools, err := c.ListTools(ctx, mcpgo.ListToolsRequest{})
			if err != nil {
				t.Fatalf("tools/list: %v", err)
			}
			names := map[string]bool{}
			for _, tool := range tools.Tools {
				names[tool.Name] = true
			}
			if !names["add_note"] || !names["get_withdrawal"] || !names["plan_approve_withdrawal"] || names["approve_withdrawal"] {
				t.Errorf("tools %v", names)
			}
			record := "WD-" + map[string]string{"streamable HTTP": "HTTP", "stdio": "STDIO"}[tc.name]
			call := func() map[string]any {
				t.Helper()
				res, err := c.CallTool(ctx, mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": record, "text": "checked by mcp-go"}}})
				if err != nil || res.IsError {
					t.Fatalf("tools/call: %v %+v", err, res)
				}
				b, _ := json.Marshal(res.StructuredContent)
				var out map[string]any
				if err := json.Unmarshal(b, &out); err != nil {
					t.Fatalf("structured content %s: %v", b, err)
				}
				return out
			}
			first, second := call(), call()
			if first["status"] != "succeeded" || first["repeat"] == true {
				t.Errorf("first call %v", first)
			}
			if second["repeat"] != true || second["status"] != "succeeded" {
				t.Errorf("repeat %v", second)
			}
			if fr, _ := json.Marshal(first["result"]); string(fr) != mustJSON(second["result"]) {
				t.Errorf("the repeat's result %v differs from the first %v", second["result"], first["result"])
			}
			if n := len(stats(t, payments).Notes[record]); n != 1 {
				t.Errorf("%s: %d notes written, want 1", record, n)
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
