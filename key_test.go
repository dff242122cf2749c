package airlock_test

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/manifest"
)

var update = flag.Bool("update", false, "rewrite the keys in testdata/keys.json (window ids stay as written by hand)")

// golden is one vector of testdata/keys.json. WindowID is written by hand:
// it is the meaning; Key guards the encoding against any change.
type golden struct {
	Name     string          `json:"name"`
	Tool     string          `json:"tool"`
	Args     json.RawMessage `json:"args"`
	At       string          `json:"at"`
	RunID    string          `json:"run_id,omitempty"`
	WindowID string          `json:"window_id"`
	Key      string          `json:"key"`
}

func example(t testing.TB) *manifest.Manifest {
	t.Helper()
	m, err := withdrawals.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func derive(t testing.TB, m *manifest.Manifest, tool, args, at, run string) *airlock.Derivation {
	t.Helper()
	d, err := deriveErr(m, tool, args, at, run)
	if err != nil {
		t.Fatalf("DeriveKey(%s, %s, %s): %v", tool, args, at, err)
	}
	return d
}

func deriveErr(m *manifest.Manifest, tool, args, at, run string) (*airlock.Derivation, error) {
	when, err := time.Parse(time.RFC3339, at)
	if err != nil {
		return nil, err
	}
	parsed, err := airlock.ParseArgs([]byte(args))
	if err != nil {
		return nil, err
	}
	return airlock.DeriveKey(airlock.KeyInput{Tool: m.Tool(tool), Calendar: &m.Calendar, Args: parsed, At: when, RunID: run})
}

func TestGoldenKeys(t *testing.T) {
	t.Parallel()
	m := example(t)
	raw, err := os.ReadFile("testdata/keys.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []golden
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	for i := range vectors {
		v := &vectors[i]
		d := derive(t, m, v.Tool, string(v.Args), v.At, v.RunID)
		if d.Parts.WindowID != v.WindowID {
			t.Errorf("%s: window %s, want %s", v.Name, d.Parts.WindowID, v.WindowID)
		}
		if *update {
			v.Key = d.Key
			continue
		}
		if d.Key != v.Key {
			t.Errorf("%s: key %s, want %s (canonical %s)", v.Name, d.Key, v.Key, d.Parts.Canonical)
		}
	}
	if *update {
		out, _ := json.MarshalIndent(vectors, "", "  ")
		if err := os.WriteFile("testdata/keys.json", append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKeySameWork(t *testing.T) {
	t.Parallel()
	m := example(t)
	const at = "2026-09-18T10:00:00-04:00"
	base := derive(t, m, "approve_withdrawal", `{"record_id":"WD-24817","note":"ok"}`, at, "")
	for _, tc := range []struct{ name, args, at string }{
		{"field order", `{"note":"ok","record_id":"WD-24817"}`, at},
		{"whitespace", `{"record_id":"  WD-24817\t"}`, at},
		{"case", `{"record_id":"wd-24817"}`, at},
		{"non-key field differs", `{"record_id":"WD-24817","note":"something else"}`, at},
		{"same business day, other hour", `{"record_id":"WD-24817"}`, "2026-09-18T16:59:59-04:00"},
		{"same business day, other zone", `{"record_id":"WD-24817"}`, "2026-09-18T20:59:00Z"},
		{"previous evening after cutoff", `{"record_id":"WD-24817"}`, "2026-09-17T17:00:00-04:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := derive(t, m, "approve_withdrawal", tc.args, tc.at, ""); d.Key != base.Key {
				t.Fatalf("key %s (%s), want %s (%s)", d.Key, d.Parts.Canonical, base.Key, base.Parts.Canonical)
			}
		})
	}
}

func TestKeyOtherWork(t *testing.T) {
	t.Parallel()
	m := example(t)
	const at = "2026-09-18T10:00:00-04:00"
	base := derive(t, m, "approve_withdrawal", `{"record_id":"WD-24817"}`, at, "")
	for _, tc := range []struct{ name, tool, args, at string }{
		{"other record", "approve_withdrawal", `{"record_id":"WD-24818"}`, at},
		{"other tool", "add_note", `{"record_id":"WD-24817","text":"WD-24817"}`, at},
		{"other business day", "approve_withdrawal", `{"record_id":"WD-24817"}`, "2026-09-18T17:00:00-04:00"},
		{"day before", "approve_withdrawal", `{"record_id":"WD-24817"}`, "2026-09-17T10:00:00-04:00"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := derive(t, m, tc.tool, tc.args, tc.at, ""); d.Key == base.Key {
				t.Fatalf("same key %s for other work (%s)", d.Key, d.Parts.Canonical)
			}
		})
	}
}

func TestKeyBadInput(t *testing.T) {
	t.Parallel()
	m := example(t)
	const at = "2026-09-18T10:00:00-04:00"
	for _, tc := range []struct {
		name, args string
		code       airlock.Code
		field      string
	}{
		{"missing field", `{"note":"x"}`, airlock.CodeMissingField, "record_id"},
		{"empty field", `{"record_id":""}`, airlock.CodeMissingField, "record_id"},
		{"blank after trim", `{"record_id":"   "}`, airlock.CodeMissingField, "record_id"},
		{"null field", `{"record_id":null}`, airlock.CodeMissingField, "record_id"},
		{"object field", `{"record_id":{"a":1}}`, airlock.CodeInvalidArgument, "record_id"},
		{"array field", `{"record_id":[1]}`, airlock.CodeInvalidArgument, "record_id"},
		{"not an object", `[1,2]`, airlock.CodeInvalidArgument, "args"},
		{"not JSON", `{"record_id":`, airlock.CodeInvalidArgument, "args"},
		{"two values", `{} {}`, airlock.CodeInvalidArgument, "args"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := deriveErr(m, "approve_withdrawal", tc.args, at, "")
			var e *airlock.Error
			if !errors.As(err, &e) || e.Code != tc.code || e.Field != tc.field {
				t.Fatalf("got %v, want code %s naming field %s", err, tc.code, tc.field)
			}
			name := tc.field
			if name == "args" {
				name = "arguments"
			}
			if !regexp.MustCompile(regexp.QuoteMeta(name)).MatchString(e.Error()) {
				t.Fatalf("message %q does not name %s", e.Error(), tc.field)
			}
		})
	}
}

func TestKeyGrace(t *testing.T) {
	t.Parallel()
	m := example(t)
	friday := derive(t, m, "approve_withdrawal", `{"record_id":"WD-1"}`, "2026-09-18T12:00:00-04:00", "run-1")
	for _, tc := range []struct {
		name, at     string
		wantPrevious bool
	}{
		{"just after the cutoff", "2026-09-18T17:00:00-04:00", true},
		{"9 minutes after", "2026-09-18T17:09:59-04:00", true},
		{"10 minutes after", "2026-09-18T17:10:00-04:00", false},
		{"Saturday", "2026-09-19T10:00:00-04:00", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := derive(t, m, "approve_withdrawal", `{"record_id":"WD-1"}`, tc.at, "run-1")
			if d.Parts.WindowID != "business_day:2026-09-21" {
				t.Fatalf("window %s", d.Parts.WindowID)
			}
			if got := d.Previous == friday.Key; got != tc.wantPrevious {
				t.Fatalf("previous %q, Friday's key %q, want match=%v", d.Previous, friday.Key, tc.wantPrevious)
			}
		})
	}
}

func TestNormalizers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		norm, in, want string
		wantErr        bool
	}{
		{"trim", "  a b \n", "a b", false},
		{"upper", "wd-1", "WD-1", false},
		{"lower", "WD-1", "wd-1", false},
		{"digits", "+1 (555) 010-9999", "15550109999", false},
		{"decimal", "500", "500", false},
		{"decimal", "500.00", "500", false},
		{"decimal", " 0500.50 ", "500.5", false},
		{"decimal", "-0.0", "0", false},
		{"decimal", "1e3", "1000", false},
		{"decimal", "12,50", "", true},
		{"decimal", "abc", "", true},
	} {
		t.Run(tc.norm+"/"+tc.in, func(t *testing.T) {
			t.Parallel()
			got, err := airlock.Normalize(tc.norm, tc.in)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("%s(%q) = %q, %v; want %q (error %v)", tc.norm, tc.in, got, err, tc.want, tc.wantErr)
			}
		})
	}
}
