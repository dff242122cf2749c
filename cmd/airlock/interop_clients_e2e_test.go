package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/testnode"
)

// interopReport is what a client driver (interop/) saw.
type interopReport struct {
	Protocol string `json:"protocol"`
	Tools    []struct {
		Name        string         `json:"name"`
		Annotations map[string]any `json:"annotations"`
	} `json:"tools"`
	Calls []json.RawMessage `json:"calls"`
	Plan  json.RawMessage   `json:"plan"`
	// The text of the resource notes://all and of the prompt
	// summarize_notes, as the library hands them over (nil: not asked).
	Resource *string `json:"resource"`
	Prompt   *string `json:"prompt"`
	Error    string  `json:"error"`
}

// interopCall is one call as a driver reports it: the structured content
// when the library hands it over, and the text.
type interopCall struct {
	Structured map[string]any `json:"structured"`
	Text       string         `json:"text"`
}

// interopDriver runs one client library against airlock.
type interopDriver struct {
	name string
	// command is the driver for a transport ("http" or "stdio") and its
	// arguments (interop/ documents them).
	command func(args ...string) *exec.Cmd
	// noPrompts: the library offers no way to get a prompt.
	noPrompts bool
}

var (
	mcpgoOnce    sync.Once
	mcpgoBuilt   map[string]string
	mcpgoBuildEr error
)

// mcpgoDrivers builds interop/mcpgo against each mcp-go release it pins.
func mcpgoDrivers(t *testing.T) []interopDriver {
	t.Helper()
	mcpgoOnce.Do(func() {
		mcpgoBuilt = map[string]string{}
		dir, err := filepath.Abs("../../interop/mcpgo")
		if err != nil {
			mcpgoBuildEr = err
			return
		}
		out := filepath.Join(os.TempDir(), "airlock-interop-mcpgo")
		goBin := "go" // go test puts its own go first on PATH
		for release, modfile := range map[string]string{"v1.6.0": "go.mod", "v1.2.1": "go.v1.2.1.mod"} {
			exe := out + "-" + release
			cmd := exec.Command(goBin, "build", "-modfile="+modfile, "-o", exe, ".")
			cmd.Dir = dir
			if b, err := cmd.CombinedOutput(); err != nil {
				mcpgoBuildEr = fmt.Errorf("building interop/mcpgo with mcp-go %s: %w\n%s", release, err, b)
				return
			}
			mcpgoBuilt[release] = exe
		}
	})
	if mcpgoBuildEr != nil {
		t.Fatal(mcpgoBuildEr)
	}
	var out []interopDriver
	for _, release := range []string{"v1.6.0", "v1.2.1"} {
		exe := mcpgoBuilt[release]
		out = append(out, interopDriver{name: "mcp-go " + release, command: func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }})
	}
	return out
}

var (
	gosdkOnce  sync.Once
	gosdkBuilt string
	gosdkErr   error
)

// gosdkDriver builds interop/gosdk: the official Go SDK, at the version
// airlock itself pins.
func gosdkDriver(t *testing.T) interopDriver {
	t.Helper()
	gosdkOnce.Do(func() {
		exe := filepath.Join(os.TempDir(), "airlock-interop-gosdk")
		cmd := exec.Command("go", "build", "-o", exe, "./interop/gosdk")
		cmd.Dir = "../.."
		if b, err := cmd.CombinedOutput(); err != nil {
			gosdkErr = fmt.Errorf("building interop/gosdk: %w\n%s", err, b)
			return
		}
		gosdkBuilt = exe
	})
	if gosdkErr != nil {
		t.Fatal(gosdkErr)
	}
	exe := gosdkBuilt
	return interopDriver{name: "go-sdk v1.8.0", command: func(args ...string) *exec.Cmd { return exec.Command(exe, args...) }}
}

// nodeDrivers are the Node client libraries interop/node/drive.mjs drives,
// installed (with Node 22) in AIRLOCK_TEST_MCP_INTEROP by .ci/run; none
// when it is not set, unless AIRLOCK_TEST_REQUIRE_INTEROP asks for them.
func nodeDrivers(t *testing.T) []interopDriver {
	t.Helper()
	dir := os.Getenv("AIRLOCK_TEST_MCP_INTEROP")
	if dir == "" {
		if os.Getenv("AIRLOCK_TEST_REQUIRE_INTEROP") != "" {
			t.Fatal("AIRLOCK_TEST_MCP_INTEROP is not set (the directory the Node MCP clients are installed in)")
		}
		t.Log("AIRLOCK_TEST_MCP_INTEROP is not set: the Node clients are skipped")
		return nil
	}
	node := testnode.Path(dir)
	src, err := os.ReadFile("../../interop/node/drive.mjs")
	if err != nil {
		t.Fatal(err)
	}
	// Beside its node_modules, where its imports resolve.
	script := filepath.Join(dir, "drive.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	var out []interopDriver
	for _, c := range []struct {
		name, id  string
		noPrompts bool
	}{
		{"@modelcontextprotocol/sdk 1.32.2", "sdk", false},
		{"@modelcontextprotocol/client 2.4.0", "client2", false},
		{"@ai-sdk/mcp 2.0.99 (ai 7.0.185)", "ai-sdk", false},
		{"@openai/agents 0.20.0", "openai", true},
		{"@langchain/mcp-adapters 1.1.4", "langchain", false},
	} {
		id := c.id
		out = append(out, interopDriver{name: c.name, noPrompts: c.noPrompts, command: func(args ...string) *exec.Cmd {
			return exec.Command(node, append([]string{script, id}, args...)...)
		}})
	}
	return out
}

// Every current MCP client library, on its defaults, over streamable HTTP
// against airlock serve and over stdio against airlock mcp: it connects,
// lists the tools (no irreversible tool; a write's annotations), two
// identical calls run once with the second marked a repeat, a plan waits
// for a person, and a resource and a prompt of an MCP upstream on a
// session revision (notes-mcp over HTTP: the go-sdk's server with
// sessions) are read through airlock — on 2026-07-28 too, where clients
// refuse a result that is not of that revision.
func TestE2EInteropClients(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	notes := start(t, nil, bin(t, "notes-mcp"), "--http", "127.0.0.1:0")
	config := e2eManifest(t, payments.url(), "", notes.url(), "")
	srv := serve(t, config, "sqlite:"+filepath.Join(t.TempDir(), "airlock.db"))
	drivers := append(append(mcpgoDrivers(t), gosdkDriver(t)), nodeDrivers(t)...)
	for i, d := range drivers {
		for _, transport := range []string{"http", "stdio"} {
			record := fmt.Sprintf("WD-INTEROP-%d-%s", i, strings.ToUpper(transport))
			t.Run(d.name+"/"+transport, func(t *testing.T) {
				var cmd *exec.Cmd
				if transport == "http" {
					cmd = d.command("http", srv.url()+"/mcp", agentToken, record)
				} else {
					cmd = d.command("stdio", record, bin(t, "airlock"), "mcp", "--config", config, "--db", "sqlite:"+filepath.Join(t.TempDir(), "stdio.db"))
				}
				cmd.Env = append(os.Environ(), tokenEnv...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				var r interopReport
				if jerr := json.Unmarshal(out, &r); err != nil || jerr != nil {
					t.Fatalf("driver: %v %v\nstdout: %s\nstderr: %s", err, jerr, out, stderr.String())
				}
				if r.Error != "" {
					t.Fatalf("%s over %s: %s\nstderr: %s", d.name, transport, r.Error, lastLine(stderr.String(), 2000))
				}
				checkInteropReport(t, &r, record, d.noPrompts)
				if s := stats(t, payments); len(s.Notes[record]) != 1 {
					t.Errorf("the payments service saw %d notes for %s, want 1", len(s.Notes[record]), record)
				}
				t.Logf("protocol %q", r.Protocol)
				if t.Failed() {
					t.Logf("stderr: %s", lastLine(stderr.String(), 2000))
				}
			})
		}
	}
}

func checkInteropReport(t *testing.T, r *interopReport, record string, noPrompts bool) {
	t.Helper()
	if r.Resource == nil || !strings.Contains(*r.Resource, `"notes"`) {
		t.Errorf("the resource notes://all as the library handed it over: %v", deref(r.Resource))
	}
	switch want := "Summarize the notes of record " + record + "."; {
	case noPrompts:
		if r.Prompt != nil {
			t.Errorf("a library without prompts reported one: %q", *r.Prompt)
		}
	case r.Prompt == nil || *r.Prompt != want:
		t.Errorf("the prompt summarize_notes as the library handed it over: %v, want %q", deref(r.Prompt), want)
	}
	names := map[string]map[string]any{}
	for _, tool := range r.Tools {
		names[tool.Name] = tool.Annotations
	}
	for _, want := range []string{"add_note", "get_withdrawal", "plan_approve_withdrawal", "plan_status"} {
		if _, ok := names[want]; !ok {
			t.Errorf("tools %v: no %s", keys(names), want)
		}
	}
	if _, ok := names["approve_withdrawal"]; ok {
		t.Errorf("tools %v: the irreversible tool is listed", keys(names))
	}
	if a := names["add_note"]; a != nil && (a["idempotentHint"] != true || a["readOnlyHint"] == true) {
		t.Errorf("add_note's annotations %v: want idempotent, not read-only", a)
	}
	if len(r.Calls) != 2 {
		t.Fatalf("%d calls reported", len(r.Calls))
	}
	for i, raw := range r.Calls {
		var c interopCall
		_ = json.Unmarshal(raw, &c)
		repeat := c.Structured["repeat"] == true || strings.Contains(c.Text, "already done by an earlier identical call")
		if c.Structured == nil && c.Text == "" {
			t.Errorf("call %d: the library handed over nothing: %s", i, raw)
		}
		if repeat != (i == 1) {
			t.Errorf("call %d: repeat %v: %s", i, repeat, raw)
		}
	}
	var p interopCall
	_ = json.Unmarshal(r.Plan, &p)
	plan, _ := p.Structured["plan"].(map[string]any)
	if plan["status"] != "awaiting_approval" && !strings.Contains(p.Text, "awaiting_approval") {
		t.Errorf("the plan does not wait for a person: %s", r.Plan)
	}
}

// deref is *s, or "(nothing)".
func deref(s *string) string {
	if s == nil {
		return "(nothing)"
	}
	return *s
}

func keys(m map[string]map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func lastLine(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// tasksReport is what interop/node/tasks.mjs saw.
type tasksReport struct {
	Protocol    string            `json:"protocol"`
	ServerTasks map[string]any    `json:"serverTasks"`
	TaskSupport map[string]any    `json:"taskSupport"`
	Calls       []tasksStreamSeen `json:"calls"`
	Plan        struct {
		tasksStreamSeen
		Before string `json:"before"`
		Cancel string `json:"cancel"`
		After  string `json:"after"`
	} `json:"plan"`
	Listed []string `json:"listed"`
	Error  string   `json:"error"`
}

type tasksStreamSeen struct {
	Types  []string       `json:"types"`
	TaskID string         `json:"taskId"`
	Status string         `json:"status"`
	Result map[string]any `json:"result"`
	Error  string         `json:"error"`
}

// The official TypeScript SDK's task API (client.experimental.tasks) drives
// airlock's tasks over HTTP and stdio: the server and its writes and plans
// declare task support, a write called twice as a task runs once and both
// calls name the same task, whose result is the call's; a plan proposed as
// a task waits, and cancelling it withdraws it.
func TestE2EInteropTasks(t *testing.T) {
	t.Parallel()
	dir := os.Getenv("AIRLOCK_TEST_MCP_INTEROP")
	if dir == "" {
		if os.Getenv("AIRLOCK_TEST_REQUIRE_INTEROP") != "" {
			t.Fatal("AIRLOCK_TEST_MCP_INTEROP is not set (the directory the Node MCP clients are installed in)")
		}
		t.Skip("AIRLOCK_TEST_MCP_INTEROP is not set: the TypeScript SDK is not installed")
	}
	node := testnode.Path(dir)
	src, err := os.ReadFile("../../interop/node/tasks.mjs")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "tasks.mjs")
	if err := os.WriteFile(script, src, 0o644); err != nil {
		t.Fatal(err)
	}
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	srv := serve(t, config, "sqlite:"+filepath.Join(t.TempDir(), "airlock.db"))
	for _, transport := range []string{"http", "stdio"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			record := "WD-TASKS-" + strings.ToUpper(transport)
			args := []string{script, "http", srv.url() + "/mcp", agentToken, record}
			if transport == "stdio" {
				args = []string{script, "stdio", record, bin(t, "airlock"), "mcp", "--config", config, "--db", "sqlite:" + filepath.Join(t.TempDir(), "stdio.db")}
			}
			cmd := exec.Command(node, args...)
			cmd.Env = append(os.Environ(), tokenEnv...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			var r tasksReport
			if jerr := json.Unmarshal(out, &r); err != nil || jerr != nil {
				t.Fatalf("driver: %v %v\nstdout: %s\nstderr: %s", err, jerr, out, stderr.String())
			}
			if r.Error != "" {
				t.Fatalf("tasks over %s: %s\nstderr: %s", transport, r.Error, lastLine(stderr.String(), 2000))
			}
			if r.ServerTasks == nil || r.TaskSupport["add_note"] != "optional" || r.TaskSupport["plan_approve_withdrawal"] != "optional" ||
				r.TaskSupport["get_withdrawal"] != nil {
				t.Errorf("task support: server %v, tools %v", r.ServerTasks, r.TaskSupport)
			}
			if len(r.Calls) != 2 {
				t.Fatalf("%d calls reported", len(r.Calls))
			}
			for i, c := range r.Calls {
				sc, _ := c.Result["structuredContent"].(map[string]any)
				if c.TaskID == "" || c.TaskID != r.Calls[0].TaskID || c.Error != "" || sc["status"] != "succeeded" || c.Types[0] != "taskCreated" {
					t.Errorf("call %d: %+v", i, c)
				}
			}
			if s := stats(t, payments); len(s.Notes[record]) != 1 {
				t.Errorf("the payments service saw %d notes for %s, want 1", len(s.Notes[record]), record)
			}
			p := r.Plan
			if p.TaskID == "" || p.TaskID == r.Calls[0].TaskID || p.Before != "working" || p.Cancel != "cancelled" || p.After != "cancelled" {
				t.Errorf("the plan's task: %+v", p)
			}
			if len(r.Listed) != 2 {
				t.Errorf("tasks/list: %v", r.Listed)
			}
			t.Logf("protocol %q", r.Protocol)
		})
	}
}
