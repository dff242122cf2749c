package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals/payments"
	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/tracing"
)

// manifestDir is where a manifest's relative upstream commands are found.
func manifestDir(configPath string) string {
	if configPath == "" {
		return ""
	}
	return filepath.Dir(configPath)
}

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
	shutdown := fs.Duration("shutdown-timeout", app.DefaultShutdown, "on SIGTERM, how long in-flight calls and commits may take to finish")
	expireEvery := fs.Duration("expire-every", 0, "how often undecided plans past expires_after expire (default 10s)")
	examplePayments := fs.String("example-payments", "auto", "with the bundled example, run its fake payments service in this process: auto (when its port is free), on or off")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if code, ok := checkDurations(e, fs); !ok {
		return code
	}
	// Flags checked before anything is written (dev tokens, the example's
	// payments database).
	if _, err := store.Kind(*db); err != nil {
		return usageError(e, "serve", "--db: %v", err)
	}
	if _, _, err := net.SplitHostPort(*listen); err != nil {
		return usageError(e, "serve", "--listen %q: want HOST:PORT, such as 127.0.0.1:8420 (%v)", *listen, err)
	}
	switch *examplePayments {
	case "auto", "on", "off":
	default:
		return usageError(e, "serve", "--example-payments %q: want auto, on or off", *examplePayments)
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	m, err := loadManifest(*config)
	if err != nil {
		return failCode(e, err)
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
		} else {
			// Something else listens on the example's port: say so, since
			// the example's tools will now reach whatever that is.
			fmt.Fprintf(e.stdout, "example payments service not started: %s is taken (the example's tools call whatever listens there; --example-payments=on to insist, off to silence this)\n",
				m.Upstreams["payments"].HTTP)
		}
	}

	traces, err := startTracing(e, log)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer stopTracing(traces, log)
	a, err := app.New(e.ctx, &app.Config{
		Manifest: m, ManifestDir: manifestDir(*config), DSN: *db, Migrate: true, Tokens: tokens, Logger: log, Version: readBuildInfo().Version,
		Lease: *lease, CommitRescueAfter: *rescueAfter, ExpireEvery: *expireEvery, Tracer: traces.Tracer(),
	})
	if err != nil {
		return fail(e, "%v", err)
	}
	if err := a.Start(e.ctx); err != nil {
		_ = a.Close(context.Background())
		return fail(e, "%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = a.Close(context.Background())
		return fail(e, "%v", err)
	}
	addr := ln.Addr().String()
	fmt.Fprintf(e.stdout, "MCP:  http://%s/mcp\nAPI:  http://%s/v1/\nUI:   http://%s/ui/\ndatabase: %s\n", addr, addr, addr, redactDSN(*db))
	if o := m.Auth.OIDC; o != nil {
		fmt.Fprintf(e.stdout, "sign-in: single sign-on through %s (callback %s)\n", o.Issuer, o.RedirectURL)
	}
	for _, is := range m.Auth.Issuers {
		fmt.Fprintf(e.stdout, "issued tokens: from %s for %s\n", is.Issuer, is.AudienceOr(m.Auth.Resource))
	}
	fmt.Fprintf(e.stdout, "listening on http://%s\n", addr)
	// On SIGTERM: in-flight calls finish, the commit worker finishes the
	// commits in hand, and the side effects still running are recorded.
	if err := a.Serve(e.ctx, ln, *shutdown); err != nil {
		return fail(e, "%v", err)
	}
	fmt.Fprintln(e.stdout, "stopped")
	return 0
}

// startExamplePayments runs the example's payments service on the address
// the bundled manifest names, unless something already listens there
// (and must is false).
func startExamplePayments(m *manifest.Manifest, dir string, must bool) (func(), error) {
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

// cmdMCP serves the tools over stdio for desktop agents: the same server
// as serve, with every background loop, without the HTTP listener.
func cmdMCP(e *env, args []string) int {
	fs := newFlags(e, "mcp")
	config := configFlag(fs)
	db := dbFlag(fs)
	run := fs.String("run", "", "the run id of calls that carry none in _meta (default: one per process)")
	lease := fs.Duration("lease", 0, "how long a claim holds without a heartbeat before the reaper takes it (default 30s)")
	expireEvery := fs.Duration("expire-every", 0, "how often undecided plans past expires_after expire (default 10s)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if code, ok := checkDurations(e, fs); !ok {
		return code
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if *run == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		*run = "stdio-" + hex.EncodeToString(b[:])
	}
	m, err := loadManifest(*config)
	if err != nil {
		return failCode(e, err)
	}
	traces, err := startTracing(e, log)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer stopTracing(traces, log)
	a, err := app.New(e.ctx, &app.Config{
		Manifest: m, ManifestDir: manifestDir(*config), DSN: *db, Migrate: true, DefaultRunID: *run, Logger: log, Version: readBuildInfo().Version, Lease: *lease,
		ExpireEvery: *expireEvery, Tracer: traces.Tracer(),
	})
	if err != nil {
		return fail(e, "%v", err)
	}
	if err := a.Start(e.ctx); err != nil {
		_ = a.Close(context.Background())
		return fail(e, "%v", err)
	}
	if err := a.ServeStdio(e.ctx, e.stdin, e.stdout, 0); err != nil {
		return fail(e, "%v", err)
	}
	return 0
}

// startTracing sets OpenTelemetry tracing up as the OTEL_* environment
// variables say (off unless they ask; docs/operations.md, "Traces").
func startTracing(e *env, log *slog.Logger) (*tracing.Setup, error) {
	t, err := tracing.FromEnv(e.ctx, readBuildInfo().Version)
	if err != nil {
		return nil, err
	}
	if t.On() {
		log.Info("tracing on", "endpoint", t.Endpoint)
	}
	return t, nil
}

// stopTracing sends the spans still buffered, waiting at most 5s.
func stopTracing(t *tracing.Setup, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		log.Warn("tracing: flushing spans", "err", err)
	}
}
