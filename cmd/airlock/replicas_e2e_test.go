package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

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

// A notice of a plan waiting for a person survives the replica that was
// sending it: killed mid-delivery, the job is rescued and the other replica
// delivers it — once, signed, with the event id the first attempt carried.
func TestE2ENoticeSurvivesAKilledReplica(t *testing.T) {
	t.Parallel()
	dsn := testdb.Schema(t)
	type delivery struct {
		eventID, signature string
		body               []byte
	}
	var (
		mu        sync.Mutex
		attempts  []delivery
		delivered []delivery
	)
	firstIn, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d := delivery{r.Header.Get("X-Airlock-Event-Id"), r.Header.Get("X-Airlock-Signature"), b}
		mu.Lock()
		attempts = append(attempts, d)
		first := len(attempts) == 1
		mu.Unlock()
		if first { // the first delivery hangs: its sender is killed meanwhile
			once.Do(func() { close(firstIn) })
			<-release
			return
		}
		mu.Lock()
		delivered = append(delivered, d)
		mu.Unlock()
	}))
	defer hook.Close()
	defer close(release)

	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", fmt.Sprintf("\nnotify: {webhook: %q, secret_env: E2E_NOTIFY_SECRET}\n", hook.URL))
	env := append(slices.Clone(tokenEnv), "E2E_NOTIFY_SECRET=notice-secret")
	flags := []string{"serve", "--config", config, "--db", dsn, "--commit-rescue-after", "4s"}
	a := start(t, env, bin(t, "airlock"), append(flags, "--listen", freeAddr(t))...)
	status, body := apiCall(t, "POST", a.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"WD-8"},"run_id":"notice"}`)
	if status != 200 {
		t.Fatalf("propose: %d %v", status, body)
	}
	id := body["plan"].(map[string]any)["id"].(string)
	select {
	case <-firstIn:
	case <-time.After(20 * time.Second):
		t.Fatal("the notice was not sent")
	}
	// a is sending (the only replica); b starts, then a dies mid-delivery.
	b := start(t, env, bin(t, "airlock"), append(flags, "--listen", freeAddr(t))...)
	_ = a.cmd.Process.Kill()
	<-a.exited

	deadline := time.Now().Add(60 * time.Second)
	for {
		mu.Lock()
		n := len(delivered)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the notice was not delivered by the other replica:\n%s", b.output())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // nothing more comes
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 1 || len(attempts) != 2 {
		t.Fatalf("%d deliveries in %d attempts; want 1 in 2 (the killed one and the rescue)", len(delivered), len(attempts))
	}
	want := "plan_waiting/" + id
	mac := hmac.New(sha256.New, []byte("notice-secret"))
	mac.Write(delivered[0].body)
	if attempts[0].eventID != want || delivered[0].eventID != want || delivered[0].signature != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		t.Fatalf("event ids %q then %q (want %q); signature %q", attempts[0].eventID, delivered[0].eventID, want, delivered[0].signature)
	}
}
