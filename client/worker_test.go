package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/client"
)

type payout struct {
	RecordID string  `json:"record_id"`
	Amount   float64 `json:"amount"`
}

// asApprover reads or decides a plan over the HTTP API, as a person does.
func asApprover(t *testing.T, method, url string, body string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+approverSecret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %v", method, url, resp.StatusCode, out)
	}
	return out
}

func TestPlanApproveThenTheWorkerCommitsOnce(t *testing.T) {
	t.Parallel()
	c, url := setupURL(t)
	ctx := context.Background()
	var paid atomic.Int32
	var key atomic.Value
	w := c.Worker(map[string]client.Handler{"pay_out": func(ctx context.Context, args json.RawMessage) (any, error) {
		paid.Add(1)
		key.Store(client.IdempotencyKey(ctx))
		var p payout
		err := json.Unmarshal(args, &p)
		return map[string]string{"payout": "PO-" + p.RecordID}, err
	}})
	a, err := c.Plan(ctx, "pay_out", payout{"P-1", 500}, "")
	if err != nil || a.Status != airlock.StatusPlanned || a.Plan == nil || a.Plan.Status != airlock.PlanAwaitingApproval {
		t.Fatalf("plan: %+v %v", a, err)
	}
	id := a.Plan.ID
	if a, err := w.RunOnce(ctx, 300*time.Millisecond); a != nil || err != nil {
		t.Fatalf("before approval: %+v %v; want nothing to run", a, err)
	}
	full := asApprover(t, "GET", url+"/v1/plans/"+id, "")
	asApprover(t, "POST", url+"/v1/plans/"+id+"/approve", fmt.Sprintf(`{"reason":"ok","decision_hash":%q}`, full["decision_hash"]))
	a, err = w.RunOnce(ctx, 5*time.Second)
	if err != nil || a == nil || a.Status != airlock.StatusSucceeded || string(a.Result) != `{"payout":"PO-P-1"}` {
		t.Fatalf("commit: %+v %v", a, err)
	}
	if paid.Load() != 1 || key.Load() == "" {
		t.Fatalf("paid %d times, key %q", paid.Load(), key.Load())
	}
	if p := asApprover(t, "GET", url+"/v1/plans/"+id, ""); p["status"] != "committed" {
		t.Fatalf("plan after the commit: %v", p["status"])
	}
	if again, err := c.Plan(ctx, "pay_out", payout{"P-1", 500}, ""); err != nil || !again.Repeat || again.Plan.ID != id {
		t.Fatalf("the same proposal again: %+v %v", again, err)
	}
	if _, err := c.Do(ctx, "pay_out", payout{"P-1", 500}, "", func(context.Context) (any, error) { paid.Add(1); return nil, nil }); airlock.ErrorCode(err) != airlock.CodeNotCallable {
		t.Fatalf("the tool through the claims API: %v; want not_callable", err)
	}
	if paid.Load() != 1 {
		t.Fatalf("paid %d times", paid.Load())
	}
}

// A worker that took a commit and vanished (no renewal, no completion):
// once its lease has run out the next worker gets the same work with the
// same key, and the plan is committed.
func TestAVanishedWorkersCommitIsTakenOverWithTheSameKey(t *testing.T) {
	t.Parallel()
	c, url := setupURL(t)
	ctx := context.Background()
	a, err := c.Plan(ctx, "pay_out", payout{"P-2", 5}, "") // automatic
	if err != nil {
		t.Fatal(err)
	}
	first, err := c.NextCommit(ctx, []string{"pay_out"}, 5*time.Second)
	if err != nil || first == nil || first.Plan.ID != a.Plan.ID || first.IdempotencyKey == "" {
		t.Fatalf("the first worker: %+v %v", first, err)
	}
	var keys []string
	w := c.Worker(map[string]client.Handler{"pay_out": func(ctx context.Context, _ json.RawMessage) (any, error) {
		keys = append(keys, client.IdempotencyKey(ctx))
		return "paid", nil
	}})
	got, err := w.RunOnce(ctx, 15*time.Second)
	if err != nil || got == nil || got.Status != airlock.StatusSucceeded || len(keys) != 1 || keys[0] != first.IdempotencyKey {
		t.Fatalf("the next worker: %+v %v, keys %v; want the same work with key %s", got, err, keys, first.IdempotencyKey)
	}
	// A late completion by the vanished worker changes nothing: its claim
	// was taken over, so its handle names no claim it holds, whatever it
	// says (docs/gateway.md: a completed claim answers its own handle only).
	for _, out := range []client.Outcome{{Kind: client.Failed, Error: "late"}, {Kind: client.Succeeded}} {
		if late, err := c.Complete(ctx, first.Claim, out); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
			t.Fatalf("the vanished worker's late %v: %+v %v; want lease_lost", out.Kind, late, err)
		}
	}
	if p := asApprover(t, "GET", url+"/v1/plans/"+a.Plan.ID, ""); p["status"] != "committed" {
		t.Fatalf("plan: %v", p["status"])
	}
}

func TestWorkerRunsUntilCancelled(t *testing.T) {
	t.Parallel()
	c := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	w := c.Worker(map[string]client.Handler{"pay_out": func(context.Context, json.RawMessage) (any, error) {
		close(done)
		return "paid", nil
	}})
	w.Wait = 300 * time.Millisecond
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	if _, err := c.Plan(context.Background(), "pay_out", payout{"P-3", 1}, ""); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("the running worker did not commit the plan")
	}
	cancel()
	if err := <-ended; err != nil {
		t.Fatalf("Run: %v", err)
	}
}
