package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// Bench measures the guarded call on a driver: new keys and repeats, with
// as many callers as b.SetParallelism and GOMAXPROCS give (16 by default here).
func Bench(b *testing.B, newStore NewStore) {
	tool := Tool("bench_approve", "forever")
	ok := func(context.Context, string) airlock.Outcome {
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"ok":true}`)}
	}
	b.Run("NewCalls", func(b *testing.B) {
		g := guard.New(newStore(b), nil)
		defer g.Close()
		prefix := Key("new")
		var n atomic.Int64
		b.SetParallelism(8) // 8 × GOMAXPROCS(2) = 16 callers
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				args := fmt.Appendf(nil, `{"record_id":"%s-%d"}`, prefix, n.Add(1))
				if _, err := g.Do(context.Background(), &airlock.Call{Tool: tool, Args: mustArgs(args)}, ok); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("Repeats", func(b *testing.B) {
		g := guard.New(newStore(b), nil)
		defer g.Close()
		prefix := Key("rep")
		const keys = 1000
		for i := range keys {
			args := fmt.Appendf(nil, `{"record_id":"%s-%d"}`, prefix, i)
			if _, err := g.Do(context.Background(), &airlock.Call{Tool: tool, Args: mustArgs(args)}, ok); err != nil {
				b.Fatal(err)
			}
		}
		var n atomic.Int64
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				args := fmt.Appendf(nil, `{"record_id":"%s-%d"}`, prefix, n.Add(1)%keys)
				ans, err := g.Do(context.Background(), &airlock.Call{Tool: tool, Args: mustArgs(args)}, ok)
				if err != nil || !ans.Repeat {
					b.Errorf("repeat: %+v, %v", ans, err)
					return
				}
			}
		})
	})
}

// mustArgs parses arguments as the gateway does, so that a benchmark of
// the guard includes the parse it would otherwise skip.
func mustArgs(raw []byte) *airlock.Args {
	a, err := airlock.NewArgs(raw)
	if err != nil {
		panic(err)
	}
	return a
}
