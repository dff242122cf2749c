package plan_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/plan/riverqueue"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/upstream"
)

// ledger is the system of record: amounts by record id; approvals counted.
type ledger struct {
	mu        sync.Mutex
	amounts   map[string]int64
	approvals map[string]int
	lookupErr bool
}

func (l *ledger) caller(t *airlock.Tool) (upstream.Caller, bool) {
	return upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		var in struct {
			RecordID string `json:"record_id"`
		}
		_ = json.Unmarshal(req.Args, &in)
		l.mu.Lock()
		defer l.mu.Unlock()
		switch req.Tool.Name {
		case "get_withdrawal":
			if l.lookupErr {
				return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("ledger down")}
			}
			amount, ok := l.amounts[in.RecordID]
			if !ok {
				amount = 1000
			}
			out, _ := json.Marshal(map[string]any{"record_id": in.RecordID, "amount_minor": amount, "currency": "USD", "kyc_complete": true})
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: out}
		case "approve_withdrawal":
			l.approvals[in.RecordID]++
			out, _ := json.Marshal(map[string]any{"record_id": in.RecordID, "approved": true, "n": l.approvals[in.RecordID]})
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: out}
		}
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: json.RawMessage(`{"error":"no such tool"}`)}
	}), true
}

func (l *ledger) count(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.approvals[id]
}

type bundle struct {
	clock  *testClock
	obs    *recorder
	svc    *plan.Service
	ledger *ledger
	m      *manifest.Manifest
	tool   *airlock.Tool
	store  airlock.Store
}

type driver struct {
	name string
	// open opens a migrated store whose approvals enqueue commits, and the
	// function that starts working them.
	open func(t *testing.T) (airlock.Store, func(riverqueue.Committer) *riverqueue.Worker)
}

var workerConfig = &riverqueue.Config{FetchPollInterval: 50 * time.Millisecond}

func drivers() []driver {
	lite, err := riverqueue.SQLiteInserter()
	if err != nil {
		panic(err)
	}
	pg, err := riverqueue.PostgresInserter()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	return []driver{
		{"sqlite", func(t *testing.T) (airlock.Store, func(riverqueue.Committer) *riverqueue.Worker) {
			s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"), &sqlite.Config{EnqueueCommit: lite.Commit})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			db, err := s.OpenDB(1)
			if err != nil {
				t.Fatal(err)
			}
			if err := riverqueue.SQLite(db).Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s, func(c riverqueue.Committer) *riverqueue.Worker {
				w, err := riverqueue.SQLite(db).Start(ctx, c, workerConfig)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
		}},
		{"postgres", func(t *testing.T) (airlock.Store, func(riverqueue.Committer) *riverqueue.Worker) {
			s, err := postgres.Open(ctx, testdb.Schema(t), &postgres.Config{EnqueueCommit: pg.Commit})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := riverqueue.Postgres(s.Pool()).Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			return s, func(c riverqueue.Committer) *riverqueue.Worker {
				w, err := riverqueue.Postgres(s.Pool()).Start(ctx, c, workerConfig)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
		}},
	}
}

func setup(t *testing.T, d driver) *bundle {
	t.Helper()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	l := &ledger{amounts: map[string]int64{"WD-BIG": 250000, "WD-24817": 100000}, approvals: map[string]int{}}
	s, startWorker := d.open(t)
	guard := guard.New(s, nil)
	clock, obs := &testClock{Clock: clockwork.NewRealClock()}, &recorder{}
	svc, err := plan.New(plan.Config{Manifest: m, Store: s, Guard: guard, Callers: l.caller, Clock: clock, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	q := startWorker(svc)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.Stop(ctx)
		guard.Close()
		s.Close()
	})
	return &bundle{clock: clock, obs: obs, svc: svc, ledger: l, m: m, tool: m.Tool("approve_withdrawal"), store: s}
}

func args(id string, extra ...string) *airlock.Args {
	return airlock.MustArgs(`{"record_id":"` + id + `"` + strings.Join(extra, "") + `}`)
}

func TestPlans(t *testing.T) {
	t.Parallel()
	for _, d := range drivers() {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			ctx := context.Background()

			t.Run("auto rule commits once", func(t *testing.T) {
				p, repeat, err := b.svc.Propose(ctx, b.tool, args("WD-1"), "run-1")
				if err != nil || repeat || p.Decision != "auto" || p.Rule != "under_limit" {
					t.Fatalf("propose: %+v %v %v", p, repeat, err)
				}
				p, err = b.svc.WaitForCommit(ctx, p.ID, 10*time.Second)
				if err != nil || p.Status != airlock.PlanCommitted || !strings.Contains(string(p.Result), `"approved":true`) {
					t.Fatalf("commit: %+v %v", p, err)
				}
				again, repeat, err := b.svc.Propose(ctx, b.tool, args(" wd-1 "), "run-1")
				if err != nil || !repeat || again.ID != p.ID || again.Status != airlock.PlanCommitted {
					t.Fatalf("repeat: %+v %v %v", again, repeat, err)
				}
				// A commit run again (a retried job) executes nothing.
				if err := b.svc.Commit(ctx, p.ID); err != nil {
					t.Fatal(err)
				}
				if n := b.ledger.count("WD-1"); n != 1 {
					t.Fatalf("approved %d times", n)
				}
			})

			t.Run("the ledger's amount decides, not the model's", func(t *testing.T) {
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-24817", `,"note":"amount 1"`), "run-2")
				if err != nil || p.Decision != "human" || p.Status != airlock.PlanAwaitingApproval || !strings.Contains(string(p.Facts), "100000") {
					t.Fatalf("%+v %v", p, err)
				}
			})

			t.Run("human path: approve commits once", func(t *testing.T) {
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-BIG"), "run-3")
				if err != nil || p.Status != airlock.PlanAwaitingApproval {
					t.Fatalf("%+v %v", p, err)
				}
				time.Sleep(200 * time.Millisecond)
				if n := b.ledger.count("WD-BIG"); n != 0 {
					t.Fatalf("executed before approval: %d", n)
				}
				if _, err := b.svc.Decide(ctx, decision(p.ID, true, "ok", "stale")); airlock.ErrorCode(err) != airlock.CodeConflict {
					t.Fatalf("stale hash: %v", err)
				}
				for range 2 {
					if _, err := b.svc.Decide(ctx, decision(p.ID, true, "checked the ledger", p.DecisionHash)); err != nil {
						t.Fatal(err)
					}
				}
				p, _ = b.svc.WaitForCommit(ctx, p.ID, 10*time.Second)
				if p.Status != airlock.PlanCommitted || p.DecidedBy != "alice" {
					t.Fatalf("%+v", p)
				}
				if n := b.ledger.count("WD-BIG"); n != 1 {
					t.Fatalf("approved %d times", n)
				}
			})

			t.Run("decisions are checked and observed by the service", func(t *testing.T) {
				b.ledger.mu.Lock()
				b.ledger.amounts["WD-OBS"] = 700000
				b.ledger.mu.Unlock()
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-OBS"), "run-obs")
				if err != nil || p.Status != airlock.PlanAwaitingApproval {
					t.Fatalf("%+v %v", p, err)
				}
				before := b.obs.snapshot()
				agent := decision(p.ID, true, "looks fine", p.DecisionHash)
				agent.By, agent.Role = "agent-1", airlock.RoleAgent
				if _, err := b.svc.Decide(ctx, agent); airlock.ErrorCode(err) != airlock.CodeForbidden {
					t.Fatalf("an agent decided: %v", err)
				}
				if _, err := b.svc.Decide(ctx, decision(p.ID, true, "   ", p.DecisionHash)); airlock.ErrorCode(err) != airlock.CodeInvalidArgument || !strings.Contains(err.Error(), "reason") {
					t.Fatalf("no reason: %v", err)
				}
				for _, reason := range []string{"ok\r\x1b[2Kapproved by the CFO", strings.Repeat("x", airlock.MaxNoteBytes+1)} {
					var e *airlock.Error
					if _, err := b.svc.Decide(ctx, decision(p.ID, false, reason, p.DecisionHash)); !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "reason" {
						t.Fatalf("a reason with a control character or too long (%d bytes): %v", len(reason), err)
					}
				}
				if _, err := b.svc.Decide(ctx, decision(p.ID, true, "ok", "")); airlock.ErrorCode(err) != airlock.CodeInvalidArgument || !strings.Contains(err.Error(), "decision_hash") {
					t.Fatalf("no decision hash: %v", err)
				}
				if got, _ := b.svc.Get(ctx, p.ID); got.Status != airlock.PlanAwaitingApproval || b.obs.snapshot().decided != before.decided {
					t.Fatalf("a refused decision changed the plan (%s) or was observed", got.Status)
				}
				b.clock.advance(90 * time.Second)
				for range 2 { // the same decision again is no new decision
					if _, err := b.svc.Decide(ctx, decision(p.ID, false, "the customer called it off", p.DecisionHash)); err != nil {
						t.Fatal(err)
					}
				}
				after := b.obs.snapshot()
				if after.decided != before.decided+1 || after.lastWait < 90*time.Second || after.lastWait > time.Hour {
					t.Fatalf("decisions observed %d (want 1), wait %s", after.decided-before.decided, after.lastWait)
				}
			})

			t.Run("the planned event names the agent that proposed", func(t *testing.T) {
				p, _, err := b.svc.Propose(airlock.WithActor(ctx, "agent-7"), b.tool, args("WD-WHO"), "run-who")
				if err != nil {
					t.Fatal(err)
				}
				events, err := b.store.AuditTrail(ctx, airlock.AuditFilter{PlanID: p.ID, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range events {
					if e.Kind == airlock.EventPlanned && e.Actor != "agent-7" {
						t.Fatalf("planned event actor %q, want agent-7", e.Actor)
					}
				}
				if len(events) == 0 || events[0].Kind != airlock.EventPlanned {
					t.Fatalf("trail %+v", events)
				}
			})

			t.Run("facts that changed since the proposal refuse the approval", func(t *testing.T) {
				b.ledger.mu.Lock()
				b.ledger.amounts["WD-CHG"] = 700000
				b.ledger.mu.Unlock()
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-CHG"), "run-chg")
				if err != nil || p.Status != airlock.PlanAwaitingApproval {
					t.Fatalf("%+v %v", p, err)
				}
				b.ledger.mu.Lock()
				b.ledger.amounts["WD-CHG"] = 900000 // raised in the ledger after the plan was made
				b.ledger.mu.Unlock()
				_, err = b.svc.Decide(ctx, decision(p.ID, true, "checked", p.DecisionHash))
				if airlock.ErrorCode(err) != airlock.CodeConflict || !strings.Contains(err.Error(), "amount_minor: 700000 → 900000") {
					t.Fatalf("approving on stale facts: %v; want state_conflict naming the change", err)
				}
				b.ledger.mu.Lock()
				b.ledger.lookupErr = true
				b.ledger.mu.Unlock()
				_, err = b.svc.Decide(ctx, decision(p.ID, true, "checked", p.DecisionHash))
				b.ledger.mu.Lock()
				b.ledger.lookupErr = false
				b.ledger.mu.Unlock()
				if airlock.ErrorCode(err) != airlock.CodeUpstream {
					t.Fatalf("approving while the facts cannot be looked up: %v; want upstream_error", err)
				}
				if got, _ := b.svc.Get(ctx, p.ID); got.Status != airlock.PlanAwaitingApproval || b.ledger.count("WD-CHG") != 0 {
					t.Fatalf("a refused approval changed the plan (%s) or executed", got.Status)
				}
				if _, err := b.svc.Decide(ctx, decision(p.ID, false, "the amount changed", p.DecisionHash)); err != nil {
					t.Fatalf("rejecting needs no fresh facts: %v", err)
				}
			})

			t.Run("an undecided plan expires, is refused and observed", func(t *testing.T) {
				b.ledger.mu.Lock()
				b.ledger.amounts["WD-EXP"] = 800000
				b.ledger.mu.Unlock()
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-EXP"), "run-exp")
				if err != nil || p.Status != airlock.PlanAwaitingApproval {
					t.Fatalf("%+v %v", p, err)
				}
				waiting, err := b.svc.Waiting(ctx)
				if err != nil || len(waiting) != 1 || waiting[0].Tool != "approve_withdrawal" || waiting[0].Depth < 1 || waiting[0].Oldest.After(p.CreatedAt) {
					t.Fatalf("waiting: %+v %v", waiting, err)
				}
				before := b.obs.snapshot()
				b.clock.advance(25 * time.Hour) // past expires_after (24h)
				if _, err := b.svc.Decide(ctx, decision(p.ID, true, "late", p.DecisionHash)); airlock.ErrorCode(err) != airlock.CodeConflict || !strings.Contains(err.Error(), "expired") {
					t.Fatalf("decided after expiry: %v", err)
				}
				n, err := b.svc.Expire(ctx)
				if err != nil || n < 1 {
					t.Fatalf("expired %d %v", n, err)
				}
				got, _ := b.svc.Get(ctx, p.ID)
				if after := b.obs.snapshot(); got.Status != airlock.PlanExpired || after.expired != before.expired+n || after.decided != before.decided {
					t.Fatalf("plan %s; observed %d expiries for %d expired", got.Status, after.expired-before.expired, n)
				}
			})

			t.Run("reject never executes", func(t *testing.T) {
				b.ledger.mu.Lock()
				b.ledger.amounts["WD-REJ"] = 999999
				b.ledger.mu.Unlock()
				p, _, _ := b.svc.Propose(ctx, b.tool, args("WD-REJ"), "run-4")
				if _, err := b.svc.Decide(ctx, decision(p.ID, false, "fraud", p.DecisionHash)); err != nil {
					t.Fatal(err)
				}
				time.Sleep(300 * time.Millisecond)
				got, _ := b.svc.Get(ctx, p.ID)
				if got.Status != airlock.PlanRejected || b.ledger.count("WD-REJ") != 0 {
					t.Fatalf("%+v executed %d", got, b.ledger.count("WD-REJ"))
				}
			})

			t.Run("a failed lookup leaves the plan to a person", func(t *testing.T) {
				b.ledger.mu.Lock()
				b.ledger.lookupErr = true
				b.ledger.mu.Unlock()
				defer func() { b.ledger.mu.Lock(); b.ledger.lookupErr = false; b.ledger.mu.Unlock() }()
				p, _, err := b.svc.Propose(ctx, b.tool, args("WD-5"), "run-5")
				if err != nil || p.Decision != "human" || p.FactsError == "" {
					t.Fatalf("%+v %v", p, err)
				}
			})

			t.Run("concurrent proposals make one plan", func(t *testing.T) {
				var wg sync.WaitGroup
				var ids sync.Map
				var created atomic.Int64
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						p, repeat, err := b.svc.Propose(ctx, b.tool, args("WD-BIG2"), "run-6")
						if err != nil {
							t.Error(err)
							return
						}
						if !repeat {
							created.Add(1)
						}
						ids.Store(p.ID, true)
					}()
				}
				wg.Wait()
				n := 0
				ids.Range(func(any, any) bool { n++; return true })
				if n != 1 || created.Load() != 1 {
					t.Fatalf("%d plans, %d created", n, created.Load())
				}
			})
		})
	}
}

// A notice is signed over its body with the configured secret and carries
// an event id that is the same on every delivery; a webhook's refusal is an
// error that says how long it asked to wait; a plan decided meanwhile is
// not announced.
func TestAnnounceSignsAndNamesTheEvent(t *testing.T) {
	t.Parallel()
	type delivery struct {
		header http.Header
		body   []byte
	}
	var refuse atomic.Bool
	got := make(chan delivery, 8)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if refuse.Load() {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		b, _ := io.ReadAll(r.Body)
		got <- delivery{r.Header.Clone(), b}
	}))
	defer hook.Close()
	m, _ := withdrawals.Manifest()
	m.Notify.Webhook = hook.URL
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_ = s.Migrate(context.Background())
	g := guard.New(s, nil)
	defer g.Close()
	l := &ledger{amounts: map[string]int64{"WD-BIG": 250000}, approvals: map[string]int{}}
	secret := []byte("hook-secret")
	svc, err := plan.New(plan.Config{Manifest: m, Store: s, Guard: g, Callers: l.caller, NotifySecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, _, err := svc.Propose(ctx, m.Tool("approve_withdrawal"), airlock.MustArgs(`{"record_id":"WD-BIG","note":"customer called <twice>"}`), "run-1")
	if err != nil || p.Status != airlock.PlanAwaitingApproval {
		t.Fatalf("propose: %+v %v", p, err)
	}
	for range 2 { // two deliveries of one notice: the same event id
		if err := svc.Announce(ctx, p.ID); err != nil {
			t.Fatal(err)
		}
		d := <-got
		var body map[string]any
		_ = json.Unmarshal(d.body, &body)
		text, _ := body["text"].(string)
		// The money as people read it (the tool's display.money), the
		// agent's note (display.note), escaped.
		if !strings.Contains(text, p.ID) || !strings.Contains(text, "waits for a person") || !strings.Contains(text, "250000") ||
			!strings.Contains(text, "Amounts: facts.amount_minor 2,500.00 USD. ") || !strings.Contains(text, "The agent's note: customer called &lt;twice&gt;.") {
			t.Fatalf("webhook text: %q", text)
		}
		if id := d.header.Get(plan.HeaderEventID); id != plan.NoticeEventID(p.ID) || body["event_id"] != id || d.header.Get(plan.HeaderEvent) != "plan_waiting" {
			t.Fatalf("event id %q, body %v", id, body["event_id"])
		}
		mac := hmac.New(sha256.New, secret)
		mac.Write(d.body)
		if want := "sha256=" + hex.EncodeToString(mac.Sum(nil)); d.header.Get(plan.HeaderSignature) != want {
			t.Fatalf("signature %q, want %q", d.header.Get(plan.HeaderSignature), want)
		}
	}
	// Agent-made text is bounded, cannot make a link or a mention in a
	// Slack-compatible channel, and shows its invisible characters.
	long := "<!channel> <https://evil.example|the ledger> WD-1\u200b \u202eDETTELPMOC " + strings.Repeat("x", 2000)
	l.mu.Lock()
	l.amounts[long] = 250000 // for a person: announced
	l.mu.Unlock()
	q, _, err := svc.Propose(ctx, m.Tool("approve_withdrawal"), airlock.MustArgs(`{"record_id":`+strconv.Quote(long)+`}`), "run-1")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Announce(ctx, q.ID); err != nil || q.Status != airlock.PlanAwaitingApproval {
		t.Fatalf("announce %+v: %v", q.Status, err)
	}
	var d delivery
	select {
	case d = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("no notice of the plan with agent-made text")
	}
	var body map[string]any
	_ = json.Unmarshal(d.body, &body)
	text, _ := body["text"].(string)
	if strings.ContainsAny(text, "<>") || !strings.Contains(text, "&lt;!channel&gt;") || len(text) > 2000 || !strings.Contains(text, "bytes in all") ||
		airlock.HasInvisible(strings.ReplaceAll(text, " ", "")) || !strings.Contains(text, "WD-1[U+200B] [U+202E]DETTELPMOC") ||
		airlock.HasInvisible(strings.ReplaceAll(string(d.body), " ", "")) {
		t.Fatalf("a notice of agent-made text (%d bytes): %q", len(text), text)
	}
	refuse.Store(true)
	var we *plan.WebhookError
	if err := svc.Announce(ctx, p.ID); !errors.As(err, &we) || we.Status != 503 || we.RetryAfter != 7*time.Second {
		t.Fatalf("a refusing webhook: %v", err)
	}
	refuse.Store(false)
	if _, err := svc.Decide(ctx, decision(p.ID, false, "no", p.DecisionHash)); err != nil {
		t.Fatal(err)
	}
	if err := svc.Announce(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-got:
		t.Fatalf("a decided plan was announced: %s", d.body)
	case <-time.After(100 * time.Millisecond):
	}
}

// decision is alice's (an approver's) decision on a plan.
func decision(id string, approve bool, reason, hash string) airlock.PlanDecision {
	return airlock.PlanDecision{ID: id, Approve: approve, By: "alice", Role: airlock.RoleApprover, Reason: reason, DecisionHash: hash}
}

// testClock is the system clock moved forward by advance.
type testClock struct {
	clockwork.Clock // the system's, for timers and tickers
	offset          atomic.Int64
}

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// recorder is a plan.Observer that counts.
type recorder struct {
	mu                        sync.Mutex
	planned, decided, expired int
	lastWait                  time.Duration
}

type counts struct {
	planned, decided, expired int
	lastWait                  time.Duration
}

func (r *recorder) Planned(tool, decision string) { r.mu.Lock(); r.planned++; r.mu.Unlock() }
func (r *recorder) Decided(tool string, approved bool, waited time.Duration) {
	r.mu.Lock()
	r.decided++
	r.lastWait = waited
	r.mu.Unlock()
}
func (r *recorder) Expired(tool string, waited time.Duration) {
	r.mu.Lock()
	r.expired++
	r.mu.Unlock()
}

func (r *recorder) snapshot() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	return counts{r.planned, r.decided, r.expired, r.lastWait}
}
