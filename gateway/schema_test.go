package gateway

import (
	"math/rand/v2"
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

// TestCoveredSchemasNeedNoValidator: for a schema validate's own checks
// cover, the JSON Schema validator refuses nothing they let through, on
// arguments of every JSON type (integers written as 1.0 or 1e2, numbers
// past int64, nulls, nested values); and a schema with anything more is
// not taken as covered.
func TestCoveredSchemasNeedNoValidator(t *testing.T) {
	t.Parallel()
	covered := []map[string]any{
		{"type": "object"},
		{},
		{"type": "object", "description": "d", "properties": map[string]any{
			"s": map[string]any{"type": "string", "description": "x"},
			"n": map[string]any{"type": "number"},
			"i": map[string]any{"type": "integer", "default": 1},
			"b": map[string]any{"type": "boolean"},
			"z": map[string]any{"type": "null"},
			"o": map[string]any{"type": "object"},
			"a": map[string]any{"type": "array", "examples": []any{[]any{}}},
			"f": map[string]any{"title": "free"},
		}, "required": []any{"s"}},
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string"}, "i": map[string]any{"type": "integer"}},
			"additionalProperties": false},
	}
	for _, raw := range covered {
		if !coveredBySchemaChecks(raw) {
			t.Fatalf("%v: not taken as covered", raw)
		}
	}
	for _, raw := range []map[string]any{
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "enum": []any{"a"}}}},
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "pattern": "^a"}}},
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": []any{"string", "null"}}}},
		{"type": "object", "properties": map[string]any{"s": map[string]any{"type": "string", "format": "email"}}},
		{"type": "object", "properties": map[string]any{"o": map[string]any{"type": "object", "properties": map[string]any{}}}},
		{"type": "object", "properties": map[string]any{"s": true}},
		{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
		{"type": "object", "minProperties": 1},
		{"type": "object", "allOf": []any{map[string]any{}}},
		{"type": "array"},
	} {
		if coveredBySchemaChecks(raw) {
			t.Errorf("%v: taken as covered", raw)
		}
	}
	values := []string{`"x"`, `""`, `1`, `-0`, `1.0`, `1e2`, `1.5`, `-7`, `123456789012345678901234567890`, `1e308`, `1e-400`,
		`true`, `false`, `null`, `{}`, `{"k":[1,"a",null]}`, `[]`, `[1,{"x":2}]`}
	fields := []string{"s", "n", "i", "b", "z", "o", "a", "f", "other"}
	r := rand.New(rand.NewPCG(3, 4))
	for ci, raw := range covered {
		quick, err := newArgsSchema(&airlock.Tool{Name: "t", InputSchema: raw})
		if err != nil {
			t.Fatal(err)
		}
		full := *quick
		full.alwaysFull = true
		for range 3000 {
			var b strings.Builder
			b.WriteString("{")
			for j, n := range r.Perm(len(fields))[:r.IntN(5)] {
				if j > 0 {
					b.WriteString(",")
				}
				b.WriteString(`"` + fields[n] + `":` + values[r.IntN(len(values))])
			}
			b.WriteString("}")
			args := airlock.MustArgs(b.String())
			q, f := quick.validate(args), full.validate(args)
			if (q == nil) != (f == nil) {
				t.Fatalf("schema %d, %s: without the validator %v, with it %v", ci, b.String(), q, f)
			}
		}
	}
}
