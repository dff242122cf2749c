package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock/internal/testdb"
)

// claimsManifest has save_note, a write its caller runs (the claims API),
// and add_note, a write with an upstream, which is not claimed.
func claimsManifest(t *testing.T) string {
	t.Helper()
	return writeManifest(t, `upstreams:
  payments: {http: "http://127.0.0.1:1"}
tools:
  - name: save_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text], additionalProperties: false}
    natural_key: [{field: record_id, normalize: [trim, upper]}, {field: text, normalize: [trim]}]
    window: forever
    repeat_wait: 200ms
    upstream: {caller: true}
    answers: {undo: "Yes, delete the note.", approver: "No one.", on_repeat: "The first note is returned."}
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /withdrawals/note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note is returned."}
`)
}

// TestE2EClaimsAPI: a caller that runs the work itself claims it, renews
// its lease and completes it; the same work spelled another way is in
// progress while it runs and the first result after; the tool cannot be
// called through /v1/calls; bad input gets an error naming its field and
// claims nothing.
func TestE2EClaimsAPI(t *testing.T) {
	t.Parallel()
	srv := start(t, tokenEnv, bin(t, "airlock"), "serve", "--config", claimsManifest(t), "--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"), "--listen", freeAddr(t))
	client := specChecked(t) // every answer as docs/openapi.yaml describes it
	post := func(path, body string) (int, map[string]any) {
		t.Helper()
		status, a, err := tryAPICallWith(client, "POST", srv.url()+path, agentToken, body)
		if err != nil {
			t.Fatal(err)
		}
		return status, a
	}
	status, held := post("/v1/claims", `{"tool":"save_note","args":{"record_id":" wd-1 ","text":"hi"},"run_id":"run-1"}`)
	claim, _ := held["claim"].(string)
	if status != 200 || held["status"] != "execute" || claim == "" || held["lease_seconds"] != 30.0 {
		t.Fatalf("first claim: %d %v; want execute with a claim", status, held)
	}
	if status, a := post("/v1/claims", `{"tool":"save_note","args":{"record_id":"WD-1","text":"hi "}}`); status != 200 || a["status"] != "in_progress" || a["claim"] != nil {
		t.Fatalf("the same work while held: %d %v; want in_progress", status, a)
	}
	if status, a := post("/v1/claims/"+claim+"/renew", ``); status != 200 || a["lease_until"] == nil {
		t.Fatalf("renew: %d %v", status, a)
	}
	status, a := post("/v1/claims/"+claim+"/complete", `{"outcome":"succeeded","result":{"note_id":"N-1"}}`)
	if status != 200 || a["status"] != "succeeded" || a["repeat"] != false || fmt.Sprint(a["result"]) != "map[note_id:N-1]" {
		t.Fatalf("complete: %d %v", status, a)
	}
	status, a = post("/v1/claims", `{"tool":"save_note","args":{"record_id":"wd-1","text":"hi"}}`)
	if status != 200 || a["status"] != "succeeded" || a["repeat"] != true || fmt.Sprint(a["result"]) != "map[note_id:N-1]" {
		t.Fatalf("the same work after: %d %v; want the first result as a repeat", status, a)
	}
	// A complete retried after a lost reply gets the same answer.
	if status, a := post("/v1/claims/"+claim+"/complete", `{"outcome":"succeeded","result":{"note_id":"N-1"}}`); status != 200 || a["status"] != "succeeded" {
		t.Fatalf("complete again: %d %v", status, a)
	}
	if status, a := post("/v1/claims/"+claim+"/complete", `{"outcome":"failed","error":"changed my mind"}`); status != 409 || code(a) != "state_conflict" {
		t.Fatalf("a second completion saying otherwise: %d %v; want 409 state_conflict", status, a)
	}
	if status, a := post("/v1/claims/"+claim+"/renew", ``); status != 409 || code(a) != "lease_lost" {
		t.Fatalf("renew after complete: %d %v; want 409 lease_lost", status, a)
	}

	// Work that never started is released: the next claim holds it.
	_, h := post("/v1/claims", `{"tool":"save_note","args":{"record_id":"WD-2","text":"x"}}`)
	if status, a := post("/v1/claims/"+h["claim"].(string)+"/complete", `{"outcome":"not_started","error":"the disk was full"}`); status != 502 || code(a) != "not_sent" {
		t.Fatalf("not started: %d %v; want 502 not_sent", status, a)
	}
	_, h = post("/v1/claims", `{"tool":"save_note","args":{"record_id":"WD-2","text":"x"}}`)
	if h["status"] != "execute" {
		t.Fatalf("claim after a release: %v; want execute", h)
	}
	// An unknown outcome is in doubt, and so is its repeat.
	if status, a := post("/v1/claims/"+h["claim"].(string)+"/complete", `{"outcome":"unknown","error":"timed out"}`); status != 200 || a["status"] != "in_doubt" {
		t.Fatalf("unknown: %d %v; want in_doubt", status, a)
	}
	if _, a := post("/v1/claims", `{"tool":"save_note","args":{"record_id":"WD-2","text":"x"}}`); a["status"] != "in_doubt" || a["repeat"] != true {
		t.Fatalf("repeat of in-doubt work: %v", a)
	}

	_, h = post("/v1/claims", `{"tool":"save_note","args":{"record_id":"WD-3","text":"x"}}`)
	claim3 := h["claim"].(string)
	forged := claim3[:len(claim3)-4] + "0000"
	for _, tc := range []struct {
		name, path, body string
		status           int
		code, field      string
	}{
		{"a tool with an upstream", "/v1/claims", `{"tool":"add_note","args":{"record_id":"A"}}`, 403, "not_callable", "tool"},
		{"no such tool", "/v1/claims", `{"tool":"nope","args":{}}`, 403, "not_callable", "tool"},
		{"no tool", "/v1/claims", `{"args":{}}`, 400, "invalid_argument", "tool"},
		{"a missing field", "/v1/claims", `{"tool":"save_note","args":{"record_id":"A"}}`, 400, "missing_field", "text"},
		{"an unknown field", "/v1/claims", `{"tool":"save_note","args":{"record_id":"A","text":"t","x":1}}`, 400, "invalid_argument", "x"},
		{"no outcome", "/v1/claims/" + claim3 + "/complete", `{}`, 400, "missing_field", "outcome"},
		{"a bad outcome", "/v1/claims/" + claim3 + "/complete", `{"outcome":"done"}`, 400, "invalid_argument", "outcome"},
		{"a result of work that did not happen", "/v1/claims/" + claim3 + "/complete", `{"outcome":"unknown","result":{}}`, 400, "invalid_argument", "result"},
		{"a made-up claim", "/v1/claims/abc/complete", `{"outcome":"succeeded"}`, 400, "invalid_argument", "claim"},
		{"another's claim", "/v1/claims/" + forged + "/complete", `{"outcome":"succeeded"}`, 409, "lease_lost", "claim"},
	} {
		status, a := post(tc.path, tc.body)
		e, _ := a["error"].(map[string]any)
		if status != tc.status || code(a) != tc.code || e["field"] != tc.field {
			t.Errorf("%s: %d %v; want %d %s naming %s", tc.name, status, a, tc.status, tc.code, tc.field)
		}
	}
	big := `{"outcome":"succeeded","result":{"blob":"` + strings.Repeat("x", 2<<20) + `"}}`
	if status, a := post("/v1/claims/"+claim3+"/complete", big); status != 413 || code(a) != "too_large" || a["error"].(map[string]any)["field"] != "result" {
		t.Errorf("a result too large: %d %v; want 413 too_large naming result", status, code(a))
	}
	// None of that touched the held claim.
	if status, a := post("/v1/claims/"+claim3+"/complete", `{"outcome":"failed","error":"refused"}`); status != 200 || a["status"] != "failed" || fmt.Sprint(a["result"]) != "map[error:refused]" {
		t.Fatalf("the holder's failure: %d %v", status, a)
	}
	if status, a := post("/v1/calls", `{"tool":"save_note","args":{"record_id":"A","text":"t"}}`); status != 403 || !strings.Contains(fmt.Sprint(a), "claims API") {
		t.Fatalf("save_note through /v1/calls: %d %v; want 403 naming the claims API", status, a)
	}
	// Nor is it an MCP tool.
	session := mcpClient(t, srv.url(), agentToken)
	tools, err := session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "save_note" {
			t.Fatal("save_note is listed over MCP")
		}
	}
	if res, err := session.CallTool(context.Background(), &mcp.CallToolParams{Name: "save_note", Arguments: map[string]string{"record_id": "A", "text": "t"}}); err == nil && !res.IsError {
		t.Fatalf("save_note called over MCP: %+v", res)
	}

	// The audit log and the metrics count claimed work as any guarded call.
	// (Answers' events are written a moment after the answer.)
	key := strings.Split(claim, ".")[1]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, trail := apiCall(t, "GET", srv.url()+"/v1/audit?key="+key, approverToken, "")
		kinds := map[string]int{}
		events, _ := trail["events"].([]any)
		for _, e := range events {
			kinds[fmt.Sprint(e.(map[string]any)["kind"])]++
		}
		if kinds["claimed"] == 1 && kinds["completed"] == 1 && kinds["repeat_served"] >= 1 && kinds["in_progress_answered"] >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit trail of the claimed work: %v", kinds)
		}
	}
	req, _ := http.NewRequest("GET", srv.url()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`airlock_tool_calls_total{kind="write",outcome="succeeded",tool="save_note"}`,
		`airlock_tool_calls_total{kind="write",outcome="in_doubt",tool="save_note"}`,
		`airlock_repeats_total{state="succeeded",tool="save_note"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

func code(body map[string]any) string {
	e, _ := body["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// TestE2EClaimsOnTwoReplicas: many callers on two replicas sharing
// PostgreSQL claim the same work at once; whoever gets execute runs it and
// completes it, the others ask again until they get the result; each piece
// of work runs once and every caller ends with the same result. A holder
// that vanishes is reaped: its work is in doubt, never run again.
func TestE2EClaimsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	dsn, config := testdb.Schema(t), claimsManifest(t)
	var replicas []*proc
	for range 2 {
		// The holders below complete without renewing: the lease must
		// outlast a completion under this load (240 callers asking again at
		// once, two cores, the race detector: 2s was lost once in CI), and
		// the vanished holder at the end is reaped after it.
		replicas = append(replicas, start(t, tokenEnv, bin(t, "airlock"), "serve", "--config", config, "--db", dsn, "--listen", freeAddr(t), "--lease", "5s"))
	}
	const works, callers = 40, 6
	var mu sync.Mutex
	runs := map[int]int{}
	results := map[int]map[string]bool{}
	var wg sync.WaitGroup
	for k := range works {
		for c := range callers {
			wg.Go(func() {
				base := replicas[(k+c)%2].url()
				body := fmt.Sprintf(`{"tool":"save_note","args":{"record_id":"WD-%d","text":"x"}}`, k)
				deadline := time.Now().Add(time.Minute)
				for time.Now().Before(deadline) {
					status, a, err := tryAPICall("POST", base+"/v1/claims", agentToken, body)
					if err != nil || status != 200 {
						t.Errorf("work %d: %d %v %v", k, status, a, err)
						return
					}
					switch a["status"] {
					case "execute":
						mu.Lock()
						runs[k]++
						n := runs[k]
						mu.Unlock()
						status, a, err = tryAPICall("POST", base+"/v1/claims/"+a["claim"].(string)+"/complete", agentToken,
							fmt.Sprintf(`{"outcome":"succeeded","result":{"note":"N-%d-%d"}}`, k, n))
						if err != nil || status != 200 || a["status"] != "succeeded" {
							t.Errorf("work %d complete: %d %v %v", k, status, a, err)
							return
						}
						fallthrough
					case "succeeded":
						mu.Lock()
						if results[k] == nil {
							results[k] = map[string]bool{}
						}
						results[k][fmt.Sprint(a["result"])] = true
						mu.Unlock()
						return
					case "in_progress":
						continue
					default:
						t.Errorf("work %d: %v", k, a)
						return
					}
				}
				t.Errorf("work %d: no answer in a minute", k)
			})
		}
	}
	wg.Wait()
	for k := range works {
		if runs[k] != 1 || len(results[k]) != 1 {
			t.Errorf("work %d ran %d times; callers saw results %v", k, runs[k], results[k])
		}
	}

	// A holder that vanishes: no renewal, no completion.
	_, h, err := tryAPICall("POST", replicas[0].url()+"/v1/claims", agentToken, `{"tool":"save_note","args":{"record_id":"GONE","text":"x"}}`)
	if err != nil || h["status"] != "execute" {
		t.Fatalf("claim: %v %v", h, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, a := apiCall(t, "POST", replicas[1].url()+"/v1/claims", agentToken, `{"tool":"save_note","args":{"record_id":"GONE","text":"x"}}`)
		if a["status"] == "in_doubt" {
			break
		}
		if a["status"] != "in_progress" || time.Now().After(deadline) {
			t.Fatalf("after the holder vanished: %v; want in_progress, then in_doubt", a)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if status, a := apiCall(t, "POST", replicas[0].url()+"/v1/claims/"+h["claim"].(string)+"/complete", agentToken, `{"outcome":"succeeded"}`); status != 409 || code(a) != "lease_lost" {
		t.Fatalf("a late completion: %d %v; want 409 lease_lost", status, a)
	}
}
