package guard_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the guard starts (the lease keeper, the audit buffer,
// waiters, re-drives) ends with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
