// Package app assembles one airlock server from a manifest, a DSN and
// options, in the order its parts depend on one another: the commit
// inserter, the store, the metrics, the upstreams, the reconciler, the
// guard, the plan service, the page and the gateway. Start runs every
// background loop (the lease reaper with reconciliation and the records'
// purge, the audit sealer, the audit and figures purge, plan expiry, the commit worker and its rescue);
// Close stops them in order within a deadline. `airlock serve`, `airlock
// mcp`, `airlock demo`, `airlock bench --through` and the CLI's --db
// commands all build their server here, so none of them lacks a loop the
// others run.
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/auth/jwt"
	"github.com/airlockhq/airlock/auth/oidc"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/plan"
	"github.com/airlockhq/airlock/plan/riverqueue"
	"github.com/airlockhq/airlock/reconcile"
	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
	"github.com/airlockhq/airlock/ui"
	"github.com/airlockhq/airlock/upstream"
	"github.com/airlockhq/airlock/upstream/httpjson"
	upmcp "github.com/airlockhq/airlock/upstream/mcp"

	"github.com/jonboulle/clockwork"
	"golang.org/x/net/netutil"
)

// Config configures an App. Only Manifest and DSN are required; every
// other field's zero value is its default.
type Config struct {
	// Manifest is the prepared manifest. Required.
	Manifest *manifest.Manifest
	// ManifestDir is where relative paths of MCP upstream commands are
	// found. Default: the current directory.
	ManifestDir string
	// DSN is the database: sqlite:PATH or postgres://…. Required.
	DSN string
	// Migrate applies the store's and the commit queue's migrations. Serving
	// commands and `airlock migrate` set it; the CLI's other commands do
	// not. Default false.
	Migrate bool
	// ReadOnly opens an embedded (SQLite) database read-only, for a command
	// that only reads through the app (plans list, records show): nothing
	// in the file changes, and a write fails. Default false.
	ReadOnly bool
	// Tokens are the bearer tokens the gateway and the page accept.
	// Default: none (every authenticated route answers 401).
	Tokens []gateway.Token
	// DefaultRunID is the run of MCP calls that name none (stdio). Default: none.
	DefaultRunID string
	// Funcs execute tools by name in process, before any upstream (embedding,
	// benchmarks). Default: none.
	Funcs map[string]upstream.Caller
	// Clock is the one time source of the guard, the gateway, the page,
	// plans and the background services: keys' windows, leases, records'
	// and plans' times, sessions, and when each pass runs (connection
	// deadlines stay on the system clock, as net/http reads them). Tests
	// pass a clockwork.FakeClock. Default: the system clock.
	Clock clockwork.Clock
	// Version is reported to MCP clients. Default "dev".
	Version string
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Lease is how long a claim holds without a heartbeat. Default 30s.
	Lease time.Duration
	// ReapEvery is how often the reaper looks for expired leases, asks about
	// in-doubt records and purges records past retention. Default 5s (half
	// the lease when the lease is shorter than 10s).
	ReapEvery time.Duration
	// ExpireEvery is how often undecided plans past expires_after expire.
	// Default 10s.
	ExpireEvery time.Duration
	// SealEvery is how often the audit sealer chains new events. Default 1s.
	SealEvery time.Duration
	// RetentionEvery is how often audit events and figures past the
	// manifest's retention are purged. Default 1m.
	RetentionEvery time.Duration
	// ReconcileBackoff is the first wait before asking again about an
	// in-doubt record whose reconciliation failed. Default 10s.
	ReconcileBackoff time.Duration
	// CommitRescueAfter retries a commit whose process died after this
	// long. Default 10m.
	CommitRescueAfter time.Duration
	// CommitPoll is how often idle commit workers look for jobs. Default 200ms.
	CommitPoll time.Duration
	// Registry receives the metrics. Default: a new registry with the Go
	// and process collectors.
	Registry *prometheus.Registry
	// Tracer makes spans of calls, the guard's stages and plans (package
	// tracing). Default: none.
	Tracer airlock.Tracer
}

// App is one assembled server.
type App struct {
	Manifest   *manifest.Manifest
	Store      airlock.Store
	Guard      *guard.Guard
	Reaper     *guard.Reaper // the guard's maintenance: expired leases, purge, reconciliation
	Plans      *plan.Service
	Reconciler *reconcile.Reconciler
	Gateway    *gateway.Gateway
	Metrics    *metrics.Metrics
	Registry   *prometheus.Registry

	cfg       Config
	log       *slog.Logger
	upstreams map[string]upstream.Caller
	web       *ui.UI
	closers   []func() error // upstream clients
	commits   commitQueue

	mu        sync.Mutex
	started   bool
	closed    bool
	stopLoops context.CancelFunc
	// services are the background work Start started, stopped by Close.
	services []interface {
		Start(context.Context) error
		Stop()
	}
	worker *riverqueue.Worker
}

// commitQueue is what differs between the databases for the commit queue:
// River's driver on the store's own connection. It is chosen once, here.
type commitQueue struct {
	migrate func(ctx context.Context) error // the store's migrations, then the queue's
	start   func(ctx context.Context, commits riverqueue.Committer, cfg *riverqueue.Config) (*riverqueue.Worker, error)
}

// New builds the server. It connects to the database (migrating when
// cfg.Migrate) but starts nothing; call Start, then Close.
func New(ctx context.Context, cfg *Config) (*App, error) {
	if cfg == nil || cfg.Manifest == nil || cfg.DSN == "" {
		return nil, errors.New("app: Manifest and DSN are required")
	}
	a := &App{Manifest: cfg.Manifest, cfg: *cfg, log: cfg.Logger, upstreams: map[string]upstream.Caller{}}
	if a.log == nil {
		a.log = slog.Default()
	}
	ok := false
	defer func() {
		if !ok {
			if a.Guard != nil {
				a.Guard.Close() // its event writer runs from guard.New on
			}
			_ = a.closeParts() // the error that stopped New is the one to report
		}
	}()

	// The store inserts commit jobs in its own transactions.
	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	if cfg.Migrate {
		// The store's migrations and the commit queue's, under the
		// driver's lock where it has one.
		if err := a.commits.migrate(ctx); err != nil {
			return nil, fmt.Errorf("%w: migrating: %w", airlock.ErrStoreUnavailable, err)
		}
	}

	a.Registry = cfg.Registry
	if a.Registry == nil {
		a.Registry = prometheus.NewRegistry()
		a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m := cfg.Manifest
	var err error
	if a.Metrics, err = metrics.New(a.Registry, &metrics.Config{Waiting: func(ctx context.Context) ([]airlock.WaitingPlans, error) {
		return plan.WaitingByTool(ctx, a.Store, m)
	}, InDoubt: a.Store.InDoubtByTool, Clock: cfg.Clock}); err != nil {
		return nil, err
	}
	a.Metrics.SetTimeouts(&m.Catalog)

	a.connectUpstreams()
	if a.Reconciler, err = reconcile.New(reconcile.Config{Catalog: &m.Catalog, Callers: a.caller, Clock: cfg.Clock}); err != nil {
		return nil, err
	}
	// The reaper lists in-doubt records only when some tool asks about them.
	var reconciler airlock.Reconciler
	if a.Reconciler.Any() {
		reconciler = a.Reconciler
	}
	a.Guard = guard.New(a.Store, &guard.Config{
		Logger: a.log, Lease: cfg.Lease, Observer: a.Metrics, Retention: m.Retention.RecordsOr(), Tracer: cfg.Tracer,
		MaxRunIDBytes: m.Limits.RunIDBytesOr(), CacheBytes: m.Limits.CacheBytesOr(), Clock: cfg.Clock,
	})
	a.Reaper = guard.NewReaper(a.Guard, &guard.ReaperConfig{
		Interval: reapInterval(cfg), Redrive: a.redrive, Reconciler: reconciler, ReconcileBackoff: cfg.ReconcileBackoff,
		// A vanished caller's claim of a tool that honours keys is taken
		// over by the next caller (or worker) with the same key.
		Leave: func(rec *airlock.Record) bool {
			t := m.Tool(rec.Tool)
			return t != nil && t.CallerTakesOver()
		},
	})
	var noticeSecret []byte
	if n := m.Notify; n.SecretEnv != "" {
		v, err := secretFromEnv("notify.secret_env", n.SecretEnv)
		if err != nil {
			return nil, err
		}
		noticeSecret = []byte(v)
	} else if n.Webhook != "" {
		a.log.Warn("airlock: notify.webhook is set without notify.secret_env: notices are not signed, and the receiver cannot tell them from anyone's")
	}
	if a.Plans, err = plan.New(plan.Config{Manifest: m, Store: a.Store, Guard: a.Guard, Callers: a.caller, Observer: a.Metrics, Logger: a.log, Tracer: cfg.Tracer,
		NotifySecret:  noticeSecret,
		MaxRunIDBytes: m.Limits.RunIDBytesOr(), Clock: cfg.Clock}); err != nil {
		return nil, err
	}
	tokens := cfg.Tokens
	// One throttle for bearer tokens and the page's sign-in: guessing
	// either costs the same address.
	throttle := gateway.NewThrottle(&gateway.ThrottleConfig{
		Failed:  func(kind string) { a.Metrics.AuthFailures.WithLabelValues(kind).Inc() },
		Refused: func(kind string) { a.Metrics.AuthRefused.WithLabelValues(kind).Inc() },
		Clock:   cfg.Clock,
	})
	proxies := gateway.Proxies(m.Auth.TrustedPrefixes())
	var issued *jwt.Verifier
	if len(m.Auth.Issuers) > 0 {
		issued = jwt.New(jwt.Config{Resource: m.Auth.Resource, Issuers: m.Auth.Issuers, Clock: cfg.Clock})
	}
	var sso ui.SSO
	if o := m.Auth.OIDC; o != nil {
		secret, err := secretFromEnv("auth.oidc.client_secret_env", o.ClientSecretEnv)
		if err != nil {
			return nil, err
		}
		sso = oidc.New(oidc.Config{Spec: *o, ClientSecret: secret})
	}
	a.web, err = ui.New(ui.Config{Manifest: m, Store: a.Store, Guard: a.Guard, Plans: a.Plans, Logger: a.log, Reconcile: a.Reconciler, Throttle: throttle,
		ClientAddr: proxies.ClientAddr, Secure: proxies.Secure, SSO: sso, Clock: cfg.Clock,
		Authenticate: func(token string) (ui.Principal, bool) {
			t, ok := gateway.TokenOf(tokens, token)
			return ui.Principal{Name: t.Name, Role: t.Role, Credential: t.Credential()}, ok
		},
		Current: func(credential string) (ui.Principal, bool) {
			t, ok := gateway.ByCredential(tokens, credential)
			return ui.Principal{Name: t.Name, Role: t.Role, Credential: credential}, ok
		}})
	if err != nil {
		return nil, err
	}
	if a.Gateway, err = gateway.New(gateway.Config{
		Manifest: m, Guard: a.Guard, Store: a.Store, Upstreams: a.upstreams, Funcs: cfg.Funcs, Tokens: tokens, Issued: issued, Logger: a.log,
		Version: cfg.Version, DefaultRunID: cfg.DefaultRunID, Plans: a.Plans, Metrics: a.Metrics, Gatherer: a.Registry, UI: a.web.Handler(),
		Tracer: cfg.Tracer, MaxBody: m.Limits.RequestBytesOr(),
		MCPSessionIdle: m.Limits.MCPSessionIdle.Duration, MCPSessionsPerToken: m.Limits.MCPSessionsPerToken,
		BodyTimeout: m.Limits.BodyTimeout.Duration, Throttle: throttle, TrustedProxies: proxies, Clock: cfg.Clock,
	}); err != nil {
		return nil, err
	}
	ok = true
	return a, nil
}

// openStore opens the store the DSN names, with the job inserter typed to
// its transaction, and chooses the commit queue's River driver.
func (a *App) openStore(ctx context.Context) error {
	kind, err := store.Kind(a.cfg.DSN)
	if err != nil {
		return err
	}
	switch kind {
	case "sqlite":
		ins, err := riverqueue.SQLiteInserter()
		if err != nil {
			return err
		}
		sc := &sqlite.Config{EnqueueCommit: ins.Commit, ReadOnly: a.cfg.ReadOnly}
		if a.Manifest.Notify.Webhook != "" {
			sc.EnqueueNotice = ins.Notice
		}
		s, err := sqlite.Open(store.SQLitePath(a.cfg.DSN), sc)
		if err != nil {
			return fmt.Errorf("%w: %w", airlock.ErrStoreUnavailable, err)
		}
		a.Store = s
		// River's SQLite driver wants a pool of one connection, opened with
		// the store's own settings.
		a.commits = commitQueue{
			migrate: func(ctx context.Context) error {
				if err := s.Migrate(ctx); err != nil {
					return err
				}
				db, err := s.OpenDB(1)
				if err != nil {
					return err
				}
				return errors.Join(riverqueue.SQLite(db).Migrate(ctx), db.Close())
			},
			start: func(ctx context.Context, c riverqueue.Committer, cfg *riverqueue.Config) (*riverqueue.Worker, error) {
				db, err := s.OpenDB(1)
				if err != nil {
					return nil, err
				}
				w, err := riverqueue.SQLite(db).Start(ctx, c, cfg)
				if err != nil {
					db.Close()
				}
				return w, err
			},
		}
	default:
		ins, err := riverqueue.PostgresInserter()
		if err != nil {
			return err
		}
		pc := &postgres.Config{EnqueueCommit: ins.Commit, Logger: a.log}
		if a.Manifest.Notify.Webhook != "" {
			pc.EnqueueNotice = ins.Notice
		}
		s, err := postgres.Open(ctx, a.cfg.DSN, pc)
		if err != nil {
			return fmt.Errorf("%w: %w", airlock.ErrStoreUnavailable, err)
		}
		a.Store = s
		a.commits = commitQueue{
			migrate: func(ctx context.Context) error {
				return s.MigrateWith(ctx, riverqueue.Postgres(s.Pool()).MigrateStep)
			},
			start: func(ctx context.Context, c riverqueue.Committer, cfg *riverqueue.Config) (*riverqueue.Worker, error) {
				if s.TransactionPooling() {
					poll := *cfg
					poll.PollOnly = true
					cfg = &poll
				}
				return riverqueue.Postgres(s.Pool()).Start(ctx, c, cfg)
			},
		}
	}
	return nil
}

// connectUpstreams makes a client per manifest upstream; they connect lazily.
func (a *App) connectUpstreams() {
	for name, u := range a.Manifest.Upstreams {
		var c upstream.Closer
		switch {
		case u.HTTP != "":
			c = httpjson.New(u.HTTP, &httpjson.Config{MaxResponse: a.Manifest.Limits.UpstreamAnswerBytesOr()})
		case u.MCP != nil && len(u.MCP.Command) > 0:
			argv := append([]string(nil), u.MCP.Command...)
			if !filepath.IsAbs(argv[0]) && strings.ContainsRune(argv[0], filepath.Separator) && a.cfg.ManifestDir != "" {
				argv[0] = filepath.Join(a.cfg.ManifestDir, argv[0])
			}
			c = upmcp.NewCommand(argv, a.mcpOptions(u.MCP))
		case u.MCP != nil:
			c = upmcp.NewHTTP(u.MCP.URL, a.mcpOptions(u.MCP))
		default:
			continue
		}
		a.upstreams[name] = c
		a.closers = append(a.closers, c.Close)
	}
}

// secretFromEnv reads the secret the manifest's field names the variable
// of; an unset or empty variable is an error naming both.
func secretFromEnv(field, name string) (string, error) {
	v := os.Getenv(name)
	if v == "" {
		return "", fmt.Errorf("%s: environment variable %s is not set", field, name)
	}
	return v, nil
}

func (a *App) mcpOptions(u *manifest.MCPUpstream) *upmcp.Options {
	return &upmcp.Options{SessionPerAgent: u.Sessions == manifest.SessionsPerAgent, MaxAnswer: a.Manifest.Limits.UpstreamAnswerBytesOr()}
}

// caller finds a tool's upstream: an in-process func first, then the
// manifest's upstream.
func (a *App) caller(t *airlock.Tool) (upstream.Caller, bool) {
	if c, ok := a.cfg.Funcs[t.Name]; ok {
		return c, true
	}
	if t.Upstream == nil {
		return nil, false
	}
	c, ok := a.upstreams[t.Upstream.Name]
	return c, ok
}

// redrive gives the reaper the side effect of an expired record whose
// upstream honours keys, to run again with the same key.
func (a *App) redrive(rec *airlock.Record) (*airlock.Tool, airlock.SideEffect, bool) {
	t := a.Manifest.Tool(rec.Tool)
	if t == nil || !t.HonorsKey {
		return nil, nil, false
	}
	c, ok := a.caller(t)
	if !ok {
		return nil, nil, false
	}
	args := rec.Args
	return t, func(ctx context.Context, key string) airlock.Outcome {
		return c.Call(ctx, &upstream.Request{Tool: t, Args: args, Key: key})
	}, true
}

// Start runs the background loops and the commit worker. They run until
// Close, not until ctx ends (ctx bounds starting only).
func (a *App) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.closed {
		return errors.New("app: already started or closed")
	}
	a.started = true
	w, err := a.commits.start(ctx, a.Plans, &riverqueue.Config{RescueAfter: a.cfg.CommitRescueAfter, FetchPollInterval: a.cfg.CommitPoll})
	if err != nil {
		return fmt.Errorf("starting the commit queue: %w", err)
	}
	a.worker = w
	if c, ok := a.Store.(interface {
		Warnings(context.Context) []string
	}); ok {
		for _, msg := range c.Warnings(ctx) {
			a.log.Warn(msg)
		}
	}
	loopCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	a.stopLoops = stop
	expireEvery := a.cfg.ExpireEvery
	if expireEvery <= 0 {
		expireEvery = 10 * time.Second
	}
	sealEvery := a.cfg.SealEvery
	if sealEvery <= 0 {
		sealEvery = time.Second
	}
	// The background work, each a service started here and stopped by
	// Close: the guard's reaper, plan expiry, the sealer, the page's
	// session purge and (when configured) the retention purge.
	a.services = []interface {
		Start(context.Context) error
		Stop()
	}{a.Reaper, a.Plans.Expirer(expireEvery), audit.NewSealer(a.Store, sealEvery, a.cfg.Clock, a.log, a.sealed), a.web.SessionPurger(time.Minute)}
	if r := audit.NewRetention(a.Store, audit.Retention{
		Audit: a.Manifest.Retention.AuditOr(), Figures: a.Manifest.Retention.FiguresOr(),
		Every: a.cfg.RetentionEvery, Logger: a.log, Purged: a.purged, Clock: a.cfg.Clock,
	}); r != nil {
		a.services = append(a.services, r)
	}
	for _, s := range a.services {
		if err := s.Start(loopCtx); err != nil {
			return err
		}
	}
	return nil
}

// reapInterval is Config.ReapEvery, or its default: 5s, or half a shorter
// lease (at least 100ms).
func reapInterval(cfg *Config) time.Duration {
	if cfg.ReapEvery > 0 {
		return cfg.ReapEvery
	}
	every := 5 * time.Second
	if lease := cfg.Lease; lease > 0 && lease < 2*every {
		every = max(lease/2, 100*time.Millisecond)
	}
	return every
}

func (a *App) purged(events, figureRows int) {
	a.Metrics.Purged.WithLabelValues("audit_events").Add(float64(events))
	a.Metrics.Purged.WithLabelValues("figure_rows").Add(float64(figureRows))
}

func (a *App) sealed(n int, head airlock.AuditAnchor) {
	a.Metrics.AuditEvents.Add(float64(n))
	a.Metrics.AuditHeadSeq.Set(float64(head.Seq))
}

// DefaultShutdown bounds Close when ctx has no deadline of its own.
const DefaultShutdown = 60 * time.Second

// Close stops the server in order: the commit worker (commits in hand
// finish), the background loops, the side effects still running (they
// finish and are recorded), the guard's buffered audit events, a last seal
// of the audit log, the upstream clients and the
// store. It gives up waiting at ctx's deadline (DefaultShutdown when ctx
// has none) and closes what is left.
func (a *App) Close(ctx context.Context) error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	a.mu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultShutdown)
		defer cancel()
	}
	var errs []error
	if a.worker != nil {
		errs = append(errs, a.worker.Stop(ctx))
	}
	if a.stopLoops != nil {
		a.stopLoops()
		waitOrDone(ctx, func() {
			for _, s := range a.services {
				s.Stop()
			}
		})
	}
	if a.Guard != nil {
		// One wait, bounded by ctx: past it, Close returns, whatever runs.
		if err := a.Guard.Shutdown(ctx); err != nil {
			a.log.Warn("airlock: stopping with side effects still running; their records stay running until the reaper of another process takes them")
			errs = append(errs, err)
		}
		if a.started && ctx.Err() == nil {
			if _, err := audit.SealPending(ctx, a.Store); err != nil {
				errs = append(errs, fmt.Errorf("sealing the audit log: %w", err))
			}
		}
	}
	if a.Gateway != nil {
		a.Gateway.CloseSessions()
	}
	errs = append(errs, a.closeParts())
	return errors.Join(errs...)
}

// closeParts closes the upstream clients and the store.
func (a *App) closeParts() error {
	var errs []error
	for i := len(a.closers) - 1; i >= 0; i-- {
		errs = append(errs, a.closers[i]())
	}
	a.closers = nil
	if a.Store != nil {
		errs = append(errs, a.Store.Close())
	}
	return errors.Join(errs...)
}

// waitOrDone runs wait and reports whether it returned before ctx ended.
func waitOrDone(ctx context.Context, wait func()) bool {
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

// Serve serves the gateway (MCP at /mcp, the HTTP API, the page) on ln
// until ctx ends, then lets in-flight requests finish and closes the app,
// all within shutdown (DefaultShutdown when zero). Start must have run.
func (a *App) Serve(ctx context.Context, ln net.Listener, shutdown time.Duration) error {
	// Headers within 10 s; a connection idle between requests is closed
	// after 2 minutes; bodies and answers have their own deadlines (the
	// gateway's). At most limits.connections are served at once; more wait
	// to be accepted.
	srv := &http.Server{Handler: a.Gateway.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ln = netutil.LimitListener(ln, a.Manifest.Limits.ConnectionsOr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var serveErr error
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			serveErr = err
		}
	case <-ctx.Done():
	}
	if shutdown <= 0 {
		shutdown = DefaultShutdown
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
	defer cancel()
	_ = srv.Shutdown(sctx) // in-flight calls finish
	return errors.Join(serveErr, a.Close(sctx))
}

// ServeStdio serves MCP over r and w (airlock mcp) until the client goes
// away or ctx ends, then closes the app within shutdown (DefaultShutdown
// when zero). Start must have run.
func (a *App) ServeStdio(ctx context.Context, r io.Reader, w io.Writer, shutdown time.Duration) error {
	err := a.Gateway.MCPServer().Run(ctx, a.Gateway.StdioTransport(r, w))
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		err = nil
	}
	if shutdown <= 0 {
		shutdown = DefaultShutdown
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdown)
	defer cancel()
	return errors.Join(err, a.Close(sctx))
}
