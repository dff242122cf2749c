package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/ui"
)

// pageClient is an approver signed in to a page over plans' store.
type pageClient struct {
	t    testing.TB
	base string
	c    *http.Client
}

// approverPage serves a page of manifestText whose every token signs in
// as an approver of that name, and signs ana in.
func approverPage(t testing.TB, manifestText string) (*manifest.Manifest, *plan.Service, pageClient) {
	t.Helper()
	m, s, g, plans := pageDeps(t, manifestText)
	page, err := ui.New(withTokens(ui.Config{Manifest: m, Store: s, Guard: g, Plans: plans},
		func(token string) (ui.Principal, bool) {
			return ui.Principal{Name: token, Role: airlock.RoleApprover}, true
		}))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(page.Handler())
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	p := pageClient{t: t, base: srv.URL, c: &http.Client{Jar: jar}}
	signInAs(t, p.c, srv.URL, "ana")
	return m, plans, p
}

func (p pageClient) get(path string) (int, string, http.Header) {
	p.t.Helper()
	resp, err := p.c.Get(p.base + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// noInvisible fails when page holds an invisible character other than the
// markup's tab, newline and carriage return.
func noInvisible(t *testing.T, what, page string) {
	t.Helper()
	for i, r := range page {
		if airlock.Invisible(r) && r != '\t' && r != '\n' && r != '\r' {
			t.Fatalf("%s holds U+%04X raw at byte %d: %q", what, r, i, page[max(0, i-40):min(len(page), i+40)])
		}
	}
}

// What an agent writes cannot disguise itself on the page: a zero-width
// space, bidi controls and an escape show as badges naming them (never
// raw, anywhere in the page); a plan whose key field or run id holds one
// is marked, in the queue and on its page, and a plain one is not; two
// plans that would read alike do not.
func TestAgentTextCannotDisguiseItselfOnThePage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, plans, p := approverPage(t, pageManifest)

	propose := func(recordID, run string) *airlock.Plan {
		t.Helper()
		raw, _ := json.Marshal(map[string]string{"record_id": recordID})
		args, err := airlock.NewArgs(raw)
		if err != nil {
			t.Fatal(err)
		}
		pl, _, err := plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), args, run)
		if err != nil {
			t.Fatal(err)
		}
		return pl
	}
	plain := propose("WD-24813", "run-1")
	zwsp := propose("WD-24813\u200b", "run-1")
	bidi := propose("WD-\u2067\u202e3184\u2069", "run-1")
	byRun := propose("WD-5", "1-tnega yb desoporp\u202e")

	_, queue, _ := p.get("/ui/")
	noInvisible(t, "the queue", queue)
	for _, want := range []string{`title="zero-width space">U+200B</span>`, `title="right-to-left override">U+202E</span>`, `title="right-to-left isolate">U+2067</span>`} {
		if !strings.Contains(queue, want) {
			t.Errorf("the queue does not show %s", want)
		}
	}
	if n := strings.Count(queue, `class="marked"`); n != 3 {
		t.Errorf("%d plans marked in the queue, want 3 (the zero-width space, the bidi controls, the run id)", n)
	}
	for _, pl := range []*airlock.Plan{plain, zwsp, bidi, byRun} {
		_, pg, _ := p.get("/ui/plans/" + pl.ID)
		noInvisible(t, "plan "+pl.ID+"'s page", pg)
		if marked := strings.Contains(pg, `id="marked"`); marked != (pl != plain) {
			t.Errorf("plan %s (%q, run %q) marked %v", pl.ID, pl.Args, pl.RunID, marked)
		}
	}
}

// Long values are cut, with their length said and the whole a link away:
// a queue of 100 plans with 100 KB key values stays under 1 MB, a plan's
// page under 64 KB, and the whole arguments come back as the same JSON,
// their invisible characters escaped.
func TestLongValuesAreCutAndTheWholeIsALinkAway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, plans, p := approverPage(t, pageManifest)

	var last *airlock.Plan
	for i := range 100 {
		raw, _ := json.Marshal(map[string]string{"record_id": fmt.Sprintf("WD-%03d-", i) + strings.Repeat("x\u200b", 100_000/4)})
		args, err := airlock.NewArgs(raw)
		if err != nil {
			t.Fatal(err)
		}
		if last, _, err = plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), args, "run-long"); err != nil {
			t.Fatal(err)
		}
	}
	_, queue, _ := p.get("/ui/")
	if len(queue) > 1<<20 || !strings.Contains(queue, "bytes in all)") || strings.Count(queue, "<tr>") != 101 {
		t.Fatalf("the queue of 100 plans with 100 KB key values: %d bytes, %d rows; want under 1 MB, every row, lengths said", len(queue), strings.Count(queue, "<tr>")-1)
	}
	_, pg, _ := p.get("/ui/plans/" + last.ID)
	if len(pg) > 64<<10 || !strings.Contains(pg, `id="whole-args"`) || !strings.Contains(pg, "bytes in all]") {
		t.Fatalf("the plan's page: %d bytes; want under 64 KB, the value cut with its length and a link to the whole", len(pg))
	}
	st, whole, h := p.get("/ui/plans/" + last.ID + "/arguments.json")
	noInvisible(t, "the whole arguments", whole)
	var got, want any
	_ = json.Unmarshal([]byte(whole), &got)
	_ = json.Unmarshal(last.Args, &want)
	if st != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/json") || !reflect.DeepEqual(got, want) {
		t.Fatalf("the whole arguments: %d %s, %d bytes; want the plan's arguments", st, h.Get("Content-Type"), len(whole))
	}
	if st, _, _ := p.get("/ui/plans/" + last.ID + "/secrets.json"); st != http.StatusNotFound {
		t.Fatalf("another part: %d", st)
	}
}

// The queue of 100 plans whose key values are 100 KB each: what a view
// costs (docs/BENCHMARKS.md, "The approvers' queue").
func BenchmarkQueueOfLongPlans(b *testing.B) {
	ctx := context.Background()
	m, plans, p := approverPage(b, pageManifest)
	for i := range 100 {
		raw, _ := json.Marshal(map[string]string{"record_id": fmt.Sprintf("WD-%03d-", i) + strings.Repeat("x\u200b", 100_000/4)})
		if _, _, err := plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), airlock.MustArgs(string(raw)), "run-long"); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	var size int
	for b.Loop() {
		resp, err := p.c.Get(p.base + "/ui/")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		size = len(body)
	}
	b.ReportMetric(float64(size), "page-bytes")
}

// A natural key at a nested path is shown in the queue and marked like a
// top-level one.
func TestANestedKeyFieldIsShownAndMarked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	nested := strings.NewReplacer("properties: {record_id: {type: string}}", "properties: {payee: {type: object, properties: {account: {type: string}}}}",
		"natural_key: [{field: record_id}]", "natural_key: [{field: payee.account}]").Replace(pageManifest)
	m, plans, p := approverPage(t, nested)
	for _, account := range []string{"ACC-1", "ACC-1\u200b"} {
		raw, _ := json.Marshal(map[string]any{"payee": map[string]string{"account": account}})
		if _, _, err := plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), airlock.MustArgs(string(raw)), "run-1"); err != nil {
			t.Fatal(err)
		}
	}
	_, queue, _ := p.get("/ui/")
	if strings.Count(queue, "payee.account: ACC-1") != 2 || strings.Count(queue, `class="marked"`) != 1 {
		t.Fatalf("the queue of nested keys: %d shown, %d marked; want 2 and 1:\n%s", strings.Count(queue, "payee.account: ACC-1"), strings.Count(queue, `class="marked"`), queue)
	}
}

// A plan's page shows its arguments as labelled fields, in the order the
// plan holds them (nested paths and array items named), money the tool's
// display names formatted beside its raw value, and the agent's note; the
// queue shows the note and the formatted amount in its work.
func TestPlanPageShowsLabelledFieldsAndMoney(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	manifestText := strings.NewReplacer(
		"input_schema: {type: object, properties: {record_id: {type: string}}}",
		"input_schema: {type: object, properties: {record_id: {type: string}, amount_minor: {type: integer}, currency: {type: string}, "+
			"note: {type: string}, payee: {type: object, properties: {account: {type: string}}}, tags: {type: array, items: {type: string}}, extra: {type: object, properties: {}}}}",
		"natural_key: [{field: record_id}]", "natural_key: [{field: record_id}, {field: amount_minor}]",
	).Replace(pageManifest) + "    display:\n      money: [{amount: args.amount_minor, currency: args.currency}]\n      note: args.note\n"
	m, plans, p := approverPage(t, manifestText)
	args := `{"record_id":"WD-7","amount_minor":250000,"currency":"USD","note":"customer <b>called</b> twice","payee":{"account":"ACC-1\u200b"},"tags":["a","b"],"extra":{}}`
	pl, _, err := plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), airlock.MustArgs(args), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	_, pg, _ := p.get("/ui/plans/" + pl.ID)
	noInvisible(t, "the plan's page", pg)
	_, table, _ := strings.Cut(pg, `id="args"`)
	table, _, _ = strings.Cut(table, "</table>")
	var rows []string
	for _, m := range regexp.MustCompile(`<tr><th>(.*?)</th><td>(.*?)</td></tr>`).FindAllStringSubmatch(table, -1) {
		rows = append(rows, m[1]+" = "+m[2])
	}
	// (A plan keeps its arguments canonical: members in sorted order.)
	want := []string{
		`amount_minor = <strong class="money">2,500.00 USD</strong> <small>250000</small>`,
		"currency = USD", "extra = {}",
		"note = customer &lt;b&gt;called&lt;/b&gt; twice",
		`payee.account = ACC-1<span class="invisible" title="zero-width space">U+200B</span>`,
		"record_id = WD-7", "tags[0] = a", "tags[1] = b",
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Fatalf("the arguments' fields:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(pg, `id="agent-note"`) || !strings.Contains(pg, "customer &lt;b&gt;called&lt;/b&gt; twice</q>") || !strings.Contains(pg, `id="whole-args">As JSON</a>`) {
		t.Fatalf("the plan's page lacks the agent's note or the JSON link:\n%s", pg)
	}
	_, queue, _ := p.get("/ui/")
	if !strings.Contains(queue, "amount_minor: 2,500.00 USD") || !strings.Contains(queue, "<td>customer &lt;b&gt;called&lt;/b&gt; twice</td>") {
		t.Fatalf("the queue lacks the formatted amount or the agent's note:\n%s", queue)
	}
}

// The page is bounded by what it writes, badges and all: a note of 4 KiB
// of zero-width spaces (some 1,400 badges) and many short strings of them
// keep a plan's page near 64 KB.
func TestBadgesDoNotSwellThePage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	manifestText := strings.Replace(pageManifest, "input_schema: {type: object, properties: {record_id: {type: string}}}",
		"input_schema: {type: object, properties: {record_id: {type: string}, note: {type: string}, items: {type: array, items: {type: string}}}}", 1) +
		"    display: {note: args.note}\n"
	m, plans, p := approverPage(t, manifestText)
	items := make([]string, 300)
	for i := range items {
		items[i] = strings.Repeat("\u200b", 333)
	}
	raw, _ := json.Marshal(map[string]any{"record_id": "WD-1", "note": strings.Repeat("\u200b", airlock.MaxNoteBytes/3), "items": items})
	pl, _, err := plans.Propose(airlock.WithActor(ctx, "agent-1"), m.Tool("pay"), airlock.MustArgs(string(raw)), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	_, pg, _ := p.get("/ui/plans/" + pl.ID)
	if len(pg) > 100<<10 {
		t.Fatalf("the plan's page is %d bytes; want it near 64 KB whatever the badges", len(pg))
	}
	if !strings.Contains(pg, "bytes in all") {
		t.Fatal("the page does not say the note was cut")
	}
}
