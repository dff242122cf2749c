package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/examples/withdrawals/payments"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/plan/riverqueue"
	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/ui"
	"github.com/airlockhq/airlock/upstream"
	"github.com/airlockhq/airlock/upstream/httpjson"
	upmcp "github.com/airlockhq/airlock/upstream/mcp"
)

// app is everything a serving command runs on.
type app struct {
	manifest *airlock.Manifest
	store    airlock.Store
	guard    *airlock.Guard
	gateway  *gateway.Gateway
	plans    *plan.Service
	queue    *riverqueue.Queue
	metrics  *metrics.Metrics
	closers  []func() error
	log      *slog.Logger
}

func (a *app) Close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		_ = a.closers[i]()
	}
}

// openApp loads the manifest, opens and migrates the store, connects the
// upstreams and builds the gateway.
// tuning holds the operational knobs of serve.
type tuning struct {
	lease       time.Duration // the guard's lease; 0: default
	rescueAfter time.Duration // River's rescue of stuck commits; 0: default
}

func openApp(ctx context.Context, configPath, dsn string, tokens []gateway.Token, defaultRun string, log *slog.Logger, tune tuning) (*app, error) {
	m, err := loadManifest(configPath)
	if err != nil {
		return nil, err
	}
	s, err := store.OpenMigrated(ctx, dsn)
	if err != nil {
		return nil, err
	}
	a := &app{manifest: m, store: s, log: log}
	a.closers = append(a.closers, s.Close)

	ups := map[string]upstream.Caller{}
	for name, u := range m.Upstreams {
		switch {
		case u.HTTP != "":
			c := httpjson.New(u.HTTP, nil)
			ups[name] = c
			a.closers = append(a.closers, c.Close)
		case u.MCP != nil && len(u.MCP.Command) > 0:
			argv := append([]string(nil), u.MCP.Command...)
			if !filepath.IsAbs(argv[0]) && strings.ContainsRune(argv[0], filepath.Separator) && configPath != "" {
				argv[0] = filepath.Join(filepath.Dir(configPath), argv[0])
			}
			c := upmcp.NewCommand(argv)
			ups[name] = c
			a.closers = append(a.closers, c.Close)
		case u.MCP != nil:
			c := upmcp.NewHTTP(u.MCP.URL)
			ups[name] = c
			a.closers = append(a.closers, c.Close)
		}
	}
	redrive := func(rec *airlock.Record) (*airlock.Tool, airlock.SideEffect, bool) {
		t := m.Tool(rec.Tool)
		if t == nil || t.Upstream == nil || !t.HonorsKey {
			return nil, nil, false
		}
		c, ok := ups[t.Upstream.Name]
		if !ok {
			return nil, nil, false
		}
		args := rec.Args
		return t, func(ctx context.Context, key string) airlock.Outcome {
			return c.Call(ctx, &upstream.Request{Tool: t, Args: args, Key: key})
		}, true
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var guardRef *airlock.Guard
	met, err := metrics.New(reg, &metrics.Config{AuditDropped: func() int64 {
		if guardRef == nil {
			return 0
		}
		return guardRef.AuditDropped()
	}, QueueDepth: func(ctx context.Context) (map[string]int, error) {
		waiting, err := s.ListPlans(ctx, airlock.PlanFilter{Status: airlock.PlanAwaitingApproval, Limit: 10000})
		if err != nil {
			return nil, err
		}
		depth := map[string]int{}
		for _, t := range m.Tools {
			if t.Kind == airlock.KindIrreversible {
				depth[t.Name] = 0
			}
		}
		for _, p := range waiting {
			depth[p.Tool]++
		}
		return depth, nil
	}})
	if err != nil {
		a.Close()
		return nil, err
	}
	met.SetTimeouts(m)
	a.guard = airlock.NewGuard(s, &airlock.GuardConfig{Redrive: redrive, Logger: log, Lease: tune.lease, Observer: met})
	guardRef = a.guard
	a.metrics = met
	a.closers = append(a.closers, func() error { a.guard.Close(); return nil })
	callers := func(t *airlock.Tool) (upstream.Caller, bool) {
		if t.Upstream == nil {
			return nil, false
		}
		c, ok := ups[t.Upstream.Name]
		return c, ok
	}
	a.plans, err = plan.New(plan.Config{Manifest: m, Store: s, Guard: a.guard, Callers: callers, Logger: log})
	if err != nil {
		a.Close()
		return nil, err
	}
	var q *riverqueue.Queue
	switch st := s.(type) {
	case *sqlite.Store:
		q, err = riverqueue.SQLite(ctx, st.Path(), a.plans, &riverqueue.Config{RescueAfter: tune.rescueAfter})
	case *postgres.Store:
		q, err = riverqueue.Postgres(ctx, st.Pool(), a.plans, &riverqueue.Config{RescueAfter: tune.rescueAfter})
	default:
		err = fmt.Errorf("no commit queue for %T", s)
	}
	if err != nil {
		a.Close()
		return nil, err
	}
	a.plans.SetEnqueue(q.Enqueue())
	a.queue = q
	var gw *gateway.Gateway
	reconcile := func(ctx context.Context, rec *airlock.Record) (json.RawMessage, error) {
		return reconcileRecord(ctx, m, callers, rec)
	}
	web, err := ui.New(ui.Config{Manifest: m, Store: s, Guard: a.guard, Plans: a.plans, Logger: log, Reconcile: reconcile,
		Authenticate: func(token string) (ui.Principal, bool) {
			p, ok := gw.Authenticate(token)
			return ui.Principal{Name: p.Name, Role: p.Role}, ok
		}})
	if err != nil {
		a.Close()
		return nil, err
	}
	gw, err = gateway.New(gateway.Config{
		Manifest: m, Guard: a.guard, Store: s, Upstreams: ups, Tokens: tokens, Logger: log, Version: version, DefaultRunID: defaultRun,
		Plans: a.plans, Metrics: met, Gatherer: reg, UI: web.Handler(),
	})
	a.gateway = gw
	if err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

const version = "0.1.0-dev"

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// dataDir is where serve keeps its files: the SQLite file's directory, or
// ./airlock-data for PostgreSQL.
func dataDir(dsn string) string {
	if p, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return filepath.Dir(strings.TrimPrefix(p, "//"))
	}
	return "airlock-data"
}

// devTokens are generated once for a loopback server with no tokens in its
// manifest and kept in the data directory.
type devTokens struct {
	Agent    string `json:"agent"`
	Approver string `json:"approver"`
	Admin    string `json:"admin"`
}

func loadOrCreateDevTokens(dir string) (*devTokens, bool, error) {
	path := filepath.Join(dir, "dev-tokens.json")
	if b, err := os.ReadFile(path); err == nil {
		var t devTokens
		if err := json.Unmarshal(b, &t); err != nil || t.Agent == "" || t.Approver == "" || t.Admin == "" {
			return nil, false, fmt.Errorf("%s is damaged; delete it to make new dev tokens", path)
		}
		return &t, false, nil
	}
	gen := func(prefix string) string {
		var b [18]byte
		_, _ = rand.Read(b[:])
		return prefix + hex.EncodeToString(b[:])
	}
	t := &devTokens{Agent: gen("agent_"), Approver: gen("approver_"), Admin: gen("admin_")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, err
	}
	b, _ := json.MarshalIndent(t, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, false, err
	}
	return t, true, nil
}

func (t *devTokens) tokens() []gateway.Token {
	return []gateway.Token{
		{Name: "dev-agent", Role: airlock.RoleAgent, SHA256: gateway.HashToken(t.Agent)},
		{Name: "dev-approver", Role: airlock.RoleApprover, SHA256: gateway.HashToken(t.Approver)},
		{Name: "dev-admin", Role: airlock.RoleAdmin, SHA256: gateway.HashToken(t.Admin)},
	}
}

func cmdServe(e *env, args []string) int {
	fs := newFlags(e, "serve")
	config := configFlag(fs)
	db := dbFlag(fs)
	listen := fs.String("listen", envOr("AIRLOCK_LISTEN", "127.0.0.1:8420"), "address to listen on; env AIRLOCK_LISTEN")
	lease := fs.Duration("lease", 0, "how long a claim holds without a heartbeat before the reaper takes it (default 30s)")
	rescueAfter := fs.Duration("commit-rescue-after", 0, "retry a commit whose process died after this long (default 10m)")
	examplePayments := fs.String("example-payments", "auto", "with the bundled example, run its fake payments service in this process: auto (when its port is free), on or off")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := loadManifest(*config)
	if err != nil {
		return fail(e, "%v", err)
	}
	tokens, err := gateway.TokensFromManifest(m.Auth.Tokens)
	if err != nil {
		return fail(e, "%v", err)
	}
	if len(tokens) == 0 {
		if !isLoopback(*listen) {
			return fail(e, "refusing to serve on %s without tokens: add auth.tokens to the manifest, or listen on 127.0.0.1", *listen)
		}
		dev, created, err := loadOrCreateDevTokens(dataDir(*db))
		if err != nil {
			return fail(e, "dev tokens: %v", err)
		}
		tokens = dev.tokens()
		word := "dev tokens (kept in " + filepath.Join(dataDir(*db), "dev-tokens.json") + ")"
		if created {
			word = "new " + word
		}
		fmt.Fprintf(e.stdout, "%s:\n  agent:    %s\n  approver: %s\n  admin:    %s\n", word, dev.Agent, dev.Approver, dev.Admin)
	}

	if *config == "" && *examplePayments != "off" {
		stop, err := startExamplePayments(m, dataDir(*db), *examplePayments == "on")
		if err != nil {
			return fail(e, "example payments service: %v", err)
		}
		if stop != nil {
			defer stop()
			fmt.Fprintf(e.stdout, "example payments service on %s\n", m.Upstreams["payments"].HTTP)
		}
	}

	a, err := openApp(e.ctx, *config, *db, tokens, "", log, tuning{lease: *lease, rescueAfter: *rescueAfter})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer a.Close()
	reaperCtx, stopReaper := context.WithCancel(context.Background())
	defer stopReaper()
	reapEvery := 5 * time.Second
	if *lease > 0 && *lease < 2*reapEvery {
		reapEvery = max(*lease/2, 100*time.Millisecond)
	}
	go a.guard.RunReaper(reaperCtx, reapEvery)
	go a.gateway.RunExpiry(reaperCtx, 10*time.Second)
	go audit.RunSealer(reaperCtx, a.store, time.Second, log, func(n int) { a.metrics.AuditEvents.Add(float64(n)) })
	if err := a.queue.Start(reaperCtx); err != nil {
		return fail(e, "starting the commit queue: %v", err)
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fail(e, "%v", err)
	}
	srv := &http.Server{Handler: a.gateway.Handler(), ReadHeaderTimeout: 10 * time.Second}
	addr := ln.Addr().String()
	fmt.Fprintf(e.stdout, "MCP:  http://%s/mcp\nAPI:  http://%s/v1/\nUI:   http://%s/ui/\ndatabase: %s\n", addr, addr, addr, redactDSN(*db))
	fmt.Fprintf(e.stdout, "listening on http://%s\n", addr)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fail(e, "%v", err)
		}
	case <-e.ctx.Done():
	}
	// Let in-flight calls finish; the guard then waits for the side effects
	// it started (their heartbeats keep their leases until they are done).
	sctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	_ = a.queue.Stop(sctx) // commits in hand finish
	stopReaper()
	a.guard.Wait()
	fmt.Fprintln(e.stdout, "stopped")
	return 0
}

// startExamplePayments runs the example's payments service on the address
// the bundled manifest names, unless something already listens there
// (and must is false).
func startExamplePayments(m *airlock.Manifest, dir string, must bool) (func(), error) {
	u, err := url.Parse(m.Upstreams["payments"].HTTP)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		if must {
			return nil, err
		}
		return nil, nil // assume the real one (or another copy) is running
	}
	svc, err := payments.New(&payments.Config{DBPath: filepath.Join(dir, "payments.db")})
	if err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		svc.Close()
	}, nil
}

// cmdMCP serves the tools over stdio for desktop agents.
func cmdMCP(e *env, args []string) int {
	fs := newFlags(e, "mcp")
	config := configFlag(fs)
	db := dbFlag(fs)
	run := fs.String("run", "", "the run id of calls that carry none in _meta (default: one per process)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *run == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		*run = "stdio-" + hex.EncodeToString(b[:])
	}
	a, err := openApp(e.ctx, *config, *db, nil, *run, log, tuning{})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer a.Close()
	qctx, stopQueue := context.WithCancel(context.Background())
	defer stopQueue()
	if err := a.queue.Start(qctx); err != nil {
		return fail(e, "starting the commit queue: %v", err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = a.queue.Stop(sctx)
	}()
	if err := a.gateway.MCPServer().Run(e.ctx, &mcp.IOTransport{Reader: readCloser{e.stdin}, Writer: writeCloser{e.stdout}}); err != nil && !errors.Is(err, context.Canceled) {
		return fail(e, "%v", err)
	}
	a.guard.Wait()
	return 0
}

type readCloser struct {
	r interface{ Read([]byte) (int, error) }
}

func (r readCloser) Read(p []byte) (int, error) { return r.r.Read(p) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct {
	w interface{ Write([]byte) (int, error) }
}

func (w writeCloser) Write(p []byte) (int, error) { return w.w.Write(p) }
func (writeCloser) Close() error                  { return nil }

// reconcileRecord asks the tool's reconcile_with read tool about an
// in-doubt record, with the record's arguments that the read tool takes.
func reconcileRecord(ctx context.Context, m *airlock.Manifest, callers func(*airlock.Tool) (upstream.Caller, bool), rec *airlock.Record) (json.RawMessage, error) {
	t := m.Tool(rec.Tool)
	if t == nil || t.ReconcileWith == "" {
		return nil, fmt.Errorf("the tool has no reconcile_with")
	}
	rt := m.Tool(t.ReconcileWith)
	if rt == nil {
		return nil, fmt.Errorf("no tool %s", t.ReconcileWith)
	}
	c, ok := callers(rt)
	if !ok {
		return nil, fmt.Errorf("%s has no upstream", rt.Name)
	}
	args, err := airlock.ParseArgs(rec.Args)
	if err != nil {
		return nil, err
	}
	if props, ok := rt.InputSchema["properties"].(map[string]any); ok {
		for k := range args {
			if _, known := props[k]; !known {
				delete(args, k)
			}
		}
	}
	out := c.Call(ctx, &upstream.Request{Tool: rt, Args: airlock.CanonicalArgs(args)})
	if out.Kind != airlock.OutcomeSucceeded {
		if out.Err != nil {
			return nil, out.Err
		}
		return nil, fmt.Errorf("%s answered: %s", rt.Name, out.Result)
	}
	return out.Result, nil
}
