package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"
)

// People sign in through the company's OpenID Connect provider (started
// here): the approver's group lets her in, she approves a plan, and the
// audit trail names her; a person in no mapped group is refused.
func TestE2EOIDCSignInInABrowser(t *testing.T) {
	t.Parallel()
	browser := findBrowser(t)
	idp, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = idp.Shutdown() })

	payments := startPayments(t)
	addr := freeAddr(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	src, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	oidcConf := fmt.Sprintf(`auth:
  oidc:
    issuer: %q
    client_id: %q
    client_secret_env: E2E_OIDC_SECRET
    redirect_url: "http://%s/ui/oidc/callback"
    scopes: [openid, email, profile, groups]
    roles: {payments-approvers: approver, airlock-admins: admin}
    label: Sign in with Acme SSO
`, idp.Issuer(), idp.ClientID, addr)
	if err := os.WriteFile(config, []byte(strings.Replace(string(src), "auth:\n", oidcConf, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := start(t, append(tokenEnv, "E2E_OIDC_SECRET="+idp.ClientSecret), bin(t, "airlock"), "serve", "--config", config,
		"--db", "sqlite:"+filepath.Join(t.TempDir(), "a.db"), "--listen", addr)

	if out := srv.output(); !strings.Contains(out, "sign-in: single sign-on through "+idp.Issuer()) {
		t.Errorf("serve does not say how people sign in:\n%s", out)
	}
	status, body := apiCall(t, "POST", srv.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-31"},"run_id":"sso"}`)
	if status != 200 {
		t.Fatalf("propose: %d %v", status, body)
	}
	id := body["plan"].(map[string]any)["id"].(string)

	b := openTab(t, browser)
	do, text := b.do, b.text
	// signIn clicks the single sign-on button as the provider's next user
	// and waits for the page it ends on.
	signIn := func(u *mockoidc.MockUser, waitFor string) string {
		t.Helper()
		idp.QueueUser(u)
		do(chromedp.Navigate(srv.url()+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("sso")))
		if got := text("#sso"); got != "Sign in with Acme SSO" {
			t.Fatalf("the button says %q", got)
		}
		do(chromedp.Click(chromedp.ID("sso")), chromedp.WaitVisible(chromedp.CSS(waitFor)))
		return text("body")
	}

	// Someone the provider knows, in no group that may approve: refused.
	bob := &mockoidc.MockUser{Subject: "u-bob", Email: "bob@acme.example", EmailVerified: true, PreferredUsername: "bob", Groups: []string{"staff"}}
	if page := signIn(bob, ".flash"); !strings.Contains(page, "bob@acme.example is in no group that may use airlock") {
		t.Fatalf("bob: %s", page)
	}
	if st, _, _ := newPage(t).get(srv.url() + "/ui/"); st != 303 {
		t.Fatalf("the queue without a session: %d", st)
	}

	// The approver: in, sees the queue, approves.
	ana := &mockoidc.MockUser{Subject: "u-ana", Email: "ana@acme.example", EmailVerified: true, PreferredUsername: "ana", Groups: []string{"staff", "payments-approvers"}}
	if page := signIn(ana, "#queue"); !strings.Contains(page, id) || !strings.Contains(page, "ana@acme.example (approver)") {
		t.Fatalf("ana's queue: %s", page)
	}
	do(chromedp.Navigate(srv.url()+"/ui/plans/"+id), chromedp.WaitVisible(chromedp.ID("reason")),
		chromedp.SendKeys(chromedp.ID("reason"), "matches the ledger"))
	b.submit(chromedp.Click(chromedp.ID("approve")))
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, p := apiCall(t, "GET", srv.url()+"/v1/plans/"+id, approverToken, "")
		_, trail := apiCall(t, "GET", srv.url()+"/v1/audit?plan_id="+id, approverToken, "")
		decidedBy := ""
		for _, e := range trail["events"].([]any) {
			if ev := e.(map[string]any); ev["kind"] == "decided" {
				decidedBy, _ = ev["actor"].(string)
			}
		}
		if p["status"] == "committed" && decidedBy != "" {
			if p["decided_by"] != "oidc:ana@acme.example" || decidedBy != "oidc:ana@acme.example" {
				t.Fatalf("decided by %v, the audit trail says %q; want oidc:ana@acme.example", p["decided_by"], decidedBy)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not committed and recorded: %v %v", p, trail)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := stats(t, payments); n.Calls != 1 {
		t.Fatalf("the payments service ran %d calls, want 1", n.Calls)
	}
}
