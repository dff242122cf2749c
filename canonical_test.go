package airlock

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// canonicalReference is the canonical form written with encoding/json:
// the definition that canonical must match byte for byte.
func canonicalReference(tool string, values [][2]string, windowID string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode([]any{KeyVersion, tool, values, windowID})
	return strings.TrimSuffix(buf.String(), "\n")
}

func TestCanonicalMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values [][2]string
		window string
	}{
		{"Plain", [][2]string{{"withdrawal_id", "WD-24817"}}, "2026-09-21"},
		{"NoFields", [][2]string{}, "forever"},
		{"Several", [][2]string{{"a", "1"}, {"b.c", "x y"}}, "run:r-1"},
		{"QuoteAndBackslash", [][2]string{{"f", `a"b\c`}}, "w"},
		{"ControlCharacters", [][2]string{{"f", "a\nb\tc\x00\x1f\b\f\r"}}, "w"},
		{"HTMLIsNotEscaped", [][2]string{{"f", "<a href='x'>&</a>"}}, "w"},
		{"Unicode", [][2]string{{"naïve", "Zoë €5 \u2028 \u2029 😀"}}, "w"},
		{"InvalidUTF8", [][2]string{{"f", "a\xffb\xc3"}}, "w"},
		{"DEL", [][2]string{{"f", "a\x7fb"}}, "w"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, want := canonical("approve_withdrawal", tc.values, tc.window), canonicalReference("approve_withdrawal", tc.values, tc.window)
			if got != want {
				t.Fatalf("canonical:\n got %s\nwant %s", got, want)
			}
		})
	}
}

func FuzzCanonicalMatchesEncodingJSON(f *testing.F) {
	f.Add("approve_withdrawal", "withdrawal_id", "WD-24817", "2026-09-21")
	f.Add("t", "a\"b", "\\\n\x00<>&\u2028\xff", "")
	f.Fuzz(func(t *testing.T, tool, field, value, window string) {
		values := [][2]string{{field, value}, {value, field}}
		if got, want := canonical(tool, values, window), canonicalReference(tool, values, window); got != want {
			t.Fatalf("canonical:\n got %q\nwant %q", got, want)
		}
	})
}

// When normalizes says no, the arguments' canonical form is the one
// NormalizeKeyFields would give; when it says yes, they differ.
func TestNormalizesAgreesWithNormalizeKeyFields(t *testing.T) {
	t.Parallel()
	w := Window{Kind: WindowForever}
	tool := &Tool{Name: "t", Kind: KindWrite, Window: &w, NaturalKey: []KeyField{
		{Field: "id", Normalize: []string{"trim", "upper"}}, {Field: "nested.amount", Normalize: []string{"decimal"}}}}
	for _, tc := range []struct {
		name string
		args string
		want bool
	}{
		{"AlreadyNormal", `{"id":"WD-1","nested":{"amount":"12.5"},"memo":" x "}`, false},
		{"NeedsTrim", `{"id":" WD-1","nested":{"amount":"12.5"}}`, true},
		{"NeedsUpper", `{"id":"wd-1","nested":{"amount":"12.5"}}`, true},
		{"NumberBecomesText", `{"id":"WD-1","nested":{"amount":12.5}}`, true},
		{"DecimalRewritten", `{"id":"WD-1","nested":{"amount":"12.50"}}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args, err := ParseArgs([]byte(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			d, err := DeriveKey(KeyInput{Tool: tool, Args: args})
			if err != nil {
				t.Fatal(err)
			}
			got := normalizes(args, d.Parts.Fields)
			same := bytes.Equal(CanonicalArgs(args), CanonicalArgs(NormalizeKeyFields(tool, args)))
			if got != tc.want || got == same {
				t.Fatalf("normalizes = %v, want %v (canonical forms equal: %v)", got, tc.want, same)
			}
		})
	}
}
