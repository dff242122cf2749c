package guard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/store/sqlite"
)

// A repeated call gets the first result, marked as a repeat; the side
// effect runs once.
func ExampleGuard_Do() {
	dir, _ := os.MkdirTemp("", "airlock-example")
	defer os.RemoveAll(dir)
	s, _ := sqlite.Open(filepath.Join(dir, "airlock.db"), nil)
	defer s.Close()
	_ = s.Migrate(context.Background())
	g := guard.New(s, nil)
	defer g.Close()

	m, _ := withdrawals.Manifest()
	approvals := 0
	approve := func(ctx context.Context, key string) airlock.Outcome {
		approvals++
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"approved":true}`)}
	}
	call := &airlock.Call{Tool: m.Tool("add_note"), Args: airlock.MustArgs(`{"record_id":"WD-1","text":"checked"}`)}
	for range 3 {
		ans, err := g.Do(context.Background(), call, approve)
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
