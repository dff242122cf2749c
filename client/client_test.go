package client_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testManifest is the clients' test manifest, shared with the Python and
// TypeScript suites.
const testManifest = "../clients/testdata/airlock.yaml"

const (
	agentSecret    = "go-agent-secret"
	approverSecret = "go-approver-secret"
)

// setup serves airlock (the whole app, on SQLite) on a loopback HTTP
// server, with a one-second lease, and returns a client of it.
func setup(t *testing.T) *client.Client { c, _ := setupURL(t); return c }

// setupURL is setup that also returns the server's URL.
func setupURL(t *testing.T) (*client.Client, string) {
	t.Helper()
	src, err := os.ReadFile(testManifest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse(src, testManifest)
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), &app.Config{
		Manifest: m, DSN: "sqlite:" + filepath.Join(t.TempDir(), "a.db"), Migrate: true,
		Lease: time.Second, ReapEvery: 50 * time.Millisecond,
		Tokens: []gateway.Token{
			{Name: "agent-1", Role: airlock.RoleAgent, SHA256: sha256.Sum256([]byte(agentSecret))},
			{Name: "alice", Role: airlock.RoleApprover, SHA256: sha256.Sum256([]byte(approverSecret))},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Gateway.Handler())
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return client.New(&client.Config{URL: srv.URL, Token: agentSecret}), srv.URL
}

type note struct {
	RecordID string `json:"record_id"`
	Text     string `json:"text"`
}

func TestDoRunsOnceAndAnswersRepeats(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var runs atomic.Int32
	save := func(ctx context.Context) (any, error) {
		runs.Add(1)
		return map[string]string{"note": "N-1"}, nil
	}
	a, err := c.Do(context.Background(), "save_note", note{"WD-1", "checked"}, "run-1", save)
	if err != nil || a.Status != airlock.StatusSucceeded || a.Repeat || string(a.Result) != `{"note":"N-1"}` {
		t.Fatalf("first: %+v %v", a, err)
	}
	a, err = c.Do(context.Background(), "save_note", note{" wd-1", "checked "}, "run-1", save)
	if err != nil || a.Status != airlock.StatusSucceeded || !a.Repeat || string(a.Result) != `{"note":"N-1"}` {
		t.Fatalf("the same work spelled another way: %+v %v", a, err)
	}
	if runs.Load() != 1 {
		t.Fatalf("ran %d times", runs.Load())
	}
}

func TestDoKeepsTheOutcomeOfAResultTooLarge(t *testing.T) {
	t.Parallel()
	c := setup(t)
	a, err := c.Do(context.Background(), "save_note", note{"WD-big", "x"}, "", func(context.Context) (any, error) {
		return strings.Repeat("x", 2<<20), nil
	})
	if err != nil || a.Status != airlock.StatusSucceeded || !strings.Contains(string(a.Result), `"result_omitted":true`) {
		t.Fatalf("a result too large: %+v %v; want succeeded with the result omitted", a, err)
	}
}

func TestDoManyGoroutinesOneExecution(t *testing.T) {
	t.Parallel()
	c := setup(t)
	var runs atomic.Int32
	var wg sync.WaitGroup
	answers := make([]*airlock.Answer, 16)
	for i := range answers {
		wg.Go(func() {
			a, err := c.Do(context.Background(), "save_note", note{"WD-2", "x"}, "", func(ctx context.Context) (any, error) {
				runs.Add(1)
				time.Sleep(100 * time.Millisecond) // the others arrive while it runs
				return "done", nil
			})
			if err != nil {
				t.Error(err)
			}
			answers[i] = a
		})
	}
	wg.Wait()
	firsts := 0
	for _, a := range answers {
		if a == nil || a.Status != airlock.StatusSucceeded || string(a.Result) != `"done"` {
			t.Fatalf("an answer: %+v", a)
		}
		if !a.Repeat {
			firsts++
		}
	}
	if runs.Load() != 1 || firsts != 1 {
		t.Fatalf("ran %d times, %d first answers; want 1 and 1", runs.Load(), firsts)
	}
}

func TestDoClassifiesErrors(t *testing.T) {
	t.Parallel()
	c := setup(t)
	for _, tc := range []struct {
		name   string
		err    error
		status airlock.Status
	}{
		{"declared failure", fmt.Errorf("the record is closed: %w", client.ErrFailed), airlock.StatusFailed},
		{"anything else", errors.New("connection reset by peer"), airlock.StatusInDoubt},
	} {
		var runs atomic.Int32
		fn := func(context.Context) (any, error) { runs.Add(1); return nil, tc.err }
		for i := range 2 {
			a, err := c.Do(context.Background(), "save_note", note{"WD-" + tc.name, "x"}, "", fn)
			if err != nil || a.Status != tc.status || a.Repeat != (i == 1) {
				t.Fatalf("%s, call %d: %+v %v; want %s", tc.name, i+1, a, err, tc.status)
			}
		}
		if runs.Load() != 1 {
			t.Fatalf("%s: ran %d times", tc.name, runs.Load())
		}
	}
}

func TestRefusalsRunNothing(t *testing.T) {
	t.Parallel()
	c, url := setupURL(t)
	ran := false
	fn := func(context.Context) (any, error) { ran = true; return nil, nil }
	dead := client.New(&client.Config{URL: "http://127.0.0.1:1", Token: agentSecret})
	for _, tc := range []struct {
		name  string
		c     *client.Client
		tool  string
		args  any
		code  airlock.Code
		field string
	}{
		{"a missing field", c, "save_note", map[string]string{"record_id": "A"}, airlock.CodeMissingField, "text"},
		{"no such tool", c, "nope", map[string]string{}, airlock.CodeNotCallable, "tool"},
		{"airlock unreachable", dead, "save_note", note{"A", "x"}, airlock.CodeStoreUnavailable, ""},
		{"a wrong token", client.New(&client.Config{URL: url, Token: "not-a-token"}), "save_note", note{"A", "x"}, airlock.CodeUnauthenticated, ""},
	} {
		_, err := tc.c.Do(context.Background(), tc.tool, tc.args, "", fn)
		var e *airlock.Error
		if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s: %v; want %s naming %q", tc.name, err, tc.code, tc.field)
		}
	}
	if ran {
		t.Fatal("a refused call ran")
	}
}

func TestAVanishedHolderIsReapedInDoubt(t *testing.T) {
	t.Parallel()
	c := setup(t)
	held, _, err := c.Claim(context.Background(), "save_note", note{"WD-gone", "x"}, "")
	if err != nil || held == nil {
		t.Fatalf("claim: %+v %v", held, err)
	}
	// The holder renews nothing and reports nothing: after the lease
	// (1s) the reaper takes it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, a, err := c.Claim(context.Background(), "save_note", note{"WD-gone", "x"}, "")
		if err != nil {
			t.Fatal(err)
		}
		if a.Status == airlock.StatusInDoubt {
			break
		}
		if a.Status != airlock.StatusInProgress || time.Now().After(deadline) {
			t.Fatalf("after the holder vanished: %+v", a)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := c.Complete(context.Background(), held.Claim, client.Outcome{Kind: client.Succeeded}); airlock.ErrorCode(err) != airlock.CodeLeaseLost {
		t.Fatalf("a late completion: %v; want lease_lost", err)
	}
}
