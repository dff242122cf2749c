package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/idempotency"
	"github.com/airlockhq/airlock/store/sqlite"
)

type bundle struct {
	srv   *httptest.Server
	execs *atomic.Int64
}

func setup(t *testing.T) bundle {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "svc.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := guard.New(s, nil)
	var execs atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := execs.Add(1)
		body, _ := io.ReadAll(r.Body)
		time.Sleep(50 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":%d,"echo":%s}`, n, body)
	})
	srv := httptest.NewServer(idempotency.Middleware(g, nil, h))
	t.Cleanup(func() { srv.Close(); g.Close(); s.Close() })
	return bundle{srv, &execs}
}

func post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestReplay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r1, body1 := post(t, b.srv.URL+"/pay", "k-1", `{"amount":5}`)
	r2, body2 := post(t, b.srv.URL+"/pay", "k-1", `{"amount":5}`)
	if r1.StatusCode != 201 || r2.StatusCode != 201 || body1 != body2 {
		t.Fatalf("first %d %s, second %d %s", r1.StatusCode, body1, r2.StatusCode, body2)
	}
	if r1.Header.Get("Idempotent-Replayed") != "" || r2.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replayed headers: %q %q", r1.Header.Get("Idempotent-Replayed"), r2.Header.Get("Idempotent-Replayed"))
	}
	if r2.Header.Get("Content-Type") != "application/json" || b.execs.Load() != 1 {
		t.Fatalf("content type %q, executions %d", r2.Header.Get("Content-Type"), b.execs.Load())
	}
}

func TestOtherPayloadIs422(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post(t, b.srv.URL+"/pay", "k-2", `{"amount":5}`)
	r, body := post(t, b.srv.URL+"/pay", "k-2", `{"amount":6}`)
	if r.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "another request payload") || b.execs.Load() != 1 {
		t.Fatalf("%d %s, executions %d", r.StatusCode, body, b.execs.Load())
	}
}

func TestConcurrentRequestsWaitForTheFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var wg sync.WaitGroup
	bodies := make([]string, 16)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, body := post(t, b.srv.URL+"/pay", "k-3", `{"amount":7}`)
			if r.StatusCode != 201 {
				t.Errorf("request %d: %d %s", i, r.StatusCode, body)
			}
			bodies[i] = body
		}()
	}
	wg.Wait()
	for _, body := range bodies {
		if body != bodies[0] {
			t.Fatalf("different answers: %q vs %q", body, bodies[0])
		}
	}
	if b.execs.Load() != 1 {
		t.Fatalf("executions %d", b.execs.Load())
	}
}

func TestWithoutKeyPassesThrough(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post(t, b.srv.URL+"/pay", "", `{}`)
	post(t, b.srv.URL+"/pay", "", `{}`)
	if b.execs.Load() != 2 {
		t.Fatalf("executions %d", b.execs.Load())
	}
}

func TestSameKeyOtherPathIsOtherWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	post(t, b.srv.URL+"/pay", "k-4", `{}`)
	post(t, b.srv.URL+"/refund", "k-4", `{}`)
	if b.execs.Load() != 2 {
		t.Fatalf("executions %d", b.execs.Load())
	}
}
