package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// whoDecidesTools are two more irreversible tools on the payments service:
// one that needs two distinct approvers, one only root may decide.
const whoDecidesTools = `
  - name: approve_large
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /withdrawals/approve}
    answers: {undo: "No.", approver: "Two people.", on_repeat: "The first approval."}
    approval: {rules: [{name: large, when: "true", decide: human, approvals: 2}]}
  - name: approve_restricted
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {name: payments, path: /withdrawals/approve}
    answers: {undo: "No.", approver: "The payments lead.", on_repeat: "The first approval."}
    approval: {approvers: [root], rules: [{name: all, when: "true", decide: human}]}
`

// TestE2EWhoDecides: separation of duties, two approvers and an approver
// list, through the HTTP API and the CLI of a running server.
func TestE2EWhoDecides(t *testing.T) {
	t.Parallel()
	payments := startPayments(t)
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	config := e2eManifest(t, payments.url(), "", "", whoDecidesTools)
	srv := serve(t, config, dsn)
	base := srv.url()
	propose := func(token, tool, record string) (string, string) {
		t.Helper()
		status, body := apiCall(t, "POST", base+"/v1/calls", token, fmt.Sprintf(`{"tool":"plan_%s","args":{"record_id":%q}}`, tool, record))
		plan, _ := body["plan"].(map[string]any)
		if status != 200 || plan == nil {
			t.Fatalf("propose %s %s: %d %v", tool, record, status, body)
		}
		id := plan["id"].(string)
		_, full := apiCall(t, "GET", base+"/v1/plans/"+id, adminToken, "")
		return id, full["decision_hash"].(string)
	}
	decide := func(token, id, hash, verb string) (int, map[string]any) {
		t.Helper()
		return apiCall(t, "POST", base+"/v1/plans/"+id+"/"+verb, token, fmt.Sprintf(`{"reason":"checked the ledger","decision_hash":%q}`, hash))
	}
	waitCommitted := func(id string) map[string]any {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			_, body := apiCall(t, "GET", base+"/v1/plans/"+id, adminToken, "")
			if body["status"] == "committed" {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("plan %s not committed: %v", id, body)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	t.Run("the proposer may not approve", func(t *testing.T) {
		id, hash := propose(adminToken, "approve_withdrawal", "SOD-1")
		status, body := decide(adminToken, id, hash, "approve")
		if status != 403 || !strings.Contains(fmt.Sprint(body), "separation of duties") {
			t.Fatalf("root approving its own plan: %d %v; want 403 naming separation of duties", status, body)
		}
		_, plan := apiCall(t, "GET", base+"/v1/plans/"+id, approverToken, "")
		if plan["proposed_by"] != "root" || plan["status"] != "awaiting_approval" {
			t.Fatalf("the plan: %v", plan)
		}
		// The CLI on the database, acting as root, is refused too.
		r := runCLI(t, "plans", "approve", id, "--db", dsn, "--as", "root", "--reason", "mine")
		if r.code == 0 || !strings.Contains(r.stderr, "separation of duties") {
			t.Fatalf("the CLI as root: exit %d %s%s", r.code, r.stdout, r.stderr)
		}
		if status, body := decide(approverToken, id, hash, "approve"); status != 200 {
			t.Fatalf("alice approving: %d %v", status, body)
		}
		if p := waitCommitted(id); p["decided_by"] != "alice" {
			t.Fatalf("decided by %v", p["decided_by"])
		}
		_, trail := apiCall(t, "GET", base+"/v1/audit?plan_id="+id, adminToken, "")
		if !strings.Contains(fmt.Sprint(trail), "decision_refused") {
			t.Fatalf("the refusal is not in the audit trail: %v", trail)
		}
	})

	t.Run("two distinct approvers", func(t *testing.T) {
		id, hash := propose(agentToken, "approve_large", "LG-1")
		for range 2 {
			status, body := decide(approverToken, id, hash, "approve")
			if status != 200 || body["status"] != "awaiting_approval" || len(body["approvals"].([]any)) != 1 || body["approvals_required"] != float64(2) {
				t.Fatalf("alice's approval: %d %v; want 1 of 2, still waiting", status, body)
			}
		}
		if status, body := decide(adminToken, id, hash, "approve"); status != 200 || body["status"] != "approved" {
			t.Fatalf("root's approval: %d %v", status, body)
		}
		p := waitCommitted(id)
		if p["decided_by"] != "root" || len(p["approvals"].([]any)) != 2 {
			t.Fatalf("committed: %v", p)
		}
		if got := stats(t, payments).Approvals["LG-1"]; got != 1 {
			t.Fatalf("payments saw LG-1 %d times", got)
		}
		// One rejection rejects.
		id, hash = propose(agentToken, "approve_large", "LG-2")
		if status, _ := decide(approverToken, id, hash, "approve"); status != 200 {
			t.Fatal("alice's approval refused")
		}
		if status, body := decide(adminToken, id, hash, "reject"); status != 200 || body["status"] != "rejected" {
			t.Fatalf("root's rejection: %d %v", status, body)
		}
	})

	t.Run("only the tool's approvers decide", func(t *testing.T) {
		id, hash := propose(agentToken, "approve_restricted", "RS-1")
		status, body := decide(approverToken, id, hash, "approve")
		if status != 403 || !strings.Contains(fmt.Sprint(body), "only root may") {
			t.Fatalf("alice on a root-only tool: %d %v", status, body)
		}
		if status, body := decide(approverToken, id, hash, "reject"); status != 403 {
			t.Fatalf("alice rejecting on a root-only tool: %d %v", status, body)
		}
		if status, body := decide(adminToken, id, hash, "approve"); status != 200 {
			t.Fatalf("root: %d %v", status, body)
		}
		waitCommitted(id)
	})

	t.Run("tools list says who decides", func(t *testing.T) {
		r := runCLI(t, "tools", "list", "--config", config)
		for _, want := range []string{"2 distinct approvers under rule large", "only root", "separation of duties: the proposer may not approve"} {
			if !strings.Contains(r.stdout, want) {
				t.Fatalf("tools list lacks %q:\n%s", want, r.stdout)
			}
		}
	})
}
