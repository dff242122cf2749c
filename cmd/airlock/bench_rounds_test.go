package main

import (
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/airlockhq/airlock/internal/bench"
)

// Rounds alternate which side runs first (round 0, the run before, was the
// peer then the path), and each round's ratio is the path's rate over the
// peer's whichever ran first; the rates reported are the medians.
func TestPeerRoundsAlternateAndPairTheSides(t *testing.T) {
	t.Parallel()
	path, peer := bench.ThroughMCP, bench.PeerFor(bench.ThroughMCP)
	rates := map[string][]float64{path: {300, 500, 400}, peer: {100, 250, 200}}
	var order []string
	measure := func(p string) (bench.Result, error) {
		order = append(order, p)
		r := rates[p][0]
		rates[p] = rates[p][1:]
		return bench.Result{OK: true, CallsPerS: r}, nil
	}
	vs := 2.0
	res := bench.Result{OK: true, CallsPerS: 200, PeerMCPCallsPerS: 100, VsPeerMCP: &vs}
	if err := peerRounds(&res, 4, path, measure); err != nil {
		t.Fatal(err)
	}
	if want := []string{path, peer, peer, path, path, peer}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if want := []float64{2, 3, 2, 2}; !slices.Equal(res.VsPeerMCPRounds, want) {
		t.Fatalf("ratios %v, want %v (the path's rate over the peer's, each round)", res.VsPeerMCPRounds, want)
	}
	if *res.VsPeerMCP != 2 || res.CallsPerS != 350 || res.PeerMCPCallsPerS != 150 {
		t.Fatalf("medians: vs %v, calls/s %v, peer %v", *res.VsPeerMCP, res.CallsPerS, res.PeerMCPCallsPerS)
	}
}

// --cpuprofile covers every round of the named path and none of its
// peer's: the profiler is on exactly while the path runs, and the rounds'
// profiles are merged into one file.
func TestCPUProfileCoversEachRoundOfThePath(t *testing.T) {
	// Not parallel: the CPU profiler is one per process.
	path, peer := bench.ThroughMCP, bench.PeerFor(bench.ThroughMCP)
	f, err := os.Create(filepath.Join(t.TempDir(), "cpu.prof"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cpuRounds{out: f}
	profiling := map[string][]bool{}
	measure := c.profiled(path, func(p string) (bench.Result, error) {
		// StartCPUProfile fails while a profile is being written.
		on := pprof.StartCPUProfile(io.Discard) != nil
		if !on {
			pprof.StopCPUProfile()
		}
		profiling[p] = append(profiling[p], on)
		return bench.Result{OK: true, CallsPerS: 1}, nil
	})
	vs := 1.0
	res := bench.Result{OK: true, CallsPerS: 1, PeerMCPCallsPerS: 1, VsPeerMCP: &vs}
	if _, err := measure(path); err != nil {
		t.Fatal(err)
	}
	if err := peerRounds(&res, 3, path, measure); err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, true, true}; !slices.Equal(profiling[path], want) {
		t.Fatalf("profiling while the path ran: %v, want %v", profiling[path], want)
	}
	if want := []bool{false, false}; !slices.Equal(profiling[peer], want) {
		t.Fatalf("profiling while the peer ran: %v, want %v", profiling[peer], want)
	}
	if err := c.write(); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	merged, err := profile.Parse(r)
	if err != nil {
		t.Fatalf("the merged profile does not parse: %v", err)
	}
	var sum int64
	for _, p := range c.rounds {
		sum += p.DurationNanos
	}
	if len(c.rounds) != 3 || merged.DurationNanos != sum {
		t.Fatalf("%d rounds profiled, merged duration %d, want 3 rounds and their sum %d", len(c.rounds), merged.DurationNanos, sum)
	}
}
