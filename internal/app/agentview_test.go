package app_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/upstream"
)

// An agent learns a plan's id, status, rule and result — never a rule's
// condition, the facts or the decision hash, over HTTP or MCP, proposing
// or asking plan_status; an approver still reads the whole plan.
func TestAgentsSeeNoRuleConditionsFactsOrHash(t *testing.T) {
	t.Parallel()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	ledger := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		if req.Tool.Name == "get_withdrawal" { // over the automatic limit: a person decides
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"amount_minor":990000,"currency":"USD","kyc_complete":true}`)}
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"approved":true}`)}
	})
	hashA, hashP := gateway.HashToken(agentToken), gateway.HashToken(approverToken)
	srv := serveApp(t, &app.Config{Manifest: m,
		Funcs:  map[string]upstream.Caller{"get_withdrawal": ledger, "approve_withdrawal": ledger},
		Tokens: []gateway.Token{{Name: "agent-1", Role: airlock.RoleAgent, SHA256: hashA}, {Name: "alice", Role: airlock.RoleApprover, SHA256: hashP}}})
	var conditions []string
	for _, r := range m.Tool("approve_withdrawal").Approval.Rules {
		if r.When != "true" {
			esc, _ := json.Marshal(r.When) // as JSON writes it (< as \u003c)
			conditions = append(conditions, r.When, strings.Trim(string(esc), `"`))
		}
	}
	secretsIn := func(t *testing.T, where, body string) {
		t.Helper()
		for _, leak := range append([]string{"decision_hash", "evaluation", `"facts"`, "amount_minor", "990000", "kyc_complete"}, conditions...) {
			if strings.Contains(body, leak) {
				t.Fatalf("%s tells the agent %q: %s", where, leak, body)
			}
		}
	}
	post := func(token, path, body string) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := post(agentToken, "/v1/calls", `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-900"}}`)
	if code != 200 || !strings.Contains(body, `"rule":"everything_else"`) {
		t.Fatalf("propose: %d %s", code, body)
	}
	secretsIn(t, "POST /v1/calls", body)
	var out struct {
		Plan struct {
			ID string `json:"id"`
		} `json:"plan"`
	}
	_ = json.Unmarshal([]byte(body), &out)
	_, body = post(agentToken, "/v1/calls", `{"tool":"plan_status","args":{"plan_id":"`+out.Plan.ID+`"}}`)
	secretsIn(t, "plan_status over HTTP", body)

	s := connectAgent(t, srv.URL, nil, "")
	for _, call := range []*mcp.CallToolParams{
		{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": "WD-900"}},
		{Name: "plan_status", Arguments: map[string]any{"plan_id": out.Plan.ID}},
	} {
		res, err := s.CallTool(context.Background(), call)
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", call.Name, err, res)
		}
		b, _ := json.Marshal(res)
		secretsIn(t, call.Name+" over MCP", string(b))
	}

	req, _ := http.NewRequest("GET", srv.URL+"/v1/plans/"+out.Plan.ID, nil)
	req.Header.Set("Authorization", "Bearer "+approverToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	full, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(full), "decision_hash") || !strings.Contains(string(full), "amount_minor") {
		t.Fatalf("the approver's plan lacks its facts or hash: %s", full)
	}
}
