package airlock_test

import (
	"testing"
	"time"

	"github.com/airlockhq/airlock"
)

func BenchmarkDeriveKey(b *testing.B) {
	m := example(b)
	tool := m.Tool("approve_withdrawal")
	at := time.Date(2026, 9, 18, 16, 0, 0, 0, time.UTC)
	raw := []byte(`{"record_id":" wd-24817 ","note":"checked the ledger"}`)
	b.ReportAllocs()
	for b.Loop() {
		args, err := airlock.ParseArgs(raw)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &m.Calendar, Args: args, At: at}); err != nil {
			b.Fatal(err)
		}
	}
}
