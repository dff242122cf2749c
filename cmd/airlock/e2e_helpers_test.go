package main

// End-to-end harness: real airlock, payments and notes-mcp processes on
// loopback, built once per test run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// bin returns the path of a built command: airlock, payments or notes-mcp.
func bin(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "airlock-e2e-bin")
		if buildErr != nil {
			return
		}
		goBin := "go" // go test puts its own go first on PATH
		for name, pkg := range map[string]string{
			"airlock":   ".",
			"payments":  "../../examples/withdrawals/cmd/payments",
			"notes-mcp": "../../examples/withdrawals/cmd/notes-mcp",
			"agent":     "../../examples/withdrawals/cmd/agent",
		} {
			out, err := exec.Command(goBin, "build", "-o", filepath.Join(binDir, name), pkg).CombinedOutput()
			if err != nil {
				buildErr = fmt.Errorf("building %s: %w\n%s", name, err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// proc is a started process that printed "listening on http://ADDR".
type proc struct {
	cmd    *exec.Cmd
	addr   string
	out    *bytes.Buffer
	mu     *sync.Mutex
	exited chan struct{}
}

func (p *proc) url() string { return "http://" + p.addr }

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// stop sends SIGTERM and waits.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func start(t *testing.T, env []string, path string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	return startCmd(t, cmd)
}

func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	return startCmds(t, cmd)[0]
}

// startCmds starts every command at once, then waits for each to listen.
func startCmds(t *testing.T, cmds ...*exec.Cmd) []*proc {
	t.Helper()
	type started struct {
		p      *proc
		ready  chan string
		stderr *bytes.Buffer
	}
	var all []started
	for _, cmd := range cmds {
		path := cmd.Path
		stdout, _ := cmd.StdoutPipe()
		stderr := &bytes.Buffer{}
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, out: &bytes.Buffer{}, mu: &sync.Mutex{}, exited: make(chan struct{})}
		ready := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				line := sc.Text()
				p.mu.Lock()
				p.out.WriteString(line + "\n")
				p.mu.Unlock()
				if a, ok := strings.CutPrefix(line, "listening on http://"); ok {
					ready <- a
				}
			}
		}()
		go func() { _ = cmd.Wait(); close(p.exited) }()
		t.Cleanup(func() {
			p.stop()
			if t.Failed() {
				t.Logf("%s stdout:\n%s\nstderr:\n%s", filepath.Base(path), p.output(), stderr.String())
			}
		})
		all = append(all, started{p, ready, stderr})
	}
	out := make([]*proc, 0, len(all))
	for _, s := range all {
		name := filepath.Base(s.p.cmd.Path)
		select {
		case s.p.addr = <-s.ready:
		case <-s.p.exited:
			t.Fatalf("%s exited before listening:\n%s\n%s", name, s.p.output(), s.stderr.String())
		case <-time.After(60 * time.Second):
			t.Fatalf("%s did not start:\n%s", name, s.stderr.String())
		}
		out = append(out, s.p)
	}
	return out
}

// Tokens of the test manifests (env entries).
const (
	agentToken    = "agent-secret-1"
	approverToken = "approver-secret-1"
	adminToken    = "admin-secret-1"
)

var tokenEnv = []string{"E2E_AGENT=" + agentToken, "E2E_APPROVER=" + approverToken, "E2E_ADMIN=" + adminToken}

// e2eManifest writes a manifest whose upstreams are the given services.
func e2eManifest(t *testing.T, paymentsURL, notesCmd, notesURL string, extra string) string {
	t.Helper()
	ups := fmt.Sprintf("  payments: {http: %q}\n", paymentsURL)
	tools := `
  - name: get_withdrawal
    kind: read
    description: Look up a withdrawal.
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    upstream: {name: payments, path: /withdrawals/get}
  - name: add_note
    kind: write
    description: Add a note to a withdrawal.
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text], additionalProperties: false}
    natural_key: [{field: record_id, normalize: [trim, upper]}, {field: text, normalize: [trim]}]
    window: forever
    repeat_wait: 30s
    upstream: {name: payments, path: /withdrawals/note}
    answers: {undo: "Yes, an operator can strike it.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: limited_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}, {field: text}]
    window: run
    max_calls_per_run: 2
    upstream: {name: payments, path: /withdrawals/note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: approve_withdrawal
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /withdrawals/approve}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first approval."}
    approval: {rules: [{name: all, when: "true", decide: human}]}
`
	if notesCmd != "" {
		ups += fmt.Sprintf("  notes_stdio: {mcp: {command: [%q]}}\n", notesCmd)
		tools += `
  - name: note_stdio
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}, {field: text}]
    window: forever
    upstream: {name: notes_stdio, tool: add_note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: list_stdio
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
    upstream: {name: notes_stdio, tool: list_notes}
`
	}
	if notesURL != "" {
		ups += fmt.Sprintf("  notes_http: {mcp: {url: %q, resources: true, prompts: true}}\n", notesURL)
		tools += `
  - name: note_http
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}, {field: text}]
    window: forever
    upstream: {name: notes_http, tool: add_note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: list_http
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}}
    upstream: {name: notes_http, tool: list_notes}
`
	}
	return writeManifest(t, "upstreams:\n"+ups+"tools:"+tools+extra)
}

// serve starts airlock serve on a free port.
func serve(t *testing.T, config, dsn string) *proc {
	t.Helper()
	return start(t, tokenEnv, bin(t, "airlock"), "serve", "--config", config, "--db", dsn, "--listen", freeAddr(t))
}

// startPayments starts the fake payments service; naive (no idempotency of its own).
func startPayments(t *testing.T, args ...string) *proc {
	t.Helper()
	return start(t, nil, bin(t, "payments"), append([]string{"--listen", "127.0.0.1:0"}, args...)...)
}

type paymentStats struct {
	Calls     int                 `json:"calls"`
	Notes     map[string][]string `json:"notes"`
	Approvals map[string]int      `json:"approvals"`
	InFlight  int                 `json:"in_flight"`
}

func stats(t *testing.T, payments *proc) paymentStats {
	t.Helper()
	resp, err := http.Get(payments.url() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s paymentStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// apiCall calls the HTTP API and decodes the JSON answer; a transport
// error fails the test, so call it on the test's goroutine only.
func apiCall(t *testing.T, method, url, token string, body string, header ...string) (int, map[string]any) {
	t.Helper()
	status, out, err := tryAPICall(method, url, token, body, header...)
	if err != nil {
		t.Fatal(err)
	}
	return status, out
}

// tryAPICall is apiCall for other goroutines: it returns the transport error.
func tryAPICall(method, url, token string, body string, header ...string) (int, map[string]any, error) {
	return tryAPICallWith(http.DefaultClient, method, url, token, body, header...)
}

// tryAPICallWith is tryAPICall through client.
func tryAPICallWith(client *http.Client, method, url, token string, body string, header ...string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	return resp.StatusCode, out, nil
}

// mcpClient connects the official SDK client to airlock's /mcp.
func mcpClient(t *testing.T, airlockURL, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "v1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint:   airlockURL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token, http.DefaultTransport}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func structured(t *testing.T, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structured content %s: %v", b, err)
	}
	return m
}

// writeManifest writes a test manifest: the tokens of tokenEnv (agent-1,
// alice the approver, root the admin), then rest (upstreams and tools).
func writeManifest(t *testing.T, rest string) string {
	t.Helper()
	src := `version: 1
auth:
  tokens:
    - {name: agent-1, role: agent, env: E2E_AGENT}
    - {name: alice, role: approver, env: E2E_APPROVER}
    - {name: root, role: admin, env: E2E_ADMIN}
` + rest
	path := filepath.Join(t.TempDir(), "airlock.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
