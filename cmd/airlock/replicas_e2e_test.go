package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/testdb"
)

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// page is an approver's browser without JavaScript: a cookie jar (cookies
// are not told apart by port, so two replicas on 127.0.0.1 share them, as
// two replicas behind one load balancer would) and no redirects followed.
type page struct {
	t      *testing.T
	client *http.Client
}

func newPage(t *testing.T) *page {
	jar, _ := cookiejar.New(nil)
	return &page{t: t, client: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// get returns the status, the body and the form token of a page.
func (p *page) get(u string) (int, string, string) {
	p.t.Helper()
	resp, err := p.client.Get(u)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	csrf := ""
	if m := csrfField.FindSubmatch(raw); m != nil {
		csrf = string(m[1])
	}
	return resp.StatusCode, string(raw), csrf
}

func (p *page) post(u string, form url.Values) (int, string) {
	p.t.Helper()
	resp, err := p.client.PostForm(u, form)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// A sign-in is known to every replica: signed in through one, an approver
// decides through the other, and signing out on either ends it on both.
func TestE2EReplicasShareSignIn(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	a := serve(t, config, dsn)
	b := serve(t, config, dsn)
	status, body := apiCall(t, "POST", a.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-7"},"run_id":"replicas"}`)
	if status != 200 {
		t.Fatalf("propose: %d %v", status, body)
	}
	id := body["plan"].(map[string]any)["id"].(string)
	_, full := apiCall(t, "GET", b.url()+"/v1/plans/"+id, approverToken, "")
	hash := full["decision_hash"].(string)

	p := newPage(t)
	// The sign-in form from one replica is accepted by the other (the
	// form's key is shared through the database).
	_, _, pre := p.get(a.url() + "/ui/signin")
	if st, loc := p.post(b.url()+"/ui/signin", url.Values{"csrf": {pre}, "token": {approverToken}}); st != http.StatusSeeOther || loc != "/ui/" {
		t.Fatalf("sign in through b with a's form: %d %q", st, loc)
	}
	st, queue, csrf := p.get(a.url() + "/ui/")
	if st != 200 || !strings.Contains(queue, id) || csrf == "" {
		t.Fatalf("the queue through a, signed in through b: %d %q", st, queue)
	}
	if st, loc := p.post(b.url()+"/ui/plans/"+id+"/decide", url.Values{"csrf": {csrf}, "action": {"approve"}, "decision_hash": {hash}, "reason": {"ok"}}); st != http.StatusSeeOther {
		t.Fatalf("approve through b: %d %q", st, loc)
	}
	_, after := apiCall(t, "GET", a.url()+"/v1/plans/"+id, approverToken, "")
	if after["decided_by"] != "alice" || after["status"] == "awaiting_approval" {
		t.Fatalf("the plan after approving through the page: %v", after)
	}
	// Deciding again is refused; the message is shown once, on whichever
	// replica serves the next page.
	p.post(b.url()+"/ui/plans/"+id+"/decide", url.Values{"csrf": {csrf}, "action": {"reject"}, "decision_hash": {hash}})
	if _, pg, _ := p.get(a.url() + "/ui/plans/" + id); !strings.Contains(pg, `class="flash"`) {
		t.Errorf("the refusal's message was not shown on the other replica")
	}
	if _, pg, _ := p.get(b.url() + "/ui/plans/" + id); strings.Contains(pg, `class="flash"`) {
		t.Errorf("the refusal's message was shown twice")
	}
	if st, _ := p.post(b.url()+"/ui/signout", url.Values{"csrf": {csrf}}); st != http.StatusSeeOther {
		t.Fatalf("sign out through b: %d", st)
	}
	// The jar dropped the cookie; a copy of it kept by someone else must
	// not work either.
	for _, r := range []*proc{a, b} {
		if st, _, _ := p.get(r.url() + "/ui/"); st != http.StatusSeeOther {
			t.Errorf("%s after sign-out: %d, want a redirect to sign in", r.url(), st)
		}
	}
}
