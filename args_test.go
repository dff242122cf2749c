package airlock_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
)

func TestNewArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, canon, problem string
	}{
		{"empty body is the empty object", "", `{}`, ""},
		{"blank body is the empty object", " \n\t", `{}`, ""},
		{"keys sorted, spaces dropped", `{ "b": 1, "a": "x" }`, `{"a":"x","b":1}`, ""},
		{"numbers kept as sent", `{"amount": 1.50, "big": 12345678901234567890}`, `{"amount":1.50,"big":12345678901234567890}`, ""},
		{"nested objects sorted", `{"z":{"y":2,"x":[{"b":1,"a":2}]}}`, `{"z":{"x":[{"a":2,"b":1}],"y":2}}`, ""},
		{"no HTML escaping", `{"note":"<a&b>"}`, `{"note":"<a&b>"}`, ""},
		{"malformed", `{"a":`, "", "not valid JSON"},
		{"an array", `[1]`, "", "must be a JSON object, not an array"},
		{"two objects", `{}{}`, "", "one JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := airlock.NewArgs([]byte(tc.raw))
			if tc.problem != "" {
				var e *airlock.Error
				if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != "args" || !strings.Contains(e.Message, tc.problem) {
					t.Fatalf("got %v, want invalid_argument on args saying %q", err, tc.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(a.JSON()); got != tc.canon {
				t.Fatalf("JSON() = %s, want %s", got, tc.canon)
			}
			// The value and the bytes are the same arguments.
			if again := airlock.ArgsOf(a.Value()); string(again.JSON()) != tc.canon {
				t.Fatalf("ArgsOf(Value()) = %s, want %s", again.JSON(), tc.canon)
			}
		})
	}

	t.Run("nil is the empty object", func(t *testing.T) {
		t.Parallel()
		var a *airlock.Args
		if string(a.JSON()) != `{}` || a.Value() == nil || len(a.Value()) != 0 {
			t.Fatalf("nil Args: %s %v", a.JSON(), a.Value())
		}
		if string(airlock.ArgsOf(nil).JSON()) != `{}` {
			t.Fatal("ArgsOf(nil) is not {}")
		}
	})
}

// Arguments are parsed once where they enter; the value serves the key and
// the rules, the canonical bytes go to the upstream and the record.
func ExampleNewArgs() {
	args, err := airlock.NewArgs([]byte(`{ "text": "checked", "record_id": "WD-1" }`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(args.JSON()))
	fmt.Println(args.Value()["record_id"])
	_, err = airlock.NewArgs(json.RawMessage(`["WD-1"]`))
	fmt.Println(err)
	// Output:
	// {"record_id":"WD-1","text":"checked"}
	// WD-1
	// arguments must be a JSON object, not an array
}

// Arguments that name a member twice are refused naming its path: which of
// the two counts differs between readers.
func TestNewArgsRefusesAMemberGivenTwice(t *testing.T) {
	t.Parallel()
	for raw, field := range map[string]string{
		`{"record_id":"A","record_id":"B"}`:       "args.record_id",
		`{"payee":{"account":"1","account":"2"}}`: "args.payee.account",
		`{"items":[{"id":1},{"id":2,"id":3}]}`:    "args.items.1.id",
		`{"record_id":"A","\u0072ecord_id":"B"}`:  "args.record_id",
	} {
		_, err := airlock.NewArgs([]byte(raw))
		var e *airlock.Error
		if !errors.As(err, &e) || e.Code != airlock.CodeInvalidArgument || e.Field != field || !strings.Contains(e.Message, "twice") {
			t.Errorf("%s: %v; want invalid_argument naming %s", raw, err, field)
		}
	}
}
