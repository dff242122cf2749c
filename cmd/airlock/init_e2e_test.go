package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"
)

// itemsServer is an MCP server over streamable HTTP with one read tool and
// one write tool (and, when withDelete, a destructive one), counting the
// writes it does.
func itemsServer(t *testing.T, withDelete bool, tagSchema string) (url string, tags *atomic.Int64) {
	t.Helper()
	tags = new(atomic.Int64)
	srv := mcp.NewServer(&mcp.Implementation{Name: "Items Server", Version: "v1"}, nil)
	type idArgs struct {
		ID string `json:"id"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "get_item", Description: "Read an item.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *mcp.CallToolRequest, a idArgs) (*mcp.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"id": a.ID, "tags": tags.Load()}, nil
		})
	tagTool := &mcp.Tool{Name: "add_tag", Description: "Tag an item.", Annotations: &mcp.ToolAnnotations{DestructiveHint: new(bool)}}
	if tagSchema == "" {
		tagSchema = `{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`
	}
	tagTool.InputSchema = json.RawMessage(tagSchema)
	mcp.AddTool(srv, tagTool, func(ctx context.Context, req *mcp.CallToolRequest, a map[string]any) (*mcp.CallToolResult, map[string]any, error) {
		return nil, map[string]any{"tagged": a["id"], "n": tags.Add(1)}, nil
	})
	if withDelete {
		yes := true
		mcp.AddTool(srv, &mcp.Tool{Name: "delete_item", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}},
			func(ctx context.Context, req *mcp.CallToolRequest, a idArgs) (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted"}}}, nil, nil
			})
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL + "/mcp", tags
}

// TestE2EInitFromMCP: airlock init --from-mcp writes a manifest that tools
// check refuses until a person answers; answered, airlock serves it and a
// repeated call to the write tool runs once; run again against the changed
// server it reports what changed and keeps the answers.
func TestE2EInitFromMCP(t *testing.T) {
	t.Parallel()
	url, tags := itemsServer(t, true, "")
	path := filepath.Join(t.TempDir(), "airlock.yaml")

	r := runCLI(t, "init", "--from-mcp", "--url", url, "--out", path)
	if r.code != 0 {
		t.Fatalf("init: exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{`upstream "items_server"`, "added: add_tag, delete_item, get_item", "10 place(s) to answer"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("init said %q, want %q", r.stdout, want)
		}
	}
	r = runCLI(t, "tools", "check", "--config", path)
	if r.code != 1 || !strings.Contains(r.stdout, "tools[0].answers.undo: tool add_tag: missing answer") ||
		!strings.Contains(r.stdout, "tools[1].natural_key: tool delete_item: required") {
		t.Fatalf("tools check of an unanswered manifest: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A person answers (and gives the server tokens).
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := strings.NewReplacer(
		"natural_key: []", "natural_key: [{field: id}]",
		"window: #", "window: forever #",
		`undo: ""`, `undo: "Yes: remove the tag."`,
		`approver: ""`, `approver: "No one."`,
		`on_repeat: ""`, `on_repeat: "The first tagging is returned."`,
	).Replace(string(data))
	src += "auth:\n  tokens:\n    - {name: agent-1, role: agent, env: E2E_AGENT}\n"
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "tools", "check", "--config", path); r.code != 0 {
		t.Fatalf("tools check after answering: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// Served: the write tool runs once for two identical calls.
	a := serve(t, path, "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	s := mcpClient(t, a.url(), agentToken)
	for i := range 2 {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "add_tag", Arguments: map[string]any{"id": "it-1"}})
		if err != nil || res.IsError {
			t.Fatalf("call %d: %v %+v", i, err, res)
		}
	}
	if n := tags.Load(); n != 1 {
		t.Fatalf("the write ran %d times for two identical calls", n)
	}
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "get_item", Arguments: map[string]any{"id": "it-1"}})
	if err != nil || res.IsError || structured(t, res)["tags"] != float64(1) {
		t.Fatalf("read through airlock: %v %+v", err, res)
	}

	// The server changes: add_tag takes other arguments, delete_item is gone.
	url2, _ := itemsServer(t, false, `{"type":"object","properties":{"id":{"type":"string"},"tag":{"type":"string"}}}`)
	src2 := strings.Replace(src, url, url2, 1)
	if err := os.WriteFile(path, []byte(src2), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, "init", "--from-mcp", "--url", url2, "--out", path, "--upstream", "items_server")
	if r.code != 0 || !strings.Contains(r.stdout, "updated") || !strings.Contains(r.stdout, "schema changed: add_tag; no longer offered: delete_item") {
		t.Fatalf("init again: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, kept := range []string{"Yes: remove the tag.", "The first tagging is returned.", "env: E2E_AGENT", "tag:"} {
		if !strings.Contains(string(after), kept) {
			t.Errorf("%q missing after the second run:\n%s", kept, after)
		}
	}
}

func TestInitBadInput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{"init"}, "--from-mcp is required"},
		{"no server", []string{"init", "--from-mcp"}, "--command (an MCP server over stdio) or --url"},
		{"both", []string{"init", "--from-mcp", "--command", "x", "--url", "http://127.0.0.1:1/mcp"}, "not both"},
		{"open quote", []string{"init", "--from-mcp", "--command", `server "a b`}, `--command: an unclosed " quote`},
		{"bad upstream name", []string{"init", "--from-mcp", "--command", "true", "--upstream", "a b", "--timeout", "1s"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runCLI(t, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q, want %q", r.code, r.stderr, tc.want)
			}
		})
	}
}

func TestSplitCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"npx -y pkg /srv", []string{"npx", "-y", "pkg", "/srv"}},
		{`server "a b" 'c d' e\ f`, []string{"server", "a b", "c d", "e f"}},
		{`x "" y`, []string{"x", "", "y"}},
		{`  spaced   out  `, []string{"spaced", "out"}},
		{`'it''s'`, []string{"its"}},
	} {
		got, err := splitCommand(tc.in)
		if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
			t.Errorf("splitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "   ", `a "b`, `a\`} {
		if _, err := splitCommand(bad); err == nil {
			t.Errorf("splitCommand(%q): no error", bad)
		}
	}
}

// TestE2EInitFromFilesystemServer runs airlock init against the reference
// filesystem server (@modelcontextprotocol/server-filesystem, over stdio).
// AIRLOCK_TEST_MCP_FILESYSTEM names its command (.ci/run installs it with
// npm); without it the test is skipped.
func TestE2EInitFromFilesystemServer(t *testing.T) {
	t.Parallel()
	server := os.Getenv("AIRLOCK_TEST_MCP_FILESYSTEM")
	if server == "" {
		t.Skip("AIRLOCK_TEST_MCP_FILESYSTEM is not set (the path of mcp-server-filesystem)")
	}
	root := t.TempDir()
	path := filepath.Join(t.TempDir(), "airlock.yaml")
	command := server + " '" + root + "'"
	r := runCLI(t, "init", "--from-mcp", "--command", command, "--out", path, "--upstream", "fs")
	if r.code != 0 {
		t.Fatalf("init: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Upstreams map[string]struct {
			MCP struct{ Command []string } `yaml:"mcp"`
		}
		Tools []struct {
			Name, Kind  string
			InputSchema map[string]any `yaml:"input_schema"`
			Upstream    struct{ Name, Tool string }
		}
	}
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if got := m.Upstreams["fs"].MCP.Command; len(got) != 2 || got[0] != server || got[1] != root {
		t.Fatalf("upstream command %q", got)
	}
	kinds := map[string]string{}
	for _, tool := range m.Tools {
		kinds[tool.Name] = tool.Kind
		if tool.Upstream.Name != "fs" || tool.Upstream.Tool != tool.Name || tool.InputSchema["type"] != "object" {
			t.Errorf("%s: upstream %+v, schema %v", tool.Name, tool.Upstream, tool.InputSchema)
		}
	}
	for name, want := range map[string]string{"read_text_file": "read", "list_directory": "read", "write_file": "irreversible", "edit_file": "irreversible"} {
		if kinds[name] != want {
			t.Errorf("%s: kind %q, want %q (all: %v)", name, kinds[name], want, kinds)
		}
	}
	r = runCLI(t, "tools", "check", "--config", path)
	if r.code != 1 || !strings.Contains(r.stdout, "tool write_file: missing answer") || strings.Contains(r.stdout, "read_text_file") {
		t.Fatalf("tools check: exit %d\n%s", r.code, r.stdout)
	}
	r = runCLI(t, "init", "--from-mcp", "--command", command, "--out", path, "--upstream", "fs")
	if r.code != 0 || !strings.Contains(r.stdout, "no change ("+strconv.Itoa(len(m.Tools))+" tools)") {
		t.Fatalf("init again: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}
