package airlock_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/airlockhq/airlock"
)

// propTool has two natural-key fields, so that the encoding must keep
// field boundaries apart ("ab"+"c" is not "a"+"bc").
func propTool(t *rapid.T, window string) *airlock.Tool {
	var w airlock.Window
	_ = w.UnmarshalText([]byte(window))
	return &airlock.Tool{
		Name: "pay", Kind: airlock.KindWrite,
		InputSchema: map[string]any{"type": "object", "properties": map[string]any{
			"a": map[string]any{"type": "string"}, "b": map[string]any{"type": "string"}}},
		NaturalKey: []airlock.KeyField{{Field: "a", Normalize: []string{"trim"}}, {Field: "b", Normalize: []string{"trim"}}},
		Window:     &w,
	}
}

var keyRE = regexp.MustCompile(`^[0-9a-f]{32}$`)

func nonBlank() *rapid.Generator[string] {
	return rapid.StringMatching(`[\p{L}\p{N}\p{P}]{1,12}`)
}

func TestPropertyKeyDependsOnlyOnTheWork(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		tool := propTool(t, "24h")
		a, b := nonBlank().Draw(t, "a"), nonBlank().Draw(t, "b")
		// Any text but NUL, which ParseArgs refuses.
		text := rapid.String().Filter(func(s string) bool { return !strings.ContainsRune(s, 0) })
		extra := rapid.MapOf(rapid.StringMatching(`x[a-z]{0,5}`), text).Draw(t, "extra")
		at := time.Unix(rapid.Int64Range(0, 4e9).Draw(t, "at"), 0)

		args1 := map[string]any{"a": a, "b": b}
		args2 := map[string]any{"a": " " + a + "\t", "b": "\n" + b}
		for k, v := range extra {
			args2[k] = v
		}
		// Round-trip through JSON so that field order is the encoder's, not ours.
		raw, _ := json.Marshal(args2)
		parsed, err := airlock.ParseArgs(raw)
		if err != nil {
			t.Fatal(err)
		}
		d1, err1 := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: args1, At: at})
		d2, err2 := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: parsed, At: at})
		if err1 != nil || err2 != nil {
			t.Fatalf("errors: %v, %v", err1, err2)
		}
		if d1.Key != d2.Key {
			t.Fatalf("same work, two keys: %s vs %s", d1.Parts.Canonical, d2.Parts.Canonical)
		}
		if !keyRE.MatchString(d1.Key) {
			t.Fatalf("key %q is not 32 hex digits", d1.Key)
		}
	})
}

func TestPropertyOtherWorkOtherKey(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		tool := propTool(t, "forever")
		a1, b1 := nonBlank().Draw(t, "a1"), nonBlank().Draw(t, "b1")
		// Often a boundary shift of the same characters: "ab","c" vs "a","bc".
		var a2, b2 string
		if rapid.Bool().Draw(t, "shift") && len(a1) > 1 {
			a2, b2 = a1[:len(a1)-1], a1[len(a1)-1:]+b1
		} else {
			a2, b2 = nonBlank().Draw(t, "a2"), nonBlank().Draw(t, "b2")
		}
		d1, err1 := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: map[string]any{"a": a1, "b": b1}})
		d2, err2 := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: map[string]any{"a": a2, "b": b2}})
		if err1 != nil || err2 != nil {
			t.Fatalf("errors: %v, %v", err1, err2)
		}
		same := strings.TrimSpace(a1) == strings.TrimSpace(a2) && strings.TrimSpace(b1) == strings.TrimSpace(b2)
		if (d1.Parts.Canonical == d2.Parts.Canonical) != same {
			t.Fatalf("canonical forms %s and %s; same work: %v", d1.Parts.Canonical, d2.Parts.Canonical, same)
		}
		if !same && d1.Key == d2.Key {
			t.Fatalf("different work, one key: %s / %s", d1.Parts.Canonical, d2.Parts.Canonical)
		}
	})
}

func TestPropertyDurationWindows(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		hours := rapid.IntRange(1, 72).Draw(t, "hours")
		tool := propTool(t, (time.Duration(hours) * time.Hour).String())
		at := time.Unix(rapid.Int64Range(-1e9, 4e9).Draw(t, "at"), 0)
		d, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: map[string]any{"a": "x", "b": "y"}, At: at})
		if err != nil {
			t.Fatal(err)
		}
		p := d.Parts
		if at.Before(p.WindowStart) || !at.Before(p.WindowEnd) || p.WindowEnd.Sub(p.WindowStart) != time.Duration(hours)*time.Hour {
			t.Fatalf("at %v outside its window [%v, %v)", at, p.WindowStart, p.WindowEnd)
		}
	})
}

func FuzzDeriveKey(f *testing.F) {
	f.Add([]byte(`{"record_id":"WD-24817"}`), int64(1789761600), "")
	f.Add([]byte(`{"record_id":" wd-1 ","amount":"001.50"}`), int64(0), "run-1")
	f.Add([]byte(`{"record_id":12.5}`), int64(-1), "")
	f.Add([]byte(`{"record_id":{"x":1}}`), int64(1), "")
	m := example(f)
	tools := []*airlock.Tool{m.Tool("approve_withdrawal"), m.Tool("add_note")}
	f.Fuzz(func(t *testing.T, raw []byte, unix int64, run string) {
		args, err := airlock.ParseArgs(raw)
		if err != nil {
			if airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
				t.Fatalf("ParseArgs error with code %s: %v", airlock.ErrorCode(err), err)
			}
			return
		}
		at := time.Unix(unix%(1<<40), 0)
		for _, tool := range tools {
			d, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &m.Calendar, Args: args, At: at, RunID: run})
			if err != nil {
				var e *airlock.Error
				if !errors.As(err, &e) || e.Field == "" {
					t.Fatalf("error names no field: %v", err)
				}
				continue
			}
			if !keyRE.MatchString(d.Key) {
				t.Fatalf("bad key %q", d.Key)
			}
			var canon []any
			if err := json.Unmarshal([]byte(d.Parts.Canonical), &canon); err != nil || len(canon) != 4 {
				t.Fatalf("canonical form %q is not a 4-element JSON array", d.Parts.Canonical)
			}
			again, err := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &m.Calendar, Args: args, At: at, RunID: run})
			if err != nil || again.Key != d.Key {
				t.Fatalf("not deterministic: %v", err)
			}
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`{"a":1.000000000000000000001,"b":[1,{"c":null}]}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := airlock.ParseArgs(raw)
		if err != nil {
			return
		}
		// Canonical arguments parse back to the same canonical form.
		c1 := airlock.CanonicalArgs(args)
		back, err := airlock.ParseArgs(c1)
		if err != nil {
			t.Fatalf("canonical form does not parse: %s: %v", c1, err)
		}
		if c2 := airlock.CanonicalArgs(back); string(c1) != string(c2) {
			t.Fatalf("canonical form not stable: %s vs %s", c1, c2)
		}
		if diff := airlock.DiffArgs(args, back); len(diff) != 0 {
			t.Fatalf("DiffArgs of equal arguments: %v", diff)
		}
	})
}

// Arguments ParseArgs accepts are text the store holds and the decoder did
// not rewrite: no NUL, and no U+FFFD that the input did not spell itself —
// so no two different inputs can decode to one value by replacement.
func FuzzParseArgsKeepsText(f *testing.F) {
	for _, s := range []string{`{"a":"x"}`, `{"a":"\u0000"}`, `{"a":"\ud800"}`, "{\"a\":\"X\xff\xfe\"}", `{"a":"\ud83d\ude00"}`, `{"a":"\ufffd"}`, "{\"a\":\"\uFFFD\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		args, err := airlock.ParseArgs(raw)
		if err != nil {
			return
		}
		canon := string(airlock.CanonicalArgs(args))
		if strings.Contains(canon, `\u0000`) {
			t.Fatalf("accepted a NUL: %q", raw)
		}
		spelled := bytes.Contains(raw, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(raw), []byte(`\ufffd`))
		if strings.ContainsRune(canon, '\uFFFD') && !spelled {
			t.Fatalf("accepted input that decodes with a replacement character: %q → %s", raw, canon)
		}
	})
}

func FuzzNormalizeDecimal(f *testing.F) {
	for _, s := range []string{"1", "001.500", "-0.0", "1e3", ".5", "1e999", "abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := airlock.Normalize("decimal", s)
		if err != nil {
			return
		}
		again, err := airlock.Normalize("decimal", out)
		if err != nil || again != out {
			t.Fatalf("decimal(%q) = %q is not a fixed point (%q, %v)", s, out, again, err)
		}
	})
}
