package plan_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the plan service starts ends with its test.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
