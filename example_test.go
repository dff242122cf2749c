package airlock_test

import (
	"fmt"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
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
