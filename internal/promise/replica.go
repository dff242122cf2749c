package promise

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
)

// replica is one airlock server of the run, behind a proxy that loses
// replies while the run is lossy.
type replica struct {
	r       *run
	i       int
	mu      sync.RWMutex // a and srv change when the replica restarts
	a       *app.App
	srv     *httptest.Server
	backend atomic.Pointer[url.URL]
	proxy   *httptest.Server
}

// app is the replica's app now.
func (rep *replica) app() *app.App {
	rep.mu.RLock()
	defer rep.mu.RUnlock()
	return rep.a
}

// direct is the replica's own address now (no proxy: no lost replies).
func (rep *replica) direct() string {
	rep.mu.RLock()
	defer rep.mu.RUnlock()
	return rep.srv.URL
}

func (r *run) startReplica(ctx context.Context, i int) (*replica, error) {
	rep := &replica{r: r, i: i}
	if err := rep.start(ctx); err != nil {
		return nil, err
	}
	rep.proxy = httptest.NewServer(http.HandlerFunc(rep.forward))
	r.reps = append(r.reps, rep)
	return rep, nil
}

func (rep *replica) start(ctx context.Context) error {
	tokens, err := gateway.TokensFromManifest(rep.r.m.Auth.Tokens)
	if err != nil {
		return err
	}
	a, err := app.New(ctx, &app.Config{Manifest: rep.r.m, DSN: rep.r.cfg.DSN, Migrate: true, Tokens: tokens,
		Lease: lease, ReapEvery: 100 * time.Millisecond, ExpireEvery: time.Hour, CommitPoll: 50 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := a.Start(ctx); err != nil {
		_ = a.Close(ctx)
		return err
	}
	srv := httptest.NewServer(a.Gateway.Handler())
	rep.mu.Lock()
	rep.a, rep.srv = a, srv
	rep.mu.Unlock()
	u, _ := url.Parse(srv.URL)
	rep.backend.Store(u)
	return nil
}

// stop stops the replica: its server first, then the app, within a
// deadline (in-flight side effects finish).
func (rep *replica) stop() {
	rep.mu.RLock()
	a, srv := rep.a, rep.srv
	rep.mu.RUnlock()
	srv.CloseClientConnections()
	srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = a.Close(ctx)
	if rep.proxy != nil {
		rep.proxy.Close()
	}
}

// restart stops replica i and starts it again on the same database.
func (r *run) restart(ctx context.Context, i int, logf func(string, ...any)) {
	rep := r.reps[i]
	logf("restarting replica %d", i)
	rep.mu.RLock()
	a, srv := rep.a, rep.srv
	rep.mu.RUnlock()
	srv.CloseClientConnections()
	srv.Close()
	cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	_ = a.Close(cctx)
	cancel()
	if err := rep.start(ctx); err != nil {
		panic(fmt.Sprintf("promise: restarting replica %d: %v", i, err))
	}
}

// forward passes a request to the replica; while the run is lossy it
// drops a share of the replies (the work was done, the caller does not
// hear of it). Streams (GET) pass through as they are.
func (rep *replica) forward(w http.ResponseWriter, req *http.Request) {
	target := *rep.backend.Load()
	body, _ := io.ReadAll(req.Body)
	out, err := http.NewRequestWithContext(req.Context(), req.Method, target.String()+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		drop(w)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	if req.Method == http.MethodGet {
		w.WriteHeader(resp.StatusCode)
		flushCopy(w, resp.Body)
		return
	}
	answer, err := io.ReadAll(resp.Body)
	if err != nil || rep.r.lossy.Load() && rep.r.chance(rep.r.cfg.Faults/3) {
		drop(w)
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

func flushCopy(w http.ResponseWriter, r io.Reader) {
	buf := make([]byte, 4096)
	f, _ := w.(http.Flusher)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
		if err != nil {
			return
		}
	}
}

// url is a replica's address as the callers reach it (through the proxy).
func (r *run) url() string { return r.reps[r.intn(len(r.reps))].proxy.URL }
