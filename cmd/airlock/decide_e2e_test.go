package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockhq/airlock/internal/testdb"
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
		// The list says how many wait, whatever the page: RS-1 alone.
		if _, list := apiCall(t, "GET", base+"/v1/plans?status=awaiting_approval&limit=1", adminToken, ""); list["waiting"] != float64(1) {
			t.Fatalf("waiting: %v", list["waiting"])
		}
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

// TestE2EWhoDecidesInABrowser: two approvers approve one plan on the page,
// which says "1 of 2" between them; the proposer of another plan sees no
// Approve button and the reason; the queue names each plan's work.
func TestE2EWhoDecidesInABrowser(t *testing.T) {
	t.Parallel()
	browser := findBrowser(t)
	payments := startPayments(t)
	srv := serve(t, e2eManifest(t, payments.url(), "", "", whoDecidesTools), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	propose := func(token, tool, record string) string {
		t.Helper()
		status, body := apiCall(t, "POST", srv.url()+"/v1/calls", token, fmt.Sprintf(`{"tool":"plan_%s","args":{"record_id":%q}}`, tool, record))
		if status != 200 {
			t.Fatalf("propose %s: %d %v", record, status, body)
		}
		return body["plan"].(map[string]any)["id"].(string)
	}
	large := propose(agentToken, "approve_large", "LG-9")
	own := propose(adminToken, "approve_withdrawal", "SOD-9")

	b := openTab(t, browser)
	signIn := func(token string) {
		t.Helper()
		b.do(chromedp.Navigate(srv.url()+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("token")), chromedp.SendKeys(chromedp.ID("token"), token))
		b.submit(chromedp.Click(chromedp.ID("signin")))
	}
	approve := func(id, reason string) {
		t.Helper()
		b.do(chromedp.Navigate(srv.url()+"/ui/plans/"+id), chromedp.WaitVisible(chromedp.ID("reason")), chromedp.SendKeys(chromedp.ID("reason"), reason))
		b.submit(chromedp.Click(chromedp.ID("approve")))
	}

	signIn(approverToken)
	if q := b.text("#queue"); !strings.Contains(q, "record_id: LG-9") || !strings.Contains(q, "0 of 2") || !strings.Contains(q, "record_id: SOD-9") {
		t.Fatalf("the queue does not name the work: %s", q)
	}
	if total := b.text("#total"); total != "2" {
		t.Fatalf("the queue counts %s, want 2", total)
	}
	approve(large, "alice checked the ledger")
	if got := b.text("#approvals"); !strings.Contains(got, "1 of 2") || !strings.Contains(got, "alice") {
		t.Fatalf("after alice: %q, want 1 of 2", got)
	}
	if st := b.text("#status"); st != "awaiting_approval" {
		t.Fatalf("after one approval of two the plan is %s", st)
	}

	signIn(adminToken)
	approve(large, "root checked the ledger")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, p := apiCall(t, "GET", srv.url()+"/v1/plans/"+large, adminToken, "")
		if p["status"] == "committed" {
			if len(p["approvals"].([]any)) != 2 || p["decided_by"] != "root" {
				t.Fatalf("committed: %v", p)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not committed: %v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// root proposed SOD-9: the page offers root no Approve button, and says why.
	b.do(chromedp.Navigate(srv.url()+"/ui/plans/"+own), chromedp.WaitVisible(chromedp.ID("reason")))
	if why := b.text("#cannot-approve"); !strings.Contains(why, "separation of duties") {
		t.Fatalf("the reason shown: %q", why)
	}
	if proposer := b.text("#proposed-by"); proposer != "root" {
		t.Fatalf("proposed by %q on the page", proposer)
	}
	noButton, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`document.getElementById("approve") === null`))
	if err != nil || !noButton {
		t.Fatalf("the proposer is offered an Approve button (%v)", err)
	}
}

// TestE2ETwoApprovalsOnTwoReplicas: the two approvals a plan needs arrive
// at once, one at each of two replicas on one PostgreSQL database: the
// plan is approved once and the payment made once, every time.
func TestE2ETwoApprovalsOnTwoReplicas(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", whoDecidesTools)
	a := serve(t, config, dsn)
	b := serve(t, config, dsn)
	const plans = 8
	ids := make([]string, plans)
	for i := range ids {
		status, body := apiCall(t, "POST", a.url()+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"plan_approve_large","args":{"record_id":"RP-%d"}}`, i))
		if status != 200 {
			t.Fatalf("propose: %d %v", status, body)
		}
		ids[i] = body["plan"].(map[string]any)["id"].(string)
	}
	for i, id := range ids {
		_, full := apiCall(t, "GET", a.url()+"/v1/plans/"+id, adminToken, "")
		body := fmt.Sprintf(`{"reason":"checked","decision_hash":%q}`, full["decision_hash"])
		statuses := make(chan int, 2)
		for _, at := range []struct{ base, token string }{{a.url(), approverToken}, {b.url(), adminToken}} {
			go func() {
				status, _, err := tryAPICall("POST", at.base+"/v1/plans/"+id+"/approve", at.token, body)
				if err != nil {
					status = -1
				}
				statuses <- status
			}()
		}
		if s1, s2 := <-statuses, <-statuses; s1 != 200 || s2 != 200 {
			t.Fatalf("plan %d: the approvals answered %d and %d", i, s1, s2)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, id := range ids {
		for {
			_, p := apiCall(t, "GET", b.url()+"/v1/plans/"+id, adminToken, "")
			if p["status"] == "committed" {
				if n := len(p["approvals"].([]any)); n != 2 {
					t.Fatalf("plan %s committed with %d approvals", id, n)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("plan %s: %v", id, p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	st := stats(t, payments)
	for i := range plans {
		if n := st.Approvals[fmt.Sprintf("RP-%d", i)]; n != 1 {
			t.Fatalf("RP-%d paid %d times", i, n)
		}
	}
}
