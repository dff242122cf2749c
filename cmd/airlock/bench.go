package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"runtime/pprof"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/bench"
	"github.com/airlockhq/airlock/store"
)

func cmdBench(e *env, args []string) int {
	fs := newFlags(e, "bench")
	db := dbFlag(fs)
	var cfg bench.Config
	fs.StringVar(&cfg.Mode, "mode", "new", "new | repeat | race | mixed")
	fs.IntVar(&cfg.Calls, "calls", 10000, "calls to measure")
	fs.IntVar(&cfg.Concurrency, "concurrency", 16, "callers at once")
	fs.Float64Var(&cfg.DupRate, "dup-rate", 0, "mixed: the share of calls that repeat an earlier key (default 0.5)")
	fs.StringVar(&cfg.KeySpace, "key-space", "", "a name that makes keys deterministic, so processes with the same flags contend for the same keys")
	fs.StringVar(&cfg.Impl, "impl", "airlock", "airlock, or baseline: a plain claim-insert / update-result loop over the same driver")
	fs.DurationVar(&cfg.Work, "work", 0, "how long each side effect takes (default 0; race: 5ms)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *cpuProfile != "" {
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
	if err := cfg.Validate(); err != nil {
		return fail(e, "%v", err)
	}
	kind, err := store.Kind(*db)
	if err != nil {
		return fail(e, "%v", err)
	}
	cfg.Store = kind
	s, err := store.OpenMigrated(e.ctx, *db)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.Close()

	var caller bench.Caller
	if cfg.Impl == "baseline" {
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
		}
	} else {
		g := airlock.NewGuard(s, nil)
		defer g.Close()
		caller = &bench.GuardCaller{Guard: g, Tool: bench.BenchTool()}
	}
	res := bench.Run(e.ctx, caller, cfg)
	if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
		return fail(e, "%v", err)
	}
	if !res.OK {
		return 1
	}
	return 0
}
