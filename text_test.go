package airlock

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseArgsRefusesTextTheStoreCannotHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, want string // want "": accepted
	}{
		{"plain", `{"a":"x"}`, ""},
		{"escaped character", `{"a":"\u00e9\n"}`, ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, ""},
		{"escaped backslash before u0000", `{"a":"\\u0000"}`, ""},
		{"NUL", `{"a":"x\u0000"}`, "NUL"},
		{"NUL in a key", `{"a\u0000":"x"}`, "NUL"},
		{"NUL nested", `{"a":[{"b":"\u0000"}]}`, "NUL"},
		{"lone high surrogate", `{"a":"\ud800"}`, "unpaired UTF-16 surrogate"},
		{"high surrogate then a letter", `{"a":"\ud800\u0041"}`, "unpaired UTF-16 surrogate"},
		{"lone low surrogate", `{"a":"\udc00"}`, "unpaired UTF-16 surrogate"},
		{"invalid UTF-8", "{\"a\":\"X\xff\xfe\"}", "not valid UTF-8 at byte 7"},
		{"invalid UTF-8, other order", "{\"a\":\"X\xfe\xff\"}", "not valid UTF-8 at byte 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseArgs([]byte(tc.raw))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Field != "args" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v; want invalid_argument on args containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckRunID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, run string
		max       int
		want      string
	}{
		{"empty", "", 0, ""},
		{"at the default cap", strings.Repeat("r", 256), 0, ""},
		{"over the default cap", strings.Repeat("r", 257), 0, "at most 256 bytes"},
		{"over a configured cap", strings.Repeat("r", 33), 32, "at most 32 bytes"},
		{"NUL", "run\x00", 0, "NUL"},
		{"invalid UTF-8", "run\xff", 0, "not valid UTF-8 at byte 3"},
		// Control characters rewrite the terminal that prints a run id.
		{"an escape", "run\x1b[2K", 0, "control character U+001B at byte 3"},
		{"a carriage return", "run-1\rrun-2", 0, "U+000D"},
		{"a C1 control", "run\u0085", 0, "U+0085"},
		{"DEL", "run\x7f", 0, "U+007F"},
		{"letters of any script", "läuft-走る-1", 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckRunID(tc.run, tc.max)
			var e *Error
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &e) || e.Field != "run_id" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v; want run_id containing %q", err, tc.want)
			}
		})
	}
}

func TestStorableTextAndJSON(t *testing.T) {
	t.Parallel()
	if got := StorableText("a\x00b\xffc"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("StorableText: %q", got)
	}
	if got := string(StorableJSON([]byte("{\"a\":\"x\xffy\"}"))); got != "{\"a\":\"x\uFFFDy\"}" {
		t.Errorf("StorableJSON: %q", got)
	}
	if got := StorableJSON([]byte(`{"a":1}`)); string(got) != `{"a":1}` {
		t.Errorf("valid JSON changed: %q", got)
	}
}

// Shorten keeps short text whole and cuts long text at a rune boundary,
// so an error message that quotes it stays valid UTF-8.
func TestShortenCutsAtARuneBoundary(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"", 5, ""},
		{"12345", 5, "12345"},
		{"123456", 5, "12345…"},
		{"ab€cd", 3, "ab…"},        // € is 3 bytes: the cut moves back to its start
		{"ab€cd", 5, "ab€…"},       // the whole rune fits
		{"€€", 1, "…"},             // no whole rune fits
		{"ab\xffcd", 3, "ab\xff…"}, // an invalid byte is its own rune start
	} {
		got := Shorten(tc.in, tc.n)
		if got != tc.want {
			t.Errorf("Shorten(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
		if utf8.ValidString(tc.in) && !utf8.ValidString(got) {
			t.Errorf("Shorten(%q, %d) = %q is not valid UTF-8", tc.in, tc.n, got)
		}
	}
}
