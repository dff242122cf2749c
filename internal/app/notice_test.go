package app_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/upstream"
)

// On the embedded database too, the notice of a waiting plan goes through
// the commit queue: a webhook that answers 503 with Retry-After is tried
// again after it, and the notice arrives once, signed, with its event id;
// a plan approved by a rule announces nothing.
func TestNoticeThroughTheQueueOnSQLite(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		attempts []time.Time
		got      []http.Header
		bodies   [][]byte
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if len(attempts) == 1 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		got, bodies = append(got, r.Header.Clone()), append(bodies, b)
	}))
	defer hook.Close()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	env := "AIRLOCK_TEST_NOTICE_SECRET_SQLITE"
	os.Setenv(env, "s3cret")
	m.Notify.Webhook, m.Notify.SecretEnv = hook.URL, env
	ledger := upstream.Func(func(ctx context.Context, req *upstream.Request) airlock.Outcome {
		amount := `990000` // over the automatic limit: a person decides
		if strings.Contains(string(req.Args), "WD-SMALL") {
			amount = `100`
		}
		if req.Tool.Name == "get_withdrawal" {
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"amount_minor":` + amount + `,"currency":"USD","kyc_complete":true}`)}
		}
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"approved":true}`)}
	})
	hash := gateway.HashToken(agentToken)
	srv := serveApp(t, &app.Config{Manifest: m, CommitPoll: 50 * time.Millisecond,
		Funcs:  map[string]upstream.Caller{"get_withdrawal": ledger, "approve_withdrawal": ledger},
		Tokens: []gateway.Token{{Name: "agent-1", Role: airlock.RoleAgent, SHA256: hash}}})
	propose := func(record string) string {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/calls", strings.NewReader(`{"tool":"plan_approve_withdrawal","args":{"record_id":"`+record+`"}}`))
		req.Header.Set("Authorization", "Bearer "+agentToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Plan struct{ ID, Status string } `json:"plan"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return out.Plan.ID
	}
	propose("WD-SMALL") // decided by a rule: no notice
	id := propose("WD-BIG")
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no notice arrived")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // nothing more comes
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || len(attempts) != 2 {
		t.Fatalf("%d notices in %d attempts; want 1 in 2", len(got), len(attempts))
	}
	if wait := attempts[1].Sub(attempts[0]); wait < 2*time.Second {
		t.Errorf("retried after %s; the webhook asked for 2s", wait)
	}
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write(bodies[0])
	if got[0].Get("X-Airlock-Event-Id") != "plan_waiting/"+id || got[0].Get("X-Airlock-Signature") != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
		t.Fatalf("event id %q, signature %q", got[0].Get("X-Airlock-Event-Id"), got[0].Get("X-Airlock-Signature"))
	}
}
