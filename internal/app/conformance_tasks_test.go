package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock/internal/testnode"
)

// tasksScenarios are the conformance suite's scenarios of the Tasks
// extension (0.2.0-alpha.12) that airlock's fixture can be asked.
var tasksScenarios = []string{
	"tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields", "tasks-request-state-removal",
	"tasks-request-headers", "tasks-dispatch-and-envelope", "tasks-mrtr-input", "tasks-mrtr-composition",
	"tasks-required-task-error", "tasks-status-notifications",
}

// tasksFixture is an MCP server with the tools the suite's tasks scenarios
// call: greet, answered at once; slow_compute, which sleeps its seconds
// (at most 5); failing_job, a tool error after a second; and
// protocol_error_job, a JSON-RPC error.
func tasksFixture(t *testing.T) string {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "tasks-fixture", Version: "1"}, nil)
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
	}
	s.AddTool(&mcp.Tool{Name: "greet", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &a)
			return text("Hello, " + a.Name + "!"), nil
		})
	s.AddTool(&mcp.Tool{Name: "slow_compute", InputSchema: json.RawMessage(`{"type":"object","properties":{"seconds":{"type":"number"},"label":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Seconds float64
				Label   string
			}
			_ = json.Unmarshal(req.Params.Arguments, &a)
			time.Sleep(time.Duration(min(a.Seconds, 5) * float64(time.Second)))
			return text(fmt.Sprintf("computed %s after %gs", a.Label, a.Seconds)), nil
		})
	s.AddTool(&mcp.Tool{Name: "failing_job", InputSchema: json.RawMessage(`{"type":"object","properties":{"label":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			time.Sleep(time.Second)
			res := text("the job failed")
			res.IsError = true
			return res, nil
		})
	s.AddTool(&mcp.Tool{Name: "protocol_error_job", InputSchema: json.RawMessage(`{"type":"object","properties":{"label":{"type":"string"}}}`)},
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return nil, fmt.Errorf("the job broke")
		})
	srv := upstreamServer(t, s, &mcp.StreamableHTTPOptions{Stateless: true})
	return srv.URL
}

// tasksManifest fronts the fixture: greet is a read; the jobs are writes
// that answer within 100 ms, so a client that declares tasks gets one for
// anything slower. airlock keys a write on its arguments: failing_job and
// protocol_error_job, called with none, are refused (a write needs its
// natural key), as the baseline says.
const tasksConformanceManifest = `version: 1
upstreams:
  fixture: {mcp: {url: "URL"}}
auth:
  tokens: [{name: conformance, role: agent, sha256: HASH}]
tools:
  - name: greet
    kind: read
    input_schema: {type: object, properties: {name: {type: string}}}
    upstream: {name: fixture, tool: greet}
  - name: slow_compute
    kind: write
    input_schema: {type: object, properties: {seconds: {type: number}, label: {type: string}}}
    natural_key: [{field: label}, {field: seconds}]
    window: forever
    respond_within: 100ms
    timeout: 30s
    upstream: {name: fixture, tool: slow_compute}
    answers: {undo: "Nothing to undo.", approver: "No one.", on_repeat: "The first result."}
  - name: failing_job
    kind: write
    input_schema: {type: object, properties: {label: {type: string}}}
    natural_key: [{field: label}]
    window: forever
    respond_within: 100ms
    upstream: {name: fixture, tool: failing_job}
    answers: {undo: "Nothing to undo.", approver: "No one.", on_repeat: "The first result."}
  - name: protocol_error_job
    kind: write
    input_schema: {type: object, properties: {label: {type: string}}}
    natural_key: [{field: label}]
    window: forever
    respond_within: 100ms
    upstream: {name: fixture, tool: protocol_error_job}
    answers: {undo: "Nothing to undo.", approver: "No one.", on_repeat: "The first result."}
`

// TestMCPConformanceTasks runs the suite's Tasks extension scenarios, one
// by one, against airlock fronting tasksFixture; each must pass unless
// testdata/conformance-baseline-tasks.yml lists it (with why), and a
// listed one that passes fails the test. The suite alone reports
// extension scenarios without failing on them.
func TestMCPConformanceTasks(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("AIRLOCK_TEST_MCP_CONFORMANCE_2026")
	if dir == "" {
		t.Skip("AIRLOCK_TEST_MCP_CONFORMANCE_2026 is not set (the directory holding the conformance suite and Node 22)")
	}
	node := testnode.Path(dir)
	suite := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
	raw, err := os.ReadFile("testdata/conformance-baseline-tasks.yml")
	if err != nil {
		t.Fatal(err)
	}
	var baseline struct {
		Server []string `yaml:"server"`
	}
	if err := yaml.Unmarshal(raw, &baseline); err != nil {
		t.Fatal(err)
	}
	airlockURL := startApp(t, tasksConformanceManifest, "URL", tasksFixture(t))
	front := tokenProxy(t, airlockURL)

	for _, sc := range tasksScenarios {
		t.Run(sc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, node, suite, "server", "--url", front.URL+"/mcp", "--scenario", sc, "--verbose")
			cmd.Dir = t.TempDir()
			out, err := cmd.CombinedOutput()
			if d := os.Getenv("AIRLOCK_TEST_MCP_CONFORMANCE_RESULTS"); d != "" {
				_ = os.MkdirAll(d, 0o755)
				_ = os.WriteFile(filepath.Join(d, sc+".txt"), out, 0o644) // kept, to read every check
			}
			expected := slices.Contains(baseline.Server, sc)
			switch {
			case err != nil && !expected:
				t.Fatalf("%s failed, and the baseline does not list it:\n%s", sc, lastLines(string(out), 60))
			case err == nil && expected:
				t.Fatalf("%s passes now: take it out of testdata/conformance-baseline-tasks.yml\n%s", sc, lastLines(string(out), 20))
			}
			if strings.Contains(string(out), "FAILURE") || strings.Contains(string(out), "SKIPPED") {
				t.Logf("%s:\n%s", sc, lastLines(string(out), 400))
			}
		})
	}
}
