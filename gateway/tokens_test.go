package gateway_test

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/gateway"
	"github.com/airlockhq/airlock/manifest"
)

// TestTokensWithOneSecretAreRefused: two variables holding one token would
// make the first entry win silently; they are refused naming both.
func TestTokensWithOneSecretAreRefused(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_ALICE", "same-secret")
	t.Setenv("AIRLOCK_TEST_ROOT", "same-secret")
	_, err := gateway.TokensFromManifest([]manifest.TokenSpec{
		{Name: "alice", Role: "approver", Env: "AIRLOCK_TEST_ALICE"},
		{Name: "root", Role: "admin", Env: "AIRLOCK_TEST_ROOT"},
	})
	if err == nil || !strings.Contains(err.Error(), "tokens alice and root have one secret") {
		t.Fatalf("got %v, want a refusal naming alice and root", err)
	}
}
