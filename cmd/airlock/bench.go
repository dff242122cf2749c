package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/bench"
	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/store"
)

func cmdBench(e *env, args []string) int {
	fs := newFlags(e, "bench")
	// Never $AIRLOCK_DB: it may name a database in service, which the
	// bench would fill with its records.
	db := fs.String("db", "", "the database to measure on: sqlite:PATH or postgres://… (default: a new SQLite database in a temporary directory, removed afterwards)")
	var cfg bench.Config
	fs.StringVar(&cfg.Mode, "mode", "new", "new | repeat | race | mixed | soak (fill a database, then time the report, each page, the purges and audit verify)")
	events := fs.Int("events", 1_000_000, "soak: about how many audit events to fill the database with (it must be empty)")
	fs.IntVar(&cfg.Calls, "calls", 10000, "calls to measure")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "callers at once")
	fs.Float64Var(&cfg.DupRate, "dup-rate", 0, "mixed: the share of calls that repeat an earlier key (default 0.5)")
	fs.StringVar(&cfg.KeySpace, "key-space", "", "a name that makes keys deterministic, so processes with the same flags contend for the same keys")
	fs.StringVar(&cfg.Impl, "impl", "airlock", "airlock, or baseline: a plain claim-insert / update-result loop over the same driver")
	fs.DurationVar(&cfg.Work, "work", 0, "how long each side effect takes (default 0; race: 5ms)")
	through := fs.String("through", "", "measure a whole call path with an upstream on loopback: direct, core, http, claims (the claims API, the work run by the caller), mcp (the session revision) or mcp-stateless (2026-07-28) (http, claims and the mcp paths also measure direct and core in the same run, claims http, and the mcp paths http and a bare MCP server on the same SDK)")
	compareAudit := fs.Bool("compare-audit", false, "also run the workload without audit events and metrics, and report the cost of having them")
	rounds := fs.Int("rounds", 1, "--compare-tracing: rounds of off, on, on, off; the cost is the median of the rounds' (1 to 20). --through mcp or mcp-stateless: rounds of the path and its peer, in alternating order; vs_peer_mcp is the median of the rounds' ratios")
	compareTracing := fs.Bool("compare-tracing", false, "run the --through path (default http) with OpenTelemetry tracing off and on (every span sampled, OTLP/HTTP to a collector on loopback), and report the cost")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file (with --through, of the named path's runs only, every round of it merged into one profile, not of the paths it is held against)")
	memProfile := fs.String("memprofile", "", "with --through: write a profile of the allocations of the named path's run to this file (go tool pprof -sample_index=alloc_space)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if code, ok := checkBenchFlags(e, fs, &cfg, *through); !ok {
		return code
	}
	if *db == "" {
		dir, err := os.MkdirTemp("", "airlock-bench-")
		if err != nil {
			return fail(e, "%v", err)
		}
		defer os.RemoveAll(dir)
		*db = "sqlite:" + filepath.Join(dir, "bench.db")
	}
	if *memProfile != "" && *through == "" {
		return usageError(e, "bench", "--memprofile: needs --through (the allocations of one call path's run)")
	}
	if *cpuProfile != "" && *through == "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(e, "--cpuprofile: %v", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(e, "--cpuprofile: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.Mode == "soak" {
		return benchSoak(e, *db, cfg.Concurrency, *events)
	}
	if err := cfg.Validate(); err != nil {
		return usageError(e, "bench", "%v", err)
	}
	kind, err := store.Kind(*db)
	if err != nil {
		return usageError(e, "bench", "--db: %v", err)
	}
	cfg.Store = kind
	if *compareTracing {
		if *through == "" {
			*through = bench.ThroughHTTP
		}
		return benchCompareTracing(e, *db, cfg, *through, *rounds)
	}
	if *through != "" {
		if *rounds < 1 || *rounds > 20 {
			return usageError(e, "bench", "--rounds must be from 1 to 20, not %d", *rounds)
		}
		if *rounds > 1 && !bench.IsMCP(*through) {
			return usageError(e, "bench", "--rounds: with --through, only mcp and mcp-stateless run rounds (against their peer), not %q", *through)
		}
		return benchThrough(e, *db, cfg, *through, *rounds, *cpuProfile, *memProfile)
	}
	s, err := store.OpenMigrated(e.ctx, *db)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.Close()

	if *compareAudit {
		return benchCompareAudit(e, s, *db, cfg)
	}
	var caller bench.Caller
	var g *guard.Guard
	switch cfg.Impl {
	case "baseline":
		switch d := s.(type) {
		case interface{ DB() *sql.DB }:
			b := &bench.SQLBaseline{DB: d.DB()}
			if err := b.Setup(e.ctx); err != nil {
				return fail(e, "baseline setup: %v", err)
			}
			caller = b
		case interface{ Pool() *pgxpool.Pool }:
			b := &bench.PgBaseline{Pool: d.Pool()}
			if err := b.Setup(e.ctx); err != nil {
				return fail(e, "baseline setup: %v", err)
			}
			caller = b
		default:
			return usageError(e, "bench", "--impl baseline: no baseline for this store")
		}
	default:
		g = guard.New(s, nil)
		caller = &bench.GuardCaller{Guard: g, Tool: bench.Tool()}
	}
	res := bench.Run(e.ctx, caller, cfg)
	if g != nil {
		g.Close() // writes the buffered audit events
		lost := g.AuditDropped()
		res.AuditLost = &lost
		res.OK = res.OK && lost == 0
	}
	if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
		return fail(e, "%v", err)
	}
	if !res.OK {
		return 1
	}
	return 0
}

// benchThrough measures a call path end to end; for the gateway paths it
// first measures a direct call and the core path on fresh keys, so the
// added cost is read from one run.
// ratio is a over b, to two places, or nil when b is nothing.
func ratio(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	r := math.Round(a/b*100) / 100
	return &r
}

func benchThrough(e *env, dsn string, cfg bench.Config, path string, rounds int, cpuProfile, memProfile string) int {
	memRate := runtime.MemProfileRate
	if memProfile != "" {
		// Sample no allocation until the named path runs.
		runtime.MemProfileRate = 0
	}
	th, err := bench.StartThrough(e.ctx, dsn, &bench.ThroughConfig{Sessions: cfg.Concurrency})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer th.Close()
	measure := func(p string) (bench.Result, error) {
		c, err := th.Caller(e.ctx, p)
		if err != nil {
			return bench.Result{}, err
		}
		run := cfg
		if run.KeySpace != "" {
			run.KeySpace += "-" + p
		}
		res := bench.Run(e.ctx, c, run)
		res.Through = p
		return res, nil
	}
	var direct, core bench.Result
	if path == bench.ThroughHTTP || path == bench.ThroughClaims || bench.IsMCP(path) {
		if direct, err = measure(bench.ThroughDirect); err != nil {
			return fail(e, "%v", err)
		}
		if core, err = measure(bench.ThroughCore); err != nil {
			return fail(e, "%v", err)
		}
	}
	var viaHTTP, bare, peer bench.Result
	if path == bench.ThroughClaims {
		// The guarded call over HTTP, whose upstream runs the same work.
		if viaHTTP, err = measure(bench.ThroughHTTP); err != nil {
			return fail(e, "%v", err)
		}
	}
	if bench.IsMCP(path) {
		// The paths it is held against, in the same run.
		if viaHTTP, err = measure(bench.ThroughHTTP); err != nil {
			return fail(e, "%v", err)
		}
		if bare, err = measure(bench.BareFor(path)); err != nil {
			return fail(e, "%v", err)
		}
		if peer, err = measure(bench.PeerFor(path)); err != nil {
			return fail(e, "%v", err)
		}
	}
	// The CPU profile covers each round of the named path, not the
	// paths it is held against: one round's samples (about a hundred in
	// airlock's own code) move more than the share they measure.
	var cpu cpuRounds
	named := measure
	if cpuProfile != "" {
		// Created now, so that a path that cannot be written fails
		// before the run rather than after it.
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fail(e, "--cpuprofile: %v", err)
		}
		defer f.Close()
		cpu.out = f
		named = cpu.profiled(path, measure)
	}
	if memProfile != "" {
		runtime.MemProfileRate = memRate
	}
	res, err := named(path)
	if err != nil {
		return fail(e, "%v", err)
	}
	if memProfile != "" {
		if err := writeAllocs(memProfile); err != nil {
			return fail(e, "--memprofile: %v", err)
		}
	}
	if viaHTTP.Calls > 0 {
		res.HTTPCallsPerS, res.HTTPP50us, res.HTTPCPUusPerCall = viaHTTP.CallsPerS, viaHTTP.P50us, viaHTTP.CPUusPerCall
		res.VsHTTP = ratio(res.CallsPerS, viaHTTP.CallsPerS)
		res.OK = res.OK && viaHTTP.OK
	}
	if bare.Calls > 0 {
		res.BareMCPCallsPerS, res.BareMCPP50us, res.BareMCPCPUusPerCall = bare.CallsPerS, bare.P50us, bare.CPUusPerCall
		res.VsBareMCP = ratio(res.CallsPerS, bare.CallsPerS)
		res.PeerMCPCallsPerS, res.PeerMCPCPUusPerCall = peer.CallsPerS, peer.CPUusPerCall
		res.VsPeerMCP = ratio(res.CallsPerS, peer.CallsPerS)
		res.OK = res.OK && peer.OK
		if rounds > 1 {
			if err := peerRounds(&res, rounds, path, named); err != nil {
				return fail(e, "%v", err)
			}
		}
	}
	if core.Calls > 0 {
		res.DirectP50us, res.CoreP50us = direct.P50us, core.P50us
		added := res.P50us - core.P50us
		res.AddedP50us = &added
		res.OK = res.OK && core.OK // direct is the unprotected call; its repeats execute again
	}
	th.Close()
	if cpuProfile != "" {
		if err := cpu.write(); err != nil {
			return fail(e, "--cpuprofile: %v", err)
		}
	}
	lost := th.AuditLost()
	res.AuditLost = &lost
	res.OK = res.OK && lost == 0
	if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
		return fail(e, "%v", err)
	}
	if !res.OK {
		return 1
	}
	return 0
}

// peerRounds measures the path and its peer rounds-1 more times, in
// alternating order (round 0, the run above, was peer then path), so that
// neither side always meets the database after the other has grown it, nor
// always the machine's quieter moments: on a small shared machine one
// round's ratio moves more than the difference it measures. The path's and
// the peer's calls/s become the medians of their rounds', vs_peer_mcp the
// median of the rounds' ratios.
func peerRounds(res *bench.Result, rounds int, path string, measure func(string) (bench.Result, error)) error {
	mine, peers := []float64{res.CallsPerS}, []float64{res.PeerMCPCallsPerS}
	var ratios []float64
	if res.VsPeerMCP != nil { // nil when the peer made no calls
		ratios = append(ratios, *res.VsPeerMCP)
	}
	for round := 1; round < rounds; round++ {
		order := []string{path, bench.PeerFor(path)}
		if round%2 == 0 {
			order[0], order[1] = order[1], order[0]
		}
		var got [2]bench.Result
		for i, p := range order {
			r, err := measure(p)
			if err != nil {
				return err
			}
			res.OK = res.OK && r.OK
			got[i] = r
		}
		a, peer := got[0], got[1]
		if order[0] != path {
			a, peer = peer, a
		}
		mine, peers = append(mine, a.CallsPerS), append(peers, peer.CallsPerS)
		if r := ratio(a.CallsPerS, peer.CallsPerS); r != nil {
			ratios = append(ratios, *r)
		}
	}
	res.CallsPerS, res.PeerMCPCallsPerS = math.Round(median(mine)*10)/10, math.Round(median(peers)*10)/10
	if len(ratios) > 0 {
		m := math.Round(median(ratios)*100) / 100
		res.VsPeerMCP, res.VsPeerMCPRounds = &m, ratios
	}
	return nil
}

// median of xs (the mean of the middle two for an even count); 0 for none.
// Callers round it once, to the places of what it is.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return m
}

// benchCompareAudit runs the workload twice in one process: without the
// audit events of claims and completions and without metrics, then with
// both (as a server runs), on fresh keys each time.
func benchCompareAudit(e *env, on airlock.Store, dsn string, cfg bench.Config) int {
	off, err := store.OpenWith(e.ctx, dsn, store.Options{NoAudit: true})
	if err != nil {
		return fail(e, "%v", err)
	}
	defer off.Close()
	space := cfg.KeySpace
	if space == "" {
		space = fmt.Sprintf("cmp-%d", time.Now().UnixNano())
	}
	run := func(s airlock.Store, observer guard.Observer, suffix string) bench.Result {
		g := guard.New(s, &guard.Config{Observer: observer})
		defer g.Close()
		c := cfg
		c.KeySpace = space + suffix
		return bench.Run(e.ctx, &bench.GuardCaller{Guard: g, Tool: bench.Tool()}, c)
	}
	met, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		return fail(e, "%v", err)
	}
	// off, on, on, off: each side sees the database at the same sizes.
	off1 := run(off, nil, "-off1")
	onRes := run(on, met, "-on1")
	on2 := run(on, met, "-on2")
	off2 := run(off, nil, "-off2")
	offRes := off1
	offRes.CallsPerS = math.Round((off1.CallsPerS+off2.CallsPerS)/2*10) / 10
	offRes.OK = off1.OK && off2.OK
	onRes.CallsPerS = math.Round((onRes.CallsPerS+on2.CallsPerS)/2*10) / 10
	onRes.OK = onRes.OK && on2.OK
	onRes.AuditOffCallsPerS = offRes.CallsPerS
	if offRes.CallsPerS > 0 {
		cost := math.Round((1-onRes.CallsPerS/offRes.CallsPerS)*1000) / 10
		onRes.AuditCostPct = &cost
	}
	onRes.OK = onRes.OK && offRes.OK
	if err := json.NewEncoder(e.stdout).Encode(onRes); err != nil {
		return fail(e, "%v", err)
	}
	if !onRes.OK {
		return 1
	}
	return 0
}

// benchCompareTracing measures one call path with tracing off and on, in
// the order off, on, on, off on fresh keys, so each side sees the
// database at the same sizes.
func benchCompareTracing(e *env, dsn string, cfg bench.Config, path string, rounds int) int {
	if rounds < 1 || rounds > 20 {
		return usageError(e, "bench", "--rounds must be from 1 to 20, not %d", rounds)
	}
	switch path {
	case bench.ThroughCore, bench.ThroughHTTP, bench.ThroughMCP, bench.ThroughMCPStateless:
	default:
		return usageError(e, "bench", "--compare-tracing measures --through core, http or mcp, not %q", path)
	}
	space := cfg.KeySpace
	if space == "" {
		space = fmt.Sprintf("trace-%d", time.Now().UnixNano())
	}
	var spans int64
	run := func(traced bool, suffix string) (bench.Result, error) {
		var traces *bench.Traces
		var tcfg bench.ThroughConfig
		if traced {
			var err error
			if traces, err = bench.StartTraces(e.ctx); err != nil {
				return bench.Result{}, err
			}
			tcfg.Tracer = traces.Tracer
		}
		th, err := bench.StartThrough(e.ctx, dsn, &tcfg)
		if err != nil {
			return bench.Result{}, err
		}
		c, err := th.Caller(e.ctx, path)
		if err != nil {
			th.Close()
			return bench.Result{}, err
		}
		run := cfg
		run.KeySpace = space + suffix
		res := bench.Run(e.ctx, c, run)
		res.Through = path
		th.Close()
		lost := th.AuditLost()
		res.AuditLost = &lost
		res.OK = res.OK && lost == 0
		if traces != nil {
			ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
			defer cancel()
			n, _, _, err := traces.Close(ctx)
			if err != nil {
				return res, fmt.Errorf("exporting spans: %w", err)
			}
			spans += n
		}
		return res, nil
	}
	// Rounds of off, on, on, off; the cost is the median of the rounds'
	// costs, since one round on a store bound by its commits' fsync can
	// vary more from leg to leg than tracing costs.
	var on bench.Result
	var costs []float64
	var tracedCalls int
	ok := true
	var onSum, offSum float64
	for round := range rounds {
		var results [4]bench.Result
		for i, traced := range []bool{false, true, true, false} {
			r, err := run(traced, fmt.Sprintf("-%d-%d", round, i))
			if err != nil {
				return fail(e, "%v", err)
			}
			results[i] = r
			ok = ok && r.OK
		}
		if round == 0 {
			on = results[1]
		}
		tracedCalls += results[1].Calls + results[2].Calls
		onR := (results[1].CallsPerS + results[2].CallsPerS) / 2
		offR := (results[0].CallsPerS + results[3].CallsPerS) / 2
		onSum, offSum = onSum+onR, offSum+offR
		if offR > 0 {
			costs = append(costs, math.Round((1-onR/offR)*1000)/10)
		}
	}
	on.CallsPerS = math.Round(onSum/float64(rounds)*10) / 10
	on.TracingOffCallsPerS = math.Round(offSum/float64(rounds)*10) / 10
	on.SpansExported = &spans
	on.OK = ok
	if len(costs) > 0 {
		on.TracingCostRounds = costs
		cost := math.Round(median(costs)*10) / 10
		on.TracingCostPct = &cost
		// The bound: tracing costs under 10 % of calls/s.
		on.OK = on.OK && cost < 10
	}
	// Every call made spans (the execute_tool span and the guard's).
	on.OK = on.OK && spans >= int64(tracedCalls)
	if err := json.NewEncoder(e.stdout).Encode(on); err != nil {
		return fail(e, "%v", err)
	}
	if !on.OK {
		return 1
	}
	return 0
}

// benchSoak fills the database and times what an operator reads and runs
// on it (bench.Soak); one JSON line, exit 1 when a bound is not met.
func benchSoak(e *env, dsn string, concurrency, events int) int {
	if events < 1000 {
		return usageError(e, "bench", "--events must be at least 1000, not %d", events)
	}
	kind, err := store.Kind(dsn)
	if err != nil {
		return fail(e, "%v", err)
	}
	s, err := store.OpenMigrated(e.ctx, dsn)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.Close()
	res, err := bench.Soak(e.ctx, s, bench.SoakConfig{Store: kind, Events: events, Concurrency: concurrency})
	if err != nil {
		return fail(e, "soak: %v", err)
	}
	if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
		return fail(e, "%v", err)
	}
	if !res.OK {
		return 1
	}
	return 0
}

// writeAllocs writes the allocations sampled so far to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuRounds profiles the rounds of one path and merges them into one
// profile.
type cpuRounds struct {
	out    *os.File
	buf    bytes.Buffer
	rounds []*profile.Profile
}

// profiled is measure with each run of path profiled.
func (c *cpuRounds) profiled(path string, measure func(string) (bench.Result, error)) func(string) (bench.Result, error) {
	return func(p string) (bench.Result, error) {
		if p != path {
			return measure(p)
		}
		if err := c.start(); err != nil {
			return bench.Result{}, fmt.Errorf("--cpuprofile: %w", err)
		}
		res, err := measure(p)
		if perr := c.stop(); err == nil && perr != nil {
			err = fmt.Errorf("--cpuprofile: %w", perr)
		}
		return res, err
	}
}

func (c *cpuRounds) start() error {
	c.buf.Reset()
	return pprof.StartCPUProfile(&c.buf)
}

func (c *cpuRounds) stop() error {
	pprof.StopCPUProfile()
	p, err := profile.Parse(&c.buf)
	if err != nil {
		return err
	}
	c.rounds = append(c.rounds, p)
	return nil
}

// write writes the rounds' profiles, merged into one.
func (c *cpuRounds) write() error {
	merged, err := profile.Merge(c.rounds)
	if err != nil {
		return err
	}
	if err := merged.Write(c.out); err != nil {
		return err
	}
	return c.out.Close()
}

// benchPaths are the values of --through.
var benchPaths = []string{bench.ThroughDirect, bench.ThroughCore, bench.ThroughHTTP, bench.ThroughClaims, bench.ThroughMCP,
	bench.ThroughMCPStateless, bench.ThroughBareMCP, bench.ThroughBareMCPStateless, bench.ThroughPeerMCP, bench.ThroughPeerMCPStateless}

// checkBenchFlags refuses, before anything runs, counts that are not
// positive (bench.Config reads 0 as its default; given on the command
// line it is a mistake) and a --through that names no path (exit 2).
func checkBenchFlags(e *env, fs *flag.FlagSet, cfg *bench.Config, through string) (code int, ok bool) {
	code, ok = 0, true
	fs.Visit(func(f *flag.Flag) {
		if !ok {
			return
		}
		switch f.Name {
		case "calls", "concurrency", "events":
			if n, _ := strconv.Atoi(f.Value.String()); n <= 0 {
				code, ok = usageError(e, "bench", "--%s %s: want a positive number", f.Name, f.Value), false
			}
		case "through":
			if !slices.Contains(benchPaths, through) {
				code, ok = usageError(e, "bench", "--through %q: want one of %s", through, strings.Join(benchPaths, ", ")), false
			}
		}
	})
	return code, ok
}
