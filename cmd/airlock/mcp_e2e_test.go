package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store"
)

// stdioManifest: a write tool whose upstream the test holds mid-call, and
// an irreversible tool whose plans wait for a person and expire in 2s.
const stdioManifest = `version: 1
upstreams:
  svc: {http: "URL"}
tools:
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /note}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
  - name: pay
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: svc, path: /pay}
    answers: {undo: "no", approver: "a person", on_repeat: "one payment per record"}
    approval:
      rules: [{name: everything, when: "true", decide: human}]
      expires_after: 2s
`

// TestE2EMCPAloneRunsTheBackgroundLoops: airlock mcp (stdio, no serve
// anywhere) expires an undecided plan, seals the audit log, and moves the
// record of a call whose process was killed mid-call to in_doubt.
func TestE2EMCPAloneRunsTheBackgroundLoops(t *testing.T) {
	t.Parallel()
	for _, d := range []struct {
		name string
		dsn  func(t *testing.T) string
	}{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "a.db") }},
		{"postgres", func(t *testing.T) string { return testdb.Schema(t) }},
	} {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			dsn := d.dsn(t)
			arrived := make(chan struct{}, 1)
			release := make(chan struct{})
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				select { // the call hangs until its airlock process is killed
				case <-release:
				case <-r.Context().Done():
				}
			}))
			t.Cleanup(func() { close(release); upstream.Close() })
			config := filepath.Join(t.TempDir(), "airlock.yaml")
			if err := os.WriteFile(config, []byte(strings.Replace(stdioManifest, "URL", upstream.URL, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			connect := func() (*mcp.ClientSession, *exec.Cmd) {
				cmd := exec.Command(bin(t, "airlock"), "mcp", "--config", config, "--db", dsn, "--lease", "1s", "--expire-every", "200ms")
				s, err := mcp.NewClient(&mcp.Implementation{Name: "desktop-agent", Version: "v1"}, nil).
					Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return s, cmd
			}
			ctx := context.Background()

			// The first airlock mcp: a plan waits for a person; a call is at the
			// upstream when the process is killed.
			first, cmd := connect()
			res, err := first.CallTool(ctx, &mcp.CallToolParams{Name: "plan_pay", Arguments: map[string]any{"record_id": "P-1"}})
			if err != nil || res.IsError {
				t.Fatalf("plan_pay: %+v %v", res, err)
			}
			planID := structured(t, res)["plan"].(map[string]any)["id"].(string)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = first.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": "N-1"}})
			}()
			select {
			case <-arrived:
			case <-time.After(15 * time.Second):
				t.Fatal("the call never reached the upstream")
			}
			_ = cmd.Process.Kill()
			_ = first.Close()
			wg.Wait()

			st, err := store.Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			running, err := st.ExpiredLeases(ctx, &airlock.ExpiredLeasesParams{Now: time.Now().Add(time.Hour), Limit: 10}) // every running record
			if err != nil || len(running) != 1 {
				t.Fatalf("after the kill: %d running records, want 1 (%v)", len(running), err)
			}
			key := running[0].Key

			// The second airlock mcp, and nothing else, does the rest.
			second, _ := connect()
			defer second.Close()
			waitUntil(t, "the crashed call's record to go in_doubt", func() bool {
				rec, err := st.Get(ctx, key)
				return err == nil && rec.State == airlock.StateInDoubt
			})
			waitUntil(t, "the plan to expire", func() bool {
				p, err := st.GetPlan(ctx, planID)
				return err == nil && p.Status == airlock.PlanExpired
			})
			waitUntil(t, "the audit log to be sealed", func() bool {
				n, err := st.UnsealedAudit(ctx)
				return err == nil && n == 0
			})
			events, err := st.AuditLog(ctx, &airlock.AuditLogParams{After: 0, Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]bool{}
			for _, e := range events {
				kinds[e.Kind] = true
			}
			for _, k := range []string{airlock.EventPlanned, airlock.EventClaimed, airlock.EventInDoubt, airlock.EventExpired} {
				if !kinds[k] {
					t.Errorf("no sealed %s event; sealed: %v", k, kinds)
				}
			}
			// A repeat of the crashed call is told it may have happened.
			res, err = second.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": "N-1"}})
			if err != nil {
				t.Fatal(err)
			}
			if got := structured(t, res); got["status"] != "in_doubt" || got["repeat"] != true {
				t.Fatalf("repeat of the crashed call: %v", got)
			}
		})
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
