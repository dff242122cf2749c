package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const inDoubtManifest = `version: 1
upstreams:
  ledger: {http: "URL"}
tools:
  - name: get_note
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    upstream: {name: ledger, path: /get}
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id], additionalProperties: false}
    natural_key: [{field: record_id}]
    window: forever
    timeout: 100ms
    reconcile_with: get_note
    upstream: {name: ledger, path: /add}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
`

// Viewing the in-doubt page calls no upstream (issue 45: an agent made 60
// in-doubt records, and each view asked the reconcile tool about each, one
// after another): the reconcile tool is asked in the background, and the
// page shows its last answer, or that it has not answered yet.
func TestTheInDoubtPageNeverCallsUpstreams(t *testing.T) {
	t.Parallel()
	var reads atomic.Int64
	release := make(chan struct{})
	ledger := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/get" {
			reads.Add(1)
			_ = json.NewEncoder(w).Encode(map[string]any{"found": false})
			return
		}
		select { // a write that does not answer in time: in doubt
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(ledger.Close)
	t.Cleanup(func() { close(release) }) // first: the writes end, then the ledger closes
	m, err := manifest.Parse([]byte(strings.Replace(inDoubtManifest, "URL", ledger.URL, 1)), "indoubt.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const adminToken = "in-doubt-page-admin"
	srv := serveApp(t, &app.Config{Manifest: m, ReapEvery: time.Hour, Tokens: []gateway.Token{
		{Name: "agent-1", Role: airlock.RoleAgent, SHA256: gateway.HashToken(agentToken)},
		{Name: "root", Role: airlock.RoleAdmin, SHA256: gateway.HashToken(adminToken)}}})
	const records = 6
	for i := range records {
		if st, out := callAPI(t, srv.URL+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"add_note","args":{"record_id":"N-%d"},"run_id":"r"}`, i)); st != http.StatusOK || out["status"] != "in_doubt" {
			t.Fatalf("a write that never answers: %d %v", st, out)
		}
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	page := func() string {
		t.Helper()
		resp, err := c.Get(srv.URL + "/ui/in-doubt")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the in-doubt page: %d %s", resp.StatusCode, b)
		}
		return string(b)
	}
	resp, err := c.Get(srv.URL + "/ui/signin")
	if err != nil {
		t.Fatal(err)
	}
	form, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	signedIn, err := c.PostForm(srv.URL+"/ui/signin", url.Values{"csrf": {pageFormToken.FindStringSubmatch(string(form))[1]}, "token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	signedIn.Body.Close()
	for range 3 {
		if pg := page(); strings.Count(pg, `class="not-asked"`) != records || !strings.Contains(pg, `http-equiv="refresh"`) {
			t.Fatalf("the in-doubt page before the reconcile tool answered:\n%s", pg)
		}
	}
	if n := reads.Load(); n != 0 {
		t.Fatalf("viewing the page asked the reconcile tool %d times", n)
	}
	st, err := srv.Reaper.Reconcile(context.Background())
	if err != nil || st.Asked != records {
		t.Fatalf("a background pass: %+v %v", st, err)
	}
	for range 3 {
		if pg := page(); strings.Count(pg, `class="reconciled"`) != records || strings.Contains(pg, `http-equiv="refresh"`) {
			t.Fatalf("the in-doubt page after the reconcile tool answered:\n%s", pg)
		}
	}
	if n := reads.Load(); n != records {
		t.Fatalf("the reconcile tool was asked %d times, want %d (the background pass alone)", n, records)
	}
}
