package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// findBrowser returns Chromium's path, or skips (fails when
// AIRLOCK_TEST_REQUIRE_BROWSER=1, as in CI).
func findBrowser(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("AIRLOCK_TEST_REQUIRE_BROWSER") == "1" {
		t.Fatal("no Chromium found and AIRLOCK_TEST_REQUIRE_BROWSER=1")
	}
	t.Skip("no Chromium; skipping the browser test")
	return ""
}

func artifactsDir(t *testing.T) string {
	dir := os.Getenv("AIRLOCK_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "airlock-ui-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tab is one Chromium tab for a test, closed with it.
type tab struct {
	t   *testing.T
	ctx context.Context
}

func openTab(t *testing.T, browser string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	return &tab{t: t, ctx: ctx}
}

// do runs steps.
func (b *tab) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// submit runs steps that load a page and waits for it.
func (b *tab) submit(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if _, err := chromedp.RunResponse(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

// text is the text of the element css selects.
func (b *tab) text(css string) string {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		b.t.Fatal(err)
	}
	return v
}

func TestE2EUIInABrowser(t *testing.T) {
	t.Parallel()
	browser := findBrowser(t)
	payments := startPayments(t, "--latency", "600ms")
	srv := serve(t, e2eManifest(t, payments.url(), "", "", `
  - name: slow_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}, {field: text}]
    window: forever
    timeout: 300ms
    reconcile_with: get_withdrawal
    upstream: {name: payments, path: /withdrawals/note}
    answers: {undo: "Yes.", approver: "No one.", on_repeat: "The first note."}
`), "sqlite:"+filepath.Join(t.TempDir(), "a.db"))
	propose := func(record string) (id, hash string) {
		status, body := apiCall(t, "POST", srv.url()+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"plan_approve_withdrawal","args":{"record_id":%q},"run_id":"ui-run"}`, record))
		if status != 200 {
			t.Fatalf("propose %s: %d %v", record, status, body)
		}
		// The agent learns the plan's id, not its hash; the approver reads it.
		id = body["plan"].(map[string]any)["id"].(string)
		status, full := apiCall(t, "GET", srv.url()+"/v1/plans/"+id, approverToken, "")
		if status != 200 {
			t.Fatalf("plan %s: %d %v", id, status, full)
		}
		return id, full["decision_hash"].(string)
	}
	id1, _ := propose("WD-101")
	id2, _ := propose("WD-102")
	id3, _ := propose("WD-103")
	shots := artifactsDir(t)

	b := openTab(t, browser)
	ctx, do, submit := b.ctx, b.do, b.submit
	script := func(js string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
			_, err := chromedp.Evaluate[any](js)(ctx, tg)
			return chromedp.Void{}, err
		}
	}
	text := b.text
	shot := func(name string) {
		t.Helper()
		buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	signIn := func(token string) string {
		do(chromedp.Navigate(srv.url()+"/ui/signin"), chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), token))
		submit(chromedp.Click(chromedp.ID("signin")))
		return text("body")
	}

	// An agent token cannot sign in.
	if body := signIn(agentToken); !strings.Contains(body, "Agent tokens cannot sign in") {
		t.Fatalf("agent sign-in: %s", body)
	}

	// The approver signs in and sees the plans waiting.
	if body := signIn(approverToken); !strings.Contains(body, "Waiting for a person") {
		t.Fatalf("approver sign-in: %s", body)
	}
	do(chromedp.WaitVisible(chromedp.ID("queue")))
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if body := text("#queue"); !strings.HasPrefix(title, "(3) Queue") || !strings.Contains(body, id1) || !strings.Contains(body, "all") {
		t.Fatalf("queue: title %q body %s", title, body)
	}
	shot("queue")

	// Approve the first plan.
	do(chromedp.Navigate(srv.url()+"/ui/plans/"+id1), chromedp.WaitVisible(chromedp.ID("reason")))
	shot("plan")
	do(chromedp.SendKeys(chromedp.ID("reason"), "checked the ledger"))
	submit(chromedp.Click(chromedp.ID("approve")))
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, p := apiCall(t, "GET", srv.url()+"/v1/plans/"+id1, approverToken, "")
		if p["status"] == "committed" {
			if p["decided_by"] != "alice" {
				t.Fatalf("decided by %v", p["decided_by"])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not committed: %v", p)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := stats(t, payments); n.Calls != 1 {
		t.Fatalf("the payments service ran %d calls, want 1", n.Calls)
	}
	do(chromedp.Navigate(srv.url()+"/ui/plans/"+id1), chromedp.WaitVisible(chromedp.ID("result")))
	shot("plan-committed")

	// Reject the second.
	do(chromedp.Navigate(srv.url()+"/ui/plans/"+id2), chromedp.WaitVisible(chromedp.ID("reason")),
		chromedp.SendKeys(chromedp.ID("reason"), "not expected"))
	submit(chromedp.Click(chromedp.ID("reject")))
	if got := text("#status"); got != "rejected" {
		t.Fatalf("after reject: %q", got)
	}

	// A forged form without the CSRF token is refused.
	do(chromedp.Navigate(srv.url()+"/ui/plans/"+id3), chromedp.WaitVisible(chromedp.ID("reason")))
	do(script(`document.querySelector('#decide input[name=csrf]').remove()`), chromedp.SendKeys(chromedp.ID("reason"), "forged"))
	submit(chromedp.Click(chromedp.ID("approve")))
	if body := text("body"); !strings.Contains(body, "CSRF") {
		t.Fatalf("forged form: %s", body)
	}
	if _, p := apiCall(t, "GET", srv.url()+"/v1/plans/"+id3, approverToken, ""); p["status"] != "awaiting_approval" {
		t.Fatalf("the forged decision took effect: %v", p)
	}

	// An approver cannot reach admin actions: settling is refused even with a valid form.
	do(chromedp.Navigate(srv.url()+"/ui/in-doubt"), chromedp.WaitReady(chromedp.CSS("main")))
	submit(script(`(() => { const f = document.createElement('form'); f.method = 'post'; f.action = '/ui/records/somekey/settle';
		for (const [k, v] of [['csrf', document.querySelector('input[name=csrf]').value], ['note', 'x'], ['happened', 'false']]) {
			const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
		document.body.appendChild(f); f.submit(); return true; })()`))
	if body := text("body"); !strings.Contains(body, "only an admin settles records") {
		t.Fatalf("approver settling: %s", body)
	}

	// Every page renders; screenshots are kept as artefacts.
	for _, page := range []struct{ path, name, want string }{
		{"/ui/history", "history", id2},
		{"/ui/tools", "tools", "Can it be undone?"},
		{"/ui/watch", "watch", "Audit completeness"},
	} {
		do(chromedp.Navigate(srv.url()+page.path), chromedp.WaitReady(chromedp.CSS("main")))
		if body := text("main"); !strings.Contains(body, page.want) {
			t.Fatalf("%s lacks %q:\n%s", page.path, page.want, body)
		}
		shot(page.name)
	}
	// A call that times out is in doubt; the admin sees what the reconcile
	// tool says and settles it.
	status, body := apiCall(t, "POST", srv.url()+"/v1/calls", agentToken, `{"tool":"slow_note","args":{"record_id":"WD-555","text":"late"},"run_id":"ui-run"}`)
	if status != 200 || body["status"] != "in_doubt" {
		t.Fatalf("slow call: %d %v", status, body)
	}
	submit(chromedp.Click(chromedp.CSS("header form button")))
	signIn(adminToken)
	// The reconcile tool is asked in the background (every 5 s), never by
	// a view: the page says so until its answer is in.
	for deadline := time.Now().Add(30 * time.Second); ; {
		do(chromedp.Navigate(srv.url()+"/ui/in-doubt"), chromedp.WaitReady(chromedp.CSS("main")))
		if got := text("main"); strings.Contains(got, "The reconcile tool says") {
			break
		} else if time.Now().After(deadline) || !strings.Contains(got, "asks the reconcile tool in the background") {
			t.Fatalf("the in-doubt page, waiting for the reconcile tool's answer: %s", got)
		}
		time.Sleep(time.Second)
	}
	if got := text("main"); !strings.Contains(got, "The reconcile tool says") || !strings.Contains(got, "WD-555") {
		t.Fatalf("in doubt page: %s", got)
	}
	shot("in-doubt")
	do(chromedp.SendKeys(chromedp.CSS("input[name=note]"), "not in the ledger"))
	submit(chromedp.Click(chromedp.CSS("button[value=false]")))
	if got := text("main"); !strings.Contains(got, "Settled.") || !strings.Contains(got, "Nothing is in doubt") {
		t.Fatalf("after settling: %s", got)
	}
	t.Logf("screenshots in %s", shots)
}
