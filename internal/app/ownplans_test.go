package app_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

const ownPlansManifest = `version: 1
upstreams:
  payments: {http: "http://127.0.0.1:1"}
tools:
  - name: approve_withdrawal
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, additionalProperties: false}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /approve}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first approval."}
    approval: {rules: [{name: people, when: "true", decide: human}]}
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {payout_id: {type: string}}, additionalProperties: false}
    natural_key: [{field: payout_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "No.", approver: "Rules.", on_repeat: "The first payout."}
    approval: {rules: [{name: all, when: "true", decide: auto}]}
  - name: ship
    kind: irreversible
    input_schema: {type: object, properties: {order_id: {type: string}}, additionalProperties: false}
    natural_key: [{field: order_id}]
    window: forever
    upstream: {caller: true, workers: [shipping-worker]}
    answers: {undo: "No.", approver: "Rules.", on_repeat: "The first shipment."}
    approval: {rules: [{name: all, when: "true", decide: auto}]}
`

// Two agent tokens (issue 45): plan_status answers a plan's proposer and
// admins, over HTTP and MCP, and another agent learns nothing from the
// id; another agent proposing the same work gets the plan back, told how
// to follow it. A commit worker is given only the plans its principal
// proposed, or, for a tool that names its workers, only those workers are.
func TestAgentsSeeAndCommitOnlyTheirOwnPlans(t *testing.T) {
	t.Parallel()
	m, err := manifest.Parse([]byte(ownPlansManifest), "own.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const agent2Token, adminToken, workerToken = "own-plans-agent-2", "own-plans-admin", "own-plans-worker"
	tok := func(name, role, secret string) gateway.Token {
		return gateway.Token{Name: name, Role: role, SHA256: gateway.HashToken(secret)}
	}
	srv := serveApp(t, &app.Config{Manifest: m, Tokens: []gateway.Token{tok("agent-1", airlock.RoleAgent, agentToken),
		tok("agent-2", airlock.RoleAgent, agent2Token), tok("root", airlock.RoleAdmin, adminToken), tok("shipping-worker", airlock.RoleAgent, workerToken)}})
	call := func(token, path, body string) (int, map[string]any) {
		t.Helper()
		return callAPI(t, srv.URL+path, token, body)
	}

	st, out := call(agentToken, "/v1/calls", `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-1"},"run_id":"r1"}`)
	if st != http.StatusOK {
		t.Fatalf("propose: %d %v", st, out)
	}
	id := out["plan"].(map[string]any)["id"].(string)
	status := `{"tool":"plan_status","args":{"plan_id":"` + id + `"}}`
	if st, out := call(agentToken, "/v1/calls", status); st != http.StatusOK || out["plan"] == nil {
		t.Fatalf("plan_status by its proposer: %d %v", st, out)
	}
	if st, out := call(adminToken, "/v1/calls", status); st != http.StatusOK || out["plan"] == nil {
		t.Fatalf("plan_status by an admin: %d %v", st, out)
	}
	st, out = call(agent2Token, "/v1/calls", status)
	if e, _ := out["error"].(map[string]any); st != http.StatusNotFound || e["field"] != "plan_id" || strings.Contains(strings.ToLower(e["message"].(string)), "awaiting") {
		t.Fatalf("plan_status by another agent: %d %v; want 404 naming plan_id and nothing of the plan", st, out)
	}
	// Over MCP too.
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent-2"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer(agent2Token)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "plan_status", Arguments: map[string]any{"plan_id": id}})
	if err != nil || !res.IsError || strings.Contains(textOf(res), "awaiting") {
		t.Fatalf("plan_status over MCP by another agent: %v %+v", err, res)
	}
	// The same work proposed by another agent: the plan, and how to follow it.
	st, out = call(agent2Token, "/v1/calls", `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-1"},"run_id":"r2"}`)
	if st != http.StatusOK || out["repeat"] != true || out["plan"].(map[string]any)["id"] != id || !strings.Contains(out["message"].(string), "propose the same work again") {
		t.Fatalf("the same work by another agent: %d %v", st, out)
	}

	// Commits: agent-2's worker is not given agent-1's approved payout.
	if st, out := call(agentToken, "/v1/calls", `{"tool":"plan_pay_out","args":{"payout_id":"PO-1"},"run_id":"r1"}`); st != http.StatusOK {
		t.Fatalf("propose a payout: %d %v", st, out)
	}
	next := `{"tools":["pay_out"]}`
	if st, out := call(agent2Token, "/v1/commits/next", next); st != http.StatusOK || out["status"] != "idle" {
		t.Fatalf("another agent's worker: %d %v; want idle", st, out)
	}
	if st, out := call(agentToken, "/v1/commits/next", next); st != http.StatusOK || out["status"] != "execute" {
		t.Fatalf("the proposer's worker: %d %v; want execute", st, out)
	}
	// A tool that names its workers: theirs alone, even its proposer's not.
	if st, out := call(agentToken, "/v1/calls", `{"tool":"plan_ship","args":{"order_id":"O-1"},"run_id":"r1"}`); st != http.StatusOK {
		t.Fatalf("propose a shipment: %d %v", st, out)
	}
	next = `{"tools":["ship"]}`
	for _, token := range []string{agentToken, agent2Token} {
		if st, out := call(token, "/v1/commits/next", next); st != http.StatusOK || out["status"] != "idle" {
			t.Fatalf("a worker not named: %d %v; want idle", st, out)
		}
	}
	if st, out := call(workerToken, "/v1/commits/next", next); st != http.StatusOK || out["status"] != "execute" {
		t.Fatalf("the named worker: %d %v; want execute", st, out)
	}
}

// textOf is the text of a tool result's content.
func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}
