// Package bench runs the workloads of `airlock bench` (docs/configuration.md, "The command line"): new
// calls, repeats, races on one key and a mix, through the airlock guard or
// through a plain claim-insert / update-result baseline over the same
// database, and reports one JSON line.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// Modes.
const (
	ModeNew    = "new"    // every call a new key
	ModeRepeat = "repeat" // calls on keys already completed
	ModeRace   = "race"   // Concurrency callers at once on each key
	ModeMixed  = "mixed"  // new keys, with DupRate of calls repeating an earlier key
)

// Caller is one implementation under test: it runs fn at most once per key
// and returns the first result; executed says whether this call ran fn.
type Caller interface {
	Call(ctx context.Context, key string, fn func() json.RawMessage) (result json.RawMessage, executed bool, err error)
}

// Config describes one run.
type Config struct {
	Impl        string  // "airlock" or "baseline"
	Store       string  // "sqlite" or "postgres"
	Mode        string  // new | repeat | race | mixed
	Calls       int     // calls measured; default 10000
	Concurrency int     // callers at once; default 16
	DupRate     float64 // mixed: the share of calls repeating an earlier key; default 0.5
	// KeySpace makes keys deterministic, so that processes run with the
	// same flags contend for the same keys. Default: a random space.
	KeySpace string
	// Work is how long each side effect takes. Default 0; race: 5ms, so
	// that the callers really overlap.
	Work time.Duration
}

// Result is the JSON line.
type Result struct {
	Impl                string  `json:"impl"`
	Store               string  `json:"store"`
	Mode                string  `json:"mode"`
	Calls               int     `json:"calls"`
	Concurrency         int     `json:"concurrency"`
	CallsPerS           float64 `json:"calls_per_s"`
	P50us               int64   `json:"p50_us"`
	P99us               int64   `json:"p99_us"`
	ExecutionsPerKeyMax int     `json:"executions_per_key_max"`
	Executions          int64   `json:"executions"`
	Keys                int     `json:"keys"`
	// WakeP50us and WakeP99us (race): how long after the winner's side
	// effect returned the losers got its result, for winners in this process.
	WakeP50us  int64   `json:"wake_p50_us,omitempty"`
	WakeP99us  int64   `json:"wake_p99_us,omitempty"`
	PeakRSSMiB float64 `json:"peak_rss_mib,omitempty"`
	// CPUusPerCall is the CPU time (user and system) of the whole bench
	// process — callers, airlock, upstream, an embedded database — per
	// measured call.
	CPUusPerCall int64 `json:"cpu_us_per_call,omitempty"`
	// Through is the call path (--through); with http or mcp the same run
	// also measures a direct call to the upstream and the core path, and
	// AddedP50us is this path's median minus the core's.
	Through     string `json:"through,omitempty"`
	DirectP50us int64  `json:"direct_p50_us,omitempty"`
	CoreP50us   int64  `json:"core_p50_us,omitempty"`
	AddedP50us  *int64 `json:"added_p50_us,omitempty"`
	// With --through mcp the same run also measures the HTTP API path and
	// a bare MCP server on the same SDK forwarding to the same upstream
	// with no guard; the ratios are this path's calls/s over theirs.
	HTTPCallsPerS       float64  `json:"http_calls_per_s,omitempty"`
	HTTPP50us           int64    `json:"http_p50_us,omitempty"`
	BareMCPCallsPerS    float64  `json:"bare_mcp_calls_per_s,omitempty"`
	BareMCPP50us        int64    `json:"bare_mcp_p50_us,omitempty"`
	HTTPCPUusPerCall    int64    `json:"http_cpu_us_per_call,omitempty"`
	BareMCPCPUusPerCall int64    `json:"bare_mcp_cpu_us_per_call,omitempty"`
	VsHTTP              *float64 `json:"vs_http,omitempty"`
	VsBareMCP           *float64 `json:"vs_bare_mcp,omitempty"`
	// And the peer a team would write by hand: a bare MCP server on the
	// same SDK whose tool runs the baseline's claim/complete on the same
	// database (PeerMCP).
	PeerMCPCallsPerS    float64  `json:"peer_mcp_calls_per_s,omitempty"`
	PeerMCPCPUusPerCall int64    `json:"peer_mcp_cpu_us_per_call,omitempty"`
	VsPeerMCP           *float64 `json:"vs_peer_mcp,omitempty"`
	// VsPeerMCPRounds: each round's ratio, when --rounds asked for more
	// than one (VsPeerMCP is their median; CallsPerS and PeerMCPCallsPerS
	// the medians of the two sides' rounds; latencies, CPU and the other
	// paths' figures stay the first round's).
	VsPeerMCPRounds []float64 `json:"vs_peer_mcp_rounds,omitempty"`
	// With --compare-audit: the same workload without the audit events of
	// claims and completions and without metrics, and the cost in percent.
	AuditOffCallsPerS float64  `json:"audit_off_calls_per_s,omitempty"`
	AuditCostPct      *float64 `json:"audit_cost_pct,omitempty"`
	// With --compare-tracing: the same path with tracing off, the cost of
	// tracing on in percent, and the spans exported while on.
	TracingOffCallsPerS float64  `json:"tracing_off_calls_per_s,omitempty"`
	TracingCostPct      *float64 `json:"tracing_cost_pct,omitempty"`
	// TracingCostRounds: each round's cost, when --rounds asked for more
	// than one (TracingCostPct is their median).
	TracingCostRounds []float64 `json:"tracing_cost_rounds,omitempty"`
	SpansExported     *int64    `json:"spans_exported,omitempty"`
	// AuditLost (airlock): audit events given up because the store did not
	// take them in time; OK requires none.
	AuditLost *int64 `json:"audit_lost,omitempty"`
	Errors    int64  `json:"errors"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
}

// Validate checks the configuration, naming the flag at fault.
func (c *Config) Validate() error {
	switch c.Mode {
	case ModeNew, ModeRepeat, ModeRace, ModeMixed:
	default:
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, "mode", "--mode %q: want new, repeat, race or mixed", c.Mode)
	}
	switch c.Impl {
	case "airlock", "baseline":
	default:
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, "impl", "--impl %q: want airlock or baseline", c.Impl)
	}
	if c.Calls < 0 || c.Concurrency < 0 {
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, "calls", "--calls and --concurrency must be positive")
	}
	if c.DupRate < 0 || c.DupRate > 1 {
		return airlock.FieldErrorf(airlock.CodeInvalidArgument, "dup-rate", "--dup-rate %v: want a number from 0 to 1", c.DupRate)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Calls == 0 {
		c.Calls = 10000
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Mode == ModeMixed && c.DupRate == 0 {
		c.DupRate = 0.5
	}
	if c.Mode == ModeRace && c.Work == 0 {
		c.Work = 5 * time.Millisecond
	}
	if c.KeySpace == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		c.KeySpace = hex.EncodeToString(b[:])
	}
}

// runner counts executions per key and remembers when each winner's side
// effect finished, for the race mode's wake-up latency.
type runner struct {
	cfg      Config
	caller   Caller
	execs    []atomic.Int32 // by key index; compact, so a million keys cost 4 MB
	finished []atomic.Int64 // by key index: unix nanos when the side effect returned
	total    atomic.Int64
	errors   atomic.Int64
	firstErr atomic.Value
	cpu      time.Duration // the process's CPU time over the last pool
}

func (r *runner) call(ctx context.Context, idx int) (time.Duration, bool) {
	start := time.Now()
	_, executed, err := r.caller.Call(ctx, Key(r.cfg.KeySpace, idx), func() json.RawMessage {
		if r.cfg.Work > 0 {
			time.Sleep(r.cfg.Work)
		}
		r.execs[idx].Add(1)
		r.total.Add(1)
		r.finished[idx].Store(time.Now().UnixNano())
		return json.RawMessage(`{"approved":true}`)
	})
	if err != nil {
		if r.errors.Add(1) == 1 {
			r.firstErr.Store(err.Error())
		}
	}
	return time.Since(start), executed
}

// Key returns the i-th key of a key space.
func Key(space string, i int) string { return fmt.Sprintf("%s-%d", space, i) }

// Run runs the workload and reports.
func Run(ctx context.Context, caller Caller, cfg Config) Result {
	cfg.defaults()
	r := &runner{cfg: cfg, caller: caller}
	res := Result{Impl: cfg.Impl, Store: cfg.Store, Mode: cfg.Mode, Calls: cfg.Calls, Concurrency: cfg.Concurrency}

	keys := cfg.Calls
	if cfg.Mode == ModeRepeat {
		keys = min(cfg.Calls, 1000)
	}
	if cfg.Mode == ModeRace {
		keys = max(1, cfg.Calls/cfg.Concurrency)
	}
	r.execs = make([]atomic.Int32, keys)
	r.finished = make([]atomic.Int64, keys)
	res.Keys = keys

	var lat []time.Duration
	var wake []time.Duration
	var elapsed time.Duration
	switch cfg.Mode {
	case ModeNew:
		lat, elapsed = r.pool(ctx, cfg.Calls, func(i int) int { return i })
	case ModeRepeat:
		// Complete the keys first, unmeasured.
		r.pool(ctx, keys, func(i int) int { return i })
		lat, elapsed = r.pool(ctx, cfg.Calls, func(i int) int { return i % keys })
	case ModeMixed:
		var next atomic.Int64
		lat, elapsed = r.pool(ctx, cfg.Calls, func(int) int {
			n := next.Load()
			if n > 0 && mrand.Float64() < cfg.DupRate {
				return int(mrand.Int64N(n))
			}
			return int(next.Add(1) - 1)
		})
		res.Keys = int(next.Load())
	case ModeRace:
		res.Calls = keys * cfg.Concurrency
		lat, wake, elapsed = r.race(ctx, keys)
	}

	res.CallsPerS = math.Round(float64(len(lat))/elapsed.Seconds()*10) / 10
	res.P50us, res.P99us = pct(lat, 0.50), pct(lat, 0.99)
	if len(wake) > 0 {
		res.WakeP50us, res.WakeP99us = pct(wake, 0.50), pct(wake, 0.99)
	}
	for i := range r.execs {
		res.ExecutionsPerKeyMax = max(res.ExecutionsPerKeyMax, int(r.execs[i].Load()))
	}
	res.Executions = r.total.Load()
	res.Errors = r.errors.Load()
	res.PeakRSSMiB = peakRSSMiB()
	if r.cpu > 0 && len(lat) > 0 && cfg.Mode != ModeRace {
		res.CPUusPerCall = r.cpu.Microseconds() / int64(len(lat))
	}
	res.OK = res.Errors == 0 && res.ExecutionsPerKeyMax <= 1
	if e, _ := r.firstErr.Load().(string); e != "" {
		res.Error = e
	}
	return res
}

// pool makes n calls from Concurrency workers; keyOf gives the i-th call's key.
func (r *runner) pool(ctx context.Context, n int, keyOf func(int) int) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	cpu0 := processCPU()
	defer func() { r.cpu = processCPU() - cpu0 }()
	start := time.Now()
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				lat[i], _ = r.call(ctx, keyOf(i))
			}
		}()
	}
	wg.Wait()
	return lat, time.Since(start)
}

// race sends Concurrency callers at each key at once, one key after another.
func (r *runner) race(ctx context.Context, keys int) (lat, wake []time.Duration, elapsed time.Duration) {
	c := r.cfg.Concurrency
	lat = make([]time.Duration, 0, keys*c)
	var mu sync.Mutex
	start := time.Now()
	for k := 0; k < keys && ctx.Err() == nil; k++ {
		gate := make(chan struct{})
		var wg sync.WaitGroup
		done := make([]time.Time, c)
		executed := make([]bool, c)
		for j := range c {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				d, ex := r.call(ctx, k)
				done[j], executed[j] = time.Now(), ex
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}()
		}
		close(gate)
		wg.Wait()
		if fin := r.finished[k].Load(); fin != 0 {
			for j := range c {
				if !executed[j] {
					wake = append(wake, max(0, done[j].Sub(time.Unix(0, fin))))
				}
			}
		}
	}
	return lat, wake, time.Since(start)
}

func pct(d []time.Duration, p float64) int64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))].Microseconds()
}

// GuardCaller runs calls through an airlock guard with a bench tool whose
// natural key is record_id, in a forever window.
type GuardCaller struct {
	Guard *guard.Guard
	Tool  *airlock.Tool
}

// Tool is the tool the benchmark calls.
func Tool() *airlock.Tool {
	w := airlock.Window{Kind: airlock.WindowForever}
	return &airlock.Tool{
		Name: "bench_approve", Kind: airlock.KindWrite,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{"record_id": map[string]any{"type": "string"}}},
		NaturalKey:  []airlock.KeyField{{Field: "record_id"}},
		Window:      &w,
		OnMismatch:  airlock.MismatchReplay,
		Answers:     airlock.Answers{Undo: "bench", Approver: "bench", OnRepeat: "bench"},
	}
}

// Call implements Caller.
func (g *GuardCaller) Call(ctx context.Context, key string, fn func() json.RawMessage) (json.RawMessage, bool, error) {
	executed := false
	// The arguments as a client sends them, without marshalling a map, so
	// that the harness measures airlock (--key-space may hold any text, so
	// the key is still quoted as JSON).
	quoted, _ := json.Marshal(key)
	args, err := airlock.NewArgs([]byte(`{"record_id":` + string(quoted) + `}`))
	if err != nil {
		return nil, false, err
	}
	ans, err := g.Guard.Do(ctx, &airlock.Call{Tool: g.Tool, Args: args}, func(context.Context, string) airlock.Outcome {
		executed = true
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: fn()}
	})
	if err != nil {
		return nil, false, err
	}
	if ans.Status != airlock.StatusSucceeded {
		return nil, executed, fmt.Errorf("status %s: %s", ans.Status, ans.Message)
	}
	return ans.Result, executed, nil
}
