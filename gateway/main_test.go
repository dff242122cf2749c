package gateway_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine the gateway starts (sessions, their idle timers, tasks,
// pass-through relays) ends with the test that started it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
