package guard_test

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock/guard"
)

// A claim's secret has one shape, as the guard makes it: anything else in
// a handle is made up (400), not a secret that fails to match (409).
func TestValidClaimSecret(t *testing.T) {
	t.Parallel()
	good := "claim-" + strings.Repeat("0a", 16)
	for s, want := range map[string]bool{
		good:                                true,
		good + "0":                          false, // longer
		good[:len(good)-1]:                  false, // shorter
		"claim-" + strings.Repeat("0A", 16): false, // upper case: not as made
		"claim-" + strings.Repeat("zz", 16): false,
		strings.TrimPrefix(good, "claim-"):  false,
		"":                                  false,
	} {
		if got := guard.ValidClaimSecret(s); got != want {
			t.Errorf("ValidClaimSecret(%q) = %v, want %v", s, got, want)
		}
	}
}
