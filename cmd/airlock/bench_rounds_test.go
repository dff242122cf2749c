package main

import (
	"slices"
	"testing"

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
