package airlock_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/store/sqlite"
)

// The key of an approval is derived from the withdrawal's id and the
// business day; the model never sees it.
func ExampleDeriveKey() {
	m, _ := withdrawals.Manifest()
	args, _ := airlock.ParseArgs([]byte(`{"record_id": " wd-24817 "}`))
	at, _ := time.Parse(time.RFC3339, "2026-09-19T10:00:00-04:00") // a Saturday
	d, err := airlock.DeriveKey(airlock.KeyInput{
		Tool: m.Tool("approve_withdrawal"), Calendar: &m.Calendar, Args: args, At: at,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(d.Parts.Fields[0].Value)
	fmt.Println(d.Parts.WindowID)
	fmt.Println(len(d.Key))
	// Output:
	// WD-24817
	// business_day:2026-09-21
	// 32
}

// A repeated call gets the first result, marked as a repeat; the side
// effect runs once.
func ExampleGuard_Do() {
	dir, _ := os.MkdirTemp("", "airlock-example")
	defer os.RemoveAll(dir)
	s, _ := sqlite.Open(filepath.Join(dir, "airlock.db"), nil)
	defer s.Close()
	_ = s.Migrate(context.Background())
	guard := airlock.NewGuard(s, nil)
	defer guard.Close()

	m, _ := withdrawals.Manifest()
	approvals := 0
	approve := func(ctx context.Context, key string) airlock.Outcome {
		approvals++
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"approved":true}`)}
	}
	call := &airlock.Call{Tool: m.Tool("add_note"), Args: airlock.MustArgs(`{"record_id":"WD-1","text":"checked"}`)}
	for range 3 {
		ans, err := guard.Do(context.Background(), call, approve)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(ans.Status, ans.Repeat, string(ans.Result))
	}
	fmt.Println("approvals:", approvals)
	// Output:
	// succeeded false {"approved":true}
	// succeeded true {"approved":true}
	// succeeded true {"approved":true}
	// approvals: 1
}
