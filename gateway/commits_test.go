package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/upstream"
)

const commitsManifest = `version: 1
tools:
  - name: pay_out
    kind: irreversible
    input_schema: {type: object, properties: {record_id: {type: string}}, required: [record_id]}
    natural_key: [{field: record_id}]
    window: forever
    upstream: {caller: true}
    answers: {undo: "No.", approver: "A person.", on_repeat: "The first payout."}
    approval: {rules: [{name: people, when: "true", decide: human}]}
`

// A worker's long poll for commits waits by the gateway's clock: with no
// commit to give, POST /v1/commits/next does not answer until the clock
// has passed wait_seconds, and then answers idle.
func TestCommitsLongPollWaitsByTheGatewayClock(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClock()
	g := frontGatewayWith(t, commitsManifest, nil, func(c *gateway.Config) {
		c.Clock = clock
		plans, err := plan.New(plan.Config{Manifest: c.Manifest, Store: c.Store.(airlock.PlanStore), Guard: c.Guard,
			Callers: func(*airlock.Tool) (upstream.Caller, bool) { return nil, false }, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		c.Plans = plans
	})
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	answered := make(chan map[string]any, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/commits/next", strings.NewReader(`{"tools":["pay_out"],"wait_seconds":10}`))
		req.Header.Set("Authorization", "Bearer "+frontToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			answered <- map[string]any{"error": err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		_ = json.Unmarshal(b, &out)
		answered <- out
	}()
	// The poll waits on the clock; short of the wait it goes on waiting.
	for _, step := range []time.Duration{250 * time.Millisecond, 9 * time.Second} {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case out := <-answered:
			t.Fatalf("answered before the wait had passed: %v", out)
		default:
		}
		clock.Advance(step)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(750 * time.Millisecond) // 10 s in all
	if out := <-answered; out["status"] != "idle" {
		t.Fatalf("after the wait: %v", out)
	}
}
