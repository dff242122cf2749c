package gateway

import (
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
)

// TestSchemaNamesAnOutOfRangeNumber: a number no float64 holds is refused
// naming its field, where the schema validator would have said
// "<invalid reflect.Value> has type null".
func TestSchemaNamesAnOutOfRangeNumber(t *testing.T) {
	t.Parallel()
	tool := &airlock.Tool{Name: "pay", InputSchema: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"amount": map[string]any{"type": "number"},
			"payee":  map[string]any{"type": "object"},
			"lines":  map[string]any{"type": "array"},
		},
	}}
	s, err := newArgsSchema(tool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ args, field string }{
		{`{"amount": 1e999999999}`, "amount"},
		{`{"amount": -1e400}`, "amount"},
		{`{"payee": {"limit": 1e999}}`, "payee.limit"},
		{`{"lines": [1, {"amount": 2e308}]}`, "lines.1.amount"},
	} {
		err := s.validate(airlock.MustArgs(tc.args))
		ae := asError(err)
		if ae == nil || ae.Field != tc.field || ae.Code != airlock.CodeInvalidArgument ||
			!strings.Contains(ae.Message, "out of range") || strings.Contains(ae.Message, "invalid reflect") {
			t.Errorf("%s: %v, want invalid_argument naming %s", tc.args, err, tc.field)
		}
	}
	if err := s.validate(airlock.MustArgs(`{"amount": 1e308, "lines": [1e-400]}`)); err != nil {
		t.Errorf("numbers in range (a tiny one rounds to 0): %v", err)
	}
}
