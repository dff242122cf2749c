package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/upstream"
)

const claimsManifest = `version: 1
tools:
  - name: save_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note."}
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first payout."}
    approval: {rules: [{name: people, when: "true", decide: human}]}
`

// claimsSetup is a gateway serving claimsManifest with plans, and the
// tokens of two agents.
type claimsSetup struct {
	t     *testing.T
	url   string
	plans *plan.Service
}

const (
	agent1Token = "claims-agent-1"
	agent2Token = "claims-agent-2"
)

func setupClaims(t *testing.T) *claimsSetup {
	t.Helper()
	s := &claimsSetup{t: t}
	g := frontGatewayWith(t, claimsManifest, nil, func(c *gateway.Config) {
		c.Tokens = []gateway.Token{
			{Name: "agent-1", Role: airlock.RoleAgent, SHA256: gateway.HashToken(agent1Token)},
			{Name: "agent-2", Role: airlock.RoleAgent, SHA256: gateway.HashToken(agent2Token)},
		}
		plans, err := plan.New(plan.Config{Manifest: c.Manifest, Store: c.Store.(airlock.PlanStore), Guard: c.Guard,
			Callers: func(*airlock.Tool) (upstream.Caller, bool) { return nil, false }})
		if err != nil {
			t.Fatal(err)
		}
		c.Plans, s.plans = plans, plans
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// post sends body as JSON with token and returns the status and the
// decoded answer.
func (s *claimsSetup) post(token, path, body string) (int, map[string]any) {
	s.t.Helper()
	return s.send(token, path, "application/json", body)
}

func (s *claimsSetup) send(token, path, contentType, body string) (int, map[string]any) {
	s.t.Helper()
	req, err := http.NewRequest("POST", s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		s.t.Fatalf("POST %s: %d %s: not JSON", path, resp.StatusCode, b)
	}
	return resp.StatusCode, out
}

// errorOf is the code and field of an error answer.
func errorOf(out map[string]any) (code, field string) {
	e, _ := out["error"].(map[string]any)
	code, _ = e["code"].(string)
	field, _ = e["field"].(string)
	return code, field
}

// approvedPlan proposes pay_out for record and approves it as a person.
func (s *claimsSetup) approvedPlan(record string) string {
	s.t.Helper()
	st, out := s.post(agent1Token, "/v1/calls", `{"tool":"plan_pay_out","args":{"record_id":"`+record+`"},"run_id":"r1"}`)
	p, _ := out["plan"].(map[string]any)
	if st != http.StatusOK || p == nil {
		s.t.Fatalf("plan_pay_out %s: %d %v", record, st, out)
	}
	id := p["id"].(string)
	full, err := s.plans.Get(context.Background(), id)
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.plans.Decide(context.Background(), airlock.PlanDecision{ID: id, Approve: true, By: "alice", Role: airlock.RoleApprover, Reason: "checked", DecisionHash: full.DecisionHash}); err != nil {
		s.t.Fatal(err)
	}
	return id
}

// nextCommit takes the next commit as a worker with token.
func (s *claimsSetup) nextCommit(token string) (handle, planID string) {
	s.t.Helper()
	st, out := s.post(token, "/v1/commits/next", `{"tools":["pay_out"]}`)
	p, _ := out["plan"].(map[string]any)
	if st != http.StatusOK || out["status"] != "execute" || p == nil {
		s.t.Fatalf("commits/next: %d %v", st, out)
	}
	return out["claim"].(string), p["id"].(string)
}

// withPlan is handle with its last part, the plan's id, replaced.
func withPlan(handle, planID string) string {
	return handle[:strings.LastIndex(handle, ".")+1] + planID
}

// A commit's claim handle names its plan: one naming another approved plan
// (or a plan that does not exist) is refused as made up and changes
// nothing, so another plan is never marked done with this one's result and
// its approved work still runs (docs/gateway.md, "The claims API").
func TestCommitClaimIsBoundToItsPlan(t *testing.T) {
	t.Parallel()
	s := setupClaims(t)
	a, b := s.approvedPlan("A-1"), s.approvedPlan("B-1")
	handles := map[string]string{}
	for range 2 {
		h, id := s.nextCommit(agent1Token)
		handles[id] = h
	}
	ha, hb := handles[a], handles[b]
	if ha == "" || hb == "" {
		t.Fatalf("the two commits: %v; want one for %s and one for %s", handles, a, b)
	}
	for name, forged := range map[string]string{
		"another plan's id":      withPlan(ha, b),
		"a plan that is not":     withPlan(ha, "pl_00000000000000000000"),
		"no plan id of a shape":  withPlan(ha, "B"),
		"no plan (call's shape)": ha[:strings.LastIndex(ha, ".")],
	} {
		for _, op := range []string{"renew", "complete"} {
			st, out := s.post(agent1Token, "/v1/claims/"+forged+"/"+op, `{"outcome":"succeeded","result":{"paid":"A"}}`)
			if code, field := errorOf(out); st != http.StatusBadRequest || code != "invalid_argument" || field != "claim" {
				t.Fatalf("%s with %s: %d %v; want 400 invalid_argument naming claim", op, name, st, out)
			}
		}
	}
	for id, status := range map[string]airlock.PlanStatus{a: airlock.PlanCommitting, b: airlock.PlanCommitting} {
		if p, err := s.plans.Get(context.Background(), id); err != nil || p.Status != status {
			t.Fatalf("plan %s after the forged handles: %+v %v; want %s", id, p, err, status)
		}
	}
	// Each holder completes its own; each plan gets its own result.
	for id, h := range map[string]string{a: ha, b: hb} {
		st, out := s.post(agent1Token, "/v1/claims/"+h+"/complete", `{"outcome":"succeeded","result":{"paid":"`+id+`"}}`)
		if st != http.StatusOK || out["status"] != "succeeded" {
			t.Fatalf("the holder's completion of %s: %d %v", id, st, out)
		}
		p, err := s.plans.Get(context.Background(), id)
		if err != nil || p.Status != airlock.PlanCommitted || string(p.Result) != `{"paid":"`+id+`"}` {
			t.Fatalf("plan %s: %+v %v; want committed with its own result", id, p, err)
		}
	}
}

// A claim is bound to the principal that took it: another agent holding the
// handle renews and completes nothing, before or after the holder's
// completion, which keeps its own result; a handle whose secret is not the
// claim's is refused the same way after completion as while held.
func TestClaimIsBoundToItsPrincipal(t *testing.T) {
	t.Parallel()
	s := setupClaims(t)
	st, out := s.post(agent1Token, "/v1/claims", `{"tool":"save_note","args":{"record_id":"N-1"},"run_id":"r1"}`)
	if st != http.StatusOK || out["status"] != "execute" {
		t.Fatalf("claim: %d %v", st, out)
	}
	handle := out["claim"].(string)
	otherSecret := handle[:strings.LastIndex(handle, ".")+1] + "claim-00000000000000000000000000000000"
	refused := func(when, token, h, op string) {
		t.Helper()
		st, out := s.post(token, "/v1/claims/"+h+"/"+op, `{"outcome":"succeeded","result":{"by":"another"}}`)
		if code, _ := errorOf(out); st != http.StatusConflict || code != "lease_lost" {
			t.Fatalf("%s, %s: %d %v; want 409 lease_lost", when, op, st, out)
		}
	}
	for _, op := range []string{"renew", "complete"} {
		refused("agent-2 while held", agent2Token, handle, op)
		refused("another secret while held", agent1Token, otherSecret, op)
	}
	st, out = s.post(agent1Token, "/v1/claims/"+handle+"/complete", `{"outcome":"succeeded","result":{"by":"holder"}}`)
	if st != http.StatusOK || !strings.Contains(string(mustJSON(t, out["result"])), `"holder"`) {
		t.Fatalf("the holder's completion: %d %v; want its own result", st, out)
	}
	refused("agent-2 after completion", agent2Token, handle, "complete")
	refused("another secret after completion", agent1Token, otherSecret, "complete")
	st, out = s.post(agent1Token, "/v1/claims/"+handle+"/complete", `{"outcome":"succeeded","result":{"by":"holder"}}`)
	if st != http.StatusOK || !strings.Contains(string(mustJSON(t, out["result"])), `"holder"`) {
		t.Fatalf("the holder's completion sent again: %d %v", st, out)
	}
}

// The completion body docs/gateway.md gives for a result too large to
// send is accepted: the outcome is kept, the result marked omitted.
func TestCompletionWithResultOmitted(t *testing.T) {
	t.Parallel()
	s := setupClaims(t)
	_, out := s.post(agent1Token, "/v1/claims", `{"tool":"save_note","args":{"record_id":"N-2"},"run_id":"r1"}`)
	handle, _ := out["claim"].(string)
	for body, field := range map[string]string{
		`{"outcome":"succeeded","result_omitted":true,"result":{"x":1}}`: "result_omitted",
		`{"outcome":"unknown","result_omitted":true}`:                    "result_omitted",
		// An error that would rewrite the terminal showing it.
		`{"outcome":"failed","error":"done\r\u001b[2Kcompleted"}`: "error",
		// A result named twice: the record would keep whichever a reader picks.
		`{"outcome":"succeeded","result":{"paid":"A","paid":"B"}}`: "result.paid",
	} {
		if st, out := s.post(agent1Token, "/v1/claims/"+handle+"/complete", body); st != http.StatusBadRequest {
			t.Fatalf("%s: %d %v; want 400 naming %s", body, st, out, field)
		} else if _, f := errorOf(out); f != field {
			t.Fatalf("%s: %v; want the error naming %s", body, out, field)
		}
	}
	st, out := s.post(agent1Token, "/v1/claims/"+handle+"/complete", `{"outcome":"succeeded","result_omitted":true}`)
	if st != http.StatusOK || out["status"] != "succeeded" || string(mustJSON(t, out["result"])) != `{"result_omitted":true}` {
		t.Fatalf("completion with result_omitted: %d %v", st, out)
	}
}

// Bad input to the JSON API gets a clear error naming what is wrong, and
// nothing runs: a member named twice (readers disagree on which counts), a
// number sent as a string, an empty or unknown query parameter, a body
// sent as something other than JSON.
func TestJSONInputIsRefusedNamingTheProblem(t *testing.T) {
	t.Parallel()
	s := setupClaims(t)
	for _, c := range []struct {
		name, path, contentType, body string
		status                        int
		code, field, says             string
	}{
		{"tool twice", "/v1/claims", "application/json", `{"tool":"save_note","tool":"pay_out","args":{"record_id":"D-1"}}`, 400, "invalid_argument", "tool", "twice"},
		{"a natural-key field twice", "/v1/claims", "application/json", `{"tool":"save_note","args":{"record_id":"D-1","record_id":"D-2"}}`, 400, "invalid_argument", "args.record_id", "twice"},
		{"run_id twice in a call", "/v1/calls", "application/json", `{"tool":"plan_pay_out","args":{"record_id":"D-3"},"run_id":"a","run_id":"b"}`, 400, "invalid_argument", "run_id", "twice"},
		{"a worker's tools twice", "/v1/commits/next", "application/json", `{"tools":["pay_out"],"tools":[]}`, 400, "invalid_argument", "tools", "twice"},
		// encoding/json matches names whatever their case (ſ folds to s),
		// the last one winning: a case variant would override what a
		// reader of exact names sees.
		{"tool in capitals", "/v1/claims", "application/json", `{"tool":"save_note","TOOL":"pay_out","args":{"record_id":"D-7"}}`, 400, "invalid_argument", "TOOL", "names are exact"},
		{"tool escaped in capitals", "/v1/claims", "application/json", `{"tool":"save_note","\u0054ool":"pay_out","args":{"record_id":"D-7"}}`, 400, "invalid_argument", "Tool", "names are exact"},
		{"args with a long s", "/v1/calls", "application/json", `{"tool":"plan_pay_out","args":{"record_id":"D-8"},"arg\u017f":{"record_id":"D-9"}}`, 400, "invalid_argument", "argſ", "names are exact"},
		{"wait_seconds in another case", "/v1/commits/next", "application/json", `{"tools":["pay_out"],"Wait_Seconds":30}`, 400, "invalid_argument", "Wait_Seconds", "names are exact"},
		{"a charset other than UTF-8", "/v1/claims", "application/json; charset=latin-1", `{"tool":"save_note","args":{"record_id":"D-10"}}`, 415, "unsupported_media_type", "Content-Type", "UTF-8"},
		{"wait_seconds beyond any number", "/v1/commits/next", "application/json", `{"tools":["pay_out"],"wait_seconds":1e400}`, 400, "invalid_argument", "wait_seconds", "beyond any number"},
		{"wait_seconds as a string", "/v1/commits/next", "application/json", `{"tools":["pay_out"],"wait_seconds":"5"}`, 400, "invalid_argument", "wait_seconds", "a number"},
		{"a query parameter on a claim", "/v1/claims?dry_run=1", "application/json", `{"tool":"save_note","args":{"record_id":"D-4"}}`, 400, "invalid_argument", "dry_run", "no query parameters"},
		{"a text body", "/v1/claims", "text/plain", `{"tool":"save_note","args":{"record_id":"D-5"}}`, 415, "unsupported_media_type", "Content-Type", "application/json"},
		{"a form body", "/v1/calls", "application/x-www-form-urlencoded", `{"tool":"plan_pay_out","args":{"record_id":"D-6"}}`, 415, "unsupported_media_type", "Content-Type", "application/json"},
	} {
		st, out := s.send(agent1Token, c.path, c.contentType, c.body)
		code, field := errorOf(out)
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if st != c.status || code != c.code || field != c.field || !strings.Contains(msg, c.says) || strings.Contains(msg, "float64") {
			t.Errorf("%s: %d %v; want %d %s naming %s, saying %q", c.name, st, out, c.status, c.code, c.field, c.says)
		}
	}
	// JSON by another name, and no Content-Type at all, are read.
	for _, ct := range []string{"application/json; charset=utf-8", "application/merge-patch+json", ""} {
		if st, out := s.send(agent1Token, "/v1/claims", ct, `{"tool":"save_note","args":{"record_id":"OK-`+ct+`"}}`); st != http.StatusOK {
			t.Errorf("Content-Type %q: %d %v; want read", ct, st, out)
		}
	}
	// Nothing was claimed by the refused requests.
	for _, id := range []string{"D-1", "D-2", "D-4", "D-5"} {
		if st, out := s.post(agent1Token, "/v1/claims", `{"tool":"save_note","args":{"record_id":"`+id+`"}}`); st != http.StatusOK || out["status"] != "execute" {
			t.Errorf("%s after its refusal: %d %v; want it claimed now, first", id, st, out)
		}
	}
}

// An empty, unknown or unreadable query parameter is refused, not read as
// absent (Go's own parser drops a pair holding ';' without a word).
func TestEmptyQueryParameterIsRefused(t *testing.T) {
	t.Parallel()
	g := frontGatewayWith(t, claimsManifest, nil, func(c *gateway.Config) {
		c.Tokens = []gateway.Token{{Name: "alice", Role: airlock.RoleAdmin, SHA256: gateway.HashToken("admin-token")}}
		plans, err := plan.New(plan.Config{Manifest: c.Manifest, Store: c.Store.(airlock.PlanStore), Guard: c.Guard,
			Callers: func(*airlock.Tool) (upstream.Caller, bool) { return nil, false }})
		if err != nil {
			t.Fatal(err)
		}
		c.Plans = plans
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/plans?limit=", "/v1/audit?key=", "/v1/report?since=", "/v1/tools?x=1", "/v1/plans/pl_00000000000000000000?x=1",
		"/v1/records/k?x=1", "/v1/plans?limit=1;x=2"} {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer admin-token")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "is empty") && !strings.Contains(string(b), "parameter") {
			t.Errorf("GET %s: %d %s; want 400 naming the parameter", path, resp.StatusCode, b)
		}
	}
}
