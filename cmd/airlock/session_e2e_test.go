package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A page session ends with the token that opened it (docs/hardening.md,
// "page sessions"), across a restart as an operator makes one: alice signs
// in, her token is rotated and the server restarted — her cookie then
// loads no queue and approves nothing, and the plan waits; signed in
// again, her token is demoted to agent and the server restarted — the
// same. Her new token signs in as before.
func TestE2EPageSessionEndsWithItsToken(t *testing.T) {
	t.Parallel()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "a.db")
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	src, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	demoted := filepath.Join(t.TempDir(), "demoted.yaml")
	if err := os.WriteFile(demoted, []byte(strings.Replace(string(src), "{name: alice, role: approver,", "{name: alice, role: agent,", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	const rotatedToken = "approver-secret-2"
	rotatedEnv := append(append([]string{}, tokenEnv...), "E2E_APPROVER="+rotatedToken) // the last value of a name counts
	serveWith := func(env []string, config string) *proc {
		t.Helper()
		return start(t, env, bin(t, "airlock"), "serve", "--config", config, "--db", dsn, "--listen", freeAddr(t))
	}

	srv := serveWith(tokenEnv, config)
	status, body := apiCall(t, "POST", srv.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-81"},"run_id":"sessions"}`)
	if status != 200 {
		t.Fatalf("propose: %d %v", status, body)
	}
	id := body["plan"].(map[string]any)["id"].(string)
	_, full := apiCall(t, "GET", srv.url()+"/v1/plans/"+id, approverToken, "")
	hash := full["decision_hash"].(string)

	// signIn signs a new browser in as alice with token; its queue's form
	// token is returned for deciding later.
	signIn := func(srv *proc, token string) (*page, string) {
		t.Helper()
		p := newPage(t)
		_, _, pre := p.get(srv.url() + "/ui/signin")
		if st, loc := p.post(srv.url()+"/ui/signin", url.Values{"csrf": {pre}, "token": {token}}); st != http.StatusSeeOther || loc != "/ui/" {
			t.Fatalf("sign in: %d %q", st, loc)
		}
		st, queue, csrf := p.get(srv.url() + "/ui/")
		if st != 200 || !strings.Contains(queue, id) || csrf == "" {
			t.Fatalf("the queue after signing in: %d", st)
		}
		return p, csrf
	}
	// refused checks that p's session has ended for why: the queue is not
	// shown, a decision is not taken, and the plan still waits.
	refused := func(srv *proc, p *page, csrf, why, approver string) {
		t.Helper()
		st, pg, _ := p.get(srv.url() + "/ui/")
		if st != http.StatusUnauthorized || !strings.Contains(pg, "Your sign-in has ended: "+why) || strings.Contains(pg, id) {
			t.Fatalf("the queue with the old session: %d, want 401 saying %q:\n%s", st, why, pg)
		}
		if st, _ := p.post(srv.url()+"/ui/plans/"+id+"/decide", url.Values{"csrf": {csrf}, "action": {"approve"}, "decision_hash": {hash}}); st != http.StatusUnauthorized {
			t.Fatalf("a decision with the old session: %d, want 401", st)
		}
		if _, plan := apiCall(t, "GET", srv.url()+"/v1/plans/"+id, approver, ""); plan["status"] != "awaiting_approval" {
			t.Fatalf("the plan after the refused decision: %v", plan)
		}
	}

	p, csrf := signIn(srv, approverToken)
	srv.stop()
	srv = serveWith(rotatedEnv, config)
	if st, _ := apiCall(t, "GET", srv.url()+"/v1/plans/"+id, approverToken, ""); st != http.StatusUnauthorized {
		t.Fatalf("the rotated-out token on the API: %d", st)
	}
	refused(srv, p, csrf, "the token it was made with was changed or removed", rotatedToken)
	signIn(srv, rotatedToken) // the new token signs in

	p, csrf = signIn(srv, rotatedToken)
	srv.stop()
	srv = serveWith(rotatedEnv, demoted)
	refused(srv, p, csrf, "its token&#39;s role is now agent, which may not use the page", adminToken)
}
