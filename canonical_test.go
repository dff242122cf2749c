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

// canonicalArgsReference is CanonicalArgs written with encoding/json: the
// definition that CanonicalArgs must match byte for byte.
func canonicalArgsReference(args map[string]any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(args)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestCanonicalArgsMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args string
	}{
		{"Empty", `{}`},
		{"Plain", `{"withdrawal_id":"WD-24817","amount":"120.50"}`},
		{"KeysSortedByBytes", `{"b":1,"a":2,"B":3,"é":4,"aa":5,"":6}`},
		{"Numbers", `{"i":0,"n":-12,"f":1.50,"e":1E+3,"big":123456789012345678901234567890,"neg0":-0}`},
		{"Nested", `{"o":{"z":[1,"x",null,true,false,{"k":[]}],"a":{}},"l":[[],[[]]]}`},
		{"Escapes", `{"s":"a\"b\\c\n\t\u0000\u001f<&>\u2028\u2029😀","k\"ey":"v"}`},
		{"InvalidUTF8", "{\"s\":\"a\xffb\"}"},
		{"Whitespace", " { \"b\" : [ 1 , 2 ] ,\n\"a\" : \"x\" } "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Decoded as encoding/json does (ParseArgs refuses NUL and
			// invalid UTF-8, but a Go caller's map may hold them).
			dec := json.NewDecoder(strings.NewReader(tc.args))
			dec.UseNumber()
			var args map[string]any
			if err := dec.Decode(&args); err != nil {
				t.Fatal(err)
			}
			if got, want := CanonicalArgs(args), canonicalArgsReference(args); !bytes.Equal(got, want) {
				t.Fatalf("CanonicalArgs:\n got %s\nwant %s", got, want)
			}
		})
	}
	t.Run("ValuesParseArgsNeverMakes", func(t *testing.T) {
		t.Parallel()
		args := map[string]any{"f": 1.5, "i": 7, "nilmap": map[string]any(nil), "nillist": []any(nil),
			"strs": []string{"a"}, "empty": json.Number(""), "n": json.Number("12")}
		if got, want := CanonicalArgs(args), canonicalArgsReference(args); !bytes.Equal(got, want) {
			t.Fatalf("CanonicalArgs:\n got %s\nwant %s", got, want)
		}
	})
}

func FuzzCanonicalArgsMatchesEncodingJSON(f *testing.F) {
	f.Add(`{"withdrawal_id":"WD-24817","amount":120.50,"memo":"<b>\u2028</b>"}`)
	f.Add(`{"a":{"b":[1,2,{"c":null}]},"A":true,"":-0.0e-0}`)
	f.Fuzz(func(t *testing.T, raw string) {
		args, err := ParseArgs([]byte(raw))
		if err != nil {
			return
		}
		if got, want := CanonicalArgs(args), canonicalArgsReference(args); !bytes.Equal(got, want) {
			t.Fatalf("CanonicalArgs(%q):\n got %s\nwant %s", raw, got, want)
		}
	})
}

func TestIsJSONNumber(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"0": true, "-0": true, "12": true, "1.5": true, "-1.5e10": true, "1E+3": true, "1e-3": true,
		"": false, "-": false, "01": false, "1.": false, ".5": false, "1e": false, "1e+": false,
		"+1": false, "0x1": false, "1.5.": false, "NaN": false, "\x201": false, // a leading space
	} {
		if got := isJSONNumber(s); got != want {
			t.Errorf("isJSONNumber(%q) = %v, want %v", s, got, want)
		}
	}
}
