package app_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/manifest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgx closes a dropped connection in the background.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgconn.(*PgConn).asyncClose.func1"))
}

// ledger is the system of record behind the test manifest: add_note
// writes a note; get_note says whether a note exists. It can be told to
// fail its reads a number of times first.
type ledger struct {
	mu        sync.Mutex
	notes     map[string]string
	writes    map[string]int
	failReads atomic.Int64
	reads     atomic.Int64
	vague     atomic.Bool // answer reads without saying whether a note exists
}

func (l *ledger) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct {
		RecordID string `json:"record_id"`
		Text     string `json:"text"`
	}
	_ = json.NewDecoder(r.Body).Decode(&in)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch r.URL.Path {
	case "/notes/get":
		l.reads.Add(1)
		if l.failReads.Load() > 0 {
			l.failReads.Add(-1)
			http.Error(w, `{"error":"ledger unavailable"}`, http.StatusServiceUnavailable)
			return
		}
		if l.vague.Load() {
			_ = json.NewEncoder(w).Encode(map[string]any{"record_id": in.RecordID, "status": "being checked"})
			return
		}
		text, found := l.notes[in.RecordID]
		_ = json.NewEncoder(w).Encode(map[string]any{"record_id": in.RecordID, "found": found, "text": text})
	case "/notes/add":
		l.notes[in.RecordID] = in.Text
		l.writes[in.RecordID]++
		_ = json.NewEncoder(w).Encode(map[string]any{"record_id": in.RecordID, "written": true})
	default:
		http.NotFound(w, r)
	}
}

const testManifest = `version: 1
upstreams:
  ledger: {http: "URL"}
tools:
  - name: get_note
    kind: read
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    upstream: {name: ledger, path: /notes/get}
  - name: add_note
    kind: write
    input_schema: {type: object, properties: {record_id: {type: string}, text: {type: string}}, required: [record_id, text]}
    natural_key: [{field: record_id}]
    window: forever
    reconcile_with: get_note
    reconcile: {happened_when: 'result.found == true', not_happened_when: 'result.found == false'}
    upstream: {name: ledger, path: /notes/add}
    answers: {undo: "yes", approver: "no one", on_repeat: "one note per record"}
`

type bundle struct {
	app    *app.App
	ledger *ledger
	gw     *gateway.Gateway
}

type driver struct {
	name string
	dsn  func(t *testing.T) string
}

func drivers() []driver {
	return []driver{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "airlock.db") }},
		{"postgres", func(t *testing.T) string { return testdb.Schema(t) }},
	}
}

func setup(t *testing.T, d driver) *bundle { return setupWith(t, d, "", nil) }

// setupWith starts the app with top-level YAML added to the test manifest
// and its config changed by edit.
func setupWith(t *testing.T, d driver, yaml string, edit func(*app.Config)) *bundle {
	t.Helper()
	l := &ledger{notes: map[string]string{}, writes: map[string]int{}}
	srv := httptest.NewServer(l)
	t.Cleanup(srv.Close)
	m, err := manifest.Parse([]byte(strings.Replace(testManifest, "URL", srv.URL, 1)+yaml), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := &app.Config{
		Manifest: m, DSN: d.dsn(t), Migrate: true,
		Lease: time.Second, ReapEvery: 50 * time.Millisecond, ReconcileBackoff: 50 * time.Millisecond,
	}
	if edit != nil {
		edit(cfg)
	}
	a, err := app.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &bundle{app: a, ledger: l, gw: a.Gateway}
}

// crashedCall leaves the store as a process killed in the middle of an
// add_note call leaves it: the record claimed, running, its lease never
// renewed. It returns the key.
func (b *bundle) crashedCall(t *testing.T, record string) string {
	t.Helper()
	args := airlock.MustArgs(`{"record_id":"` + record + `","text":"checked"}`)
	d, err := b.app.Guard.Derive(&airlock.Call{Tool: b.app.Manifest.Tool("add_note"), Args: args, RunID: "run-crash"})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute)
	if _, claimed, err := b.app.Store.Claim(context.Background(), &airlock.Claim{
		Key: d.Key, Tool: "add_note", RunID: "run-crash", WindowID: d.Parts.WindowID, Args: args.JSON(), ArgsHash: airlock.ArgsHash(args.JSON()),
		Owner: "a-process-that-died", Now: past, LeaseUntil: past.Add(time.Second),
	}); err != nil || !claimed {
		t.Fatalf("claim: %v %v", claimed, err)
	}
	return d.Key
}

// waitFor polls until cond holds or 15s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (b *bundle) settledBy(t *testing.T, key string) string {
	t.Helper()
	events, err := b.app.Store.AuditSince(context.Background(), &airlock.AuditSinceParams{Since: time.Now().Add(-time.Hour), Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.Key == key && e.Kind == airlock.EventSettled {
			return e.Actor
		}
	}
	return ""
}

func TestReaperReconcilesACrashedCall(t *testing.T) {
	t.Parallel()
	for _, d := range drivers() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			call := func(b *bundle, record string) (*airlock.Answer, error) {
				return b.gw.Call(ctx, &gateway.CallRequest{Tool: "add_note", Args: json.RawMessage(`{"record_id":"` + record + `","text":"checked"}`), RunID: "run-2"})
			}

			t.Run("the ledger says it happened: settled with its answer", func(t *testing.T) {
				t.Parallel()
				b := setup(t, d)
				b.ledger.mu.Lock()
				b.ledger.notes["WD-1"] = "checked" // the dead process's write landed
				b.ledger.mu.Unlock()
				key := b.crashedCall(t, "WD-1")
				waitFor(t, "the record to be settled", func() bool {
					rec, err := b.app.Store.Get(ctx, key)
					return err == nil && rec.State == airlock.StateSucceeded
				})
				rec, _ := b.app.Store.Get(ctx, key)
				if !strings.Contains(string(rec.Result), `"found":true`) || !strings.HasPrefix(rec.Note, "reconcile at ") {
					t.Fatalf("settled record: result %s note %q", rec.Result, rec.Note)
				}
				if actor := b.settledBy(t, key); actor != airlock.ActorReconcile {
					t.Fatalf("settled event's actor %q, want %q", actor, airlock.ActorReconcile)
				}
				a, err := call(b, "WD-1")
				if err != nil || !a.Repeat || a.Status != airlock.StatusSucceeded {
					t.Fatalf("a repeat after reconciliation: %+v %v", a, err)
				}
				if n := b.ledger.writes["WD-1"]; n != 0 {
					t.Fatalf("the work was done again %d times", n)
				}
			})

			t.Run("the ledger says it did not happen: the key is freed and the next call runs once", func(t *testing.T) {
				t.Parallel()
				b := setup(t, d)
				key := b.crashedCall(t, "WD-2")
				waitFor(t, "the record to be released", func() bool {
					_, err := b.app.Store.Get(ctx, key)
					return err != nil
				})
				if actor := b.settledBy(t, key); actor != airlock.ActorReconcile {
					t.Fatalf("settled event's actor %q", actor)
				}
				for range 2 {
					if a, err := call(b, "WD-2"); err != nil || a.Status != airlock.StatusSucceeded {
						t.Fatalf("%+v %v", a, err)
					}
				}
				b.ledger.mu.Lock()
				defer b.ledger.mu.Unlock()
				if n := b.ledger.writes["WD-2"]; n != 1 {
					t.Fatalf("written %d times, want 1", n)
				}
			})

			t.Run("a failing read tool is asked again until it answers", func(t *testing.T) {
				t.Parallel()
				b := setup(t, d)
				b.ledger.failReads.Store(3)
				key := b.crashedCall(t, "WD-3")
				waitFor(t, "the in-doubt record", func() bool {
					rec, err := b.app.Store.Get(ctx, key)
					return err == nil && rec.State == airlock.StateInDoubt
				})
				if a, err := call(b, "WD-3"); err != nil || a.Status != airlock.StatusInDoubt || !a.Repeat {
					t.Fatalf("a repeat while in doubt: %+v %v", a, err)
				}
				waitFor(t, "the record to be settled after the read tool recovers", func() bool {
					_, err := b.app.Store.Get(ctx, key)
					return err != nil
				})
				if reads := b.ledger.reads.Load(); reads < 4 {
					t.Fatalf("the read tool was asked %d times; want 3 failures and an answer", reads)
				}
			})

			t.Run("an answer that says nothing leaves the record to a person", func(t *testing.T) {
				t.Parallel()
				b := setup(t, d)
				// The read tool answers, but not in the shape the conditions read:
				// neither happened_when nor not_happened_when can hold.
				b.ledger.vague.Store(true)
				key := b.crashedCall(t, "WD-4")
				waitFor(t, "the in-doubt record", func() bool {
					rec, err := b.app.Store.Get(ctx, key)
					return err == nil && rec.State == airlock.StateInDoubt
				})
				time.Sleep(300 * time.Millisecond)
				if rec, err := b.app.Store.Get(ctx, key); err != nil || rec.State != airlock.StateInDoubt {
					t.Fatalf("settled without an answer: %+v %v", rec, err)
				}
				rec, err := b.app.Guard.Settle(ctx, airlock.SettleRequest{Key: key, Happened: false, Note: "checked the ledger by hand", By: "alice", Role: airlock.RoleAdmin})
				if err != nil || rec.State != airlock.StateReleased {
					t.Fatalf("a person settles: %+v %v", rec, err)
				}
				if actor := b.settledBy(t, key); actor != "alice" {
					t.Fatalf("settled event's actor %q", actor)
				}
			})
		})
	}
}

func TestRetentionPurgesOldEventsAndFigures(t *testing.T) {
	t.Parallel()
	for _, d := range drivers() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			b := setupWith(t, d, "retention: {audit: 1d, figures: 2d}\n", func(c *app.Config) {
				c.RetentionEvery = 50 * time.Millisecond
				c.SealEvery = 50 * time.Millisecond
			})
			ctx := context.Background()
			now := time.Now()
			var events []*airlock.AuditEvent
			for _, age := range []time.Duration{72 * time.Hour, 36 * time.Hour, time.Hour} {
				events = append(events, &airlock.AuditEvent{At: now.Add(-age), Kind: airlock.EventCompleted, Tool: "add_note",
					Key: age.String(), Actor: "agent-1", Outcome: airlock.OutcomeTextSucceeded})
			}
			if err := b.app.Store.AppendAudit(ctx, events); err != nil {
				t.Fatal(err)
			}
			// The two events older than a day go; the rollup keeps the one
			// 36 hours old (figures are kept two days).
			waitFor(t, "the purge of events older than a day", func() bool {
				a, err := b.app.Store.AuditAnchor(ctx)
				return err == nil && a.Purged == 2
			})
			waitFor(t, "the purge of figures older than two days", func() bool {
				f, err := b.app.Store.Figures(ctx, &airlock.FiguresParams{Since: now.Add(-100 * time.Hour), Until: now.Add(time.Minute)})
				return err == nil && f.ByTool["add_note"][airlock.FigureSucceeded] == 2
			})
			r, err := audit.Verify(ctx, b.app.Store)
			if err != nil || !r.OK || r.Events != 1 || r.Anchor == nil || r.Anchor.Seq != 2 {
				t.Fatalf("verify after retention: %+v %v", r, err)
			}
		})
	}
}

// One clock runs the whole app: a call's record and its audit events carry
// the configured clock's time, and the retention purge counts back from
// it and runs when it moves (the sealer too), not by the wall clock.
func TestOneClockForTheWholeApp(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 3, 4, 10, 0, 0, 0, time.UTC)
	clock := clockwork.NewFakeClockAt(at)
	sqlite := drivers()[0]
	b := setupWith(t, sqlite, "retention: {audit: 1d}\n", func(c *app.Config) {
		c.Clock = clock
		c.ReapEvery = time.Hour
	})
	ctx := context.Background()
	// An event two days old by the app's clock, first in the log (the
	// purge takes the log's oldest events).
	old := &airlock.AuditEvent{At: at.Add(-48 * time.Hour), Kind: airlock.EventCompleted, Tool: "add_note", Key: "old", Actor: "agent-1", Outcome: airlock.OutcomeTextSucceeded}
	if err := b.app.Store.AppendAudit(ctx, []*airlock.AuditEvent{old}); err != nil {
		t.Fatal(err)
	}
	a, err := b.gw.Call(ctx, &gateway.CallRequest{Tool: "add_note", Args: json.RawMessage(`{"record_id":"N-1","text":"t"}`), RunID: "run-1"})
	if err != nil || a.Status != airlock.StatusSucceeded {
		t.Fatalf("call: %+v %v", a, err)
	}
	rec, err := b.app.Store.Get(ctx, a.Key)
	if err != nil || !rec.CreatedAt.Equal(at) || !rec.UpdatedAt.Equal(at) {
		t.Fatalf("the record's times: %+v %v, want %v", rec, err, at)
	}
	// The 48-hour-old event goes once the sealer and the purge have run on
	// the app's clock; the call's events, at the clock's now, stay.
	waitFor(t, "the purge of the event two days older than the app's clock", func() bool {
		clock.Advance(time.Minute)
		anchor, err := b.app.Store.AuditAnchor(ctx)
		return err == nil && anchor.Purged == 1
	})
	events, err := b.app.Store.AuditSince(ctx, &airlock.AuditSinceParams{Since: at.Add(-time.Hour), Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	for _, e := range events {
		if e.Key == a.Key {
			calls++
			if !e.At.Equal(at) {
				t.Errorf("the call's %s event at %v, want %v", e.Kind, e.At, at)
			}
		}
	}
	if calls == 0 {
		t.Fatalf("no audit event of the call kept: %+v", events)
	}
}
