package airlock

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestInvisibleCharacters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		r    rune
		want bool
	}{
		{"a letter", 'W', false},
		{"the space", ' ', false},
		{"an accented letter", 'é', false},
		{"a CJK ideograph", '中', false},
		{"an emoji", '😀', false},
		{"escape", 0x1b, true},
		{"carriage return", '\r', true},
		{"newline", '\n', true},
		{"DEL", 0x7f, true},
		{"a C1 control", 0x9b, true},
		{"no-break space", 0xa0, true},
		{"soft hyphen", 0xad, true},
		{"zero-width space", 0x200b, true},
		{"zero-width joiner", 0x200d, true},
		{"left-to-right mark", 0x200e, true},
		{"right-to-left override", 0x202e, true},
		{"right-to-left isolate", 0x2067, true},
		{"pop directional isolate", 0x2069, true},
		{"word joiner", 0x2060, true},
		{"line separator", 0x2028, true},
		{"ideographic space", 0x3000, true},
		{"byte-order mark", 0xfeff, true},
		{"variation selector 16", 0xfe0f, true},
		{"a tag character", 0xe0041, true},
		{"Hangul filler", 0x3164, true},
		{"Braille blank", 0x2800, true},
		{"combining grapheme joiner", 0x034f, true},
		{"Mongolian free variation selector", 0x180b, true},
		{"an unassigned default ignorable", 0x2065, true},
		{"a reserved specials ignorable", 0xfff0, true},
		{"an unassigned tag", 0xe0080, true},
		{"the last default ignorable", 0xe0fff, true},
	} {
		if got := Invisible(tc.r); got != tc.want {
			t.Errorf("%s (U+%04X): Invisible %v, want %v", tc.name, tc.r, got, tc.want)
		}
	}
}

func TestRevealInvisible(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"WD-24813":                     "WD-24813",
		"WD-24813\u200b":               "WD-24813[U+200B]",
		"WD-\u2067\u202e3184\u2069":    "WD-[U+2067][U+202E]3184[U+2069]",
		"run\x1b[2K\rrejected":         "run[U+001B][2K[U+000D]rejected",
		"José García":                  "José García",
		"ok \u202e DETTELPMOC":         "ok [U+202E] DETTELPMOC",
		"tag\U000E0041\U000E007F":      "tag[U+E0041][U+E007F]",
		"two\u00a0words, then\u2028on": "two[U+00A0]words, then[U+2028]on",
	} {
		if got := RevealInvisible(in); got != want {
			t.Errorf("RevealInvisible(%q) = %q, want %q", in, got, want)
		}
		if HasInvisible(RevealInvisible(in)) {
			t.Errorf("RevealInvisible(%q) still holds an invisible character", in)
		}
	}
}

func TestRevealInvisibleLines(t *testing.T) {
	t.Parallel()
	if got := RevealInvisibleLines("line one\n\tline\u202e two\r"); got != "line one\n\tline[U+202E] two[U+000D]" {
		t.Errorf("RevealInvisibleLines: %q", got)
	}
}

func TestEscapeInvisibleJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		`{"a":"WD-1"}`:                        `{"a":"WD-1"}`,
		"{\n\t\"a\": \"WD-1\u200b\"\n}":       "{\n\t\"a\": \"WD-1\\u200b\"\n}",
		`{"a":"x` + "\u202e" + `y","é":"ü"}`:  `{"a":"x\u202ey","é":"ü"}`,
		`["` + "\U000E0041" + `"]`:            `["\udb40\udc41"]`,
		`{"k` + "\u2066" + `":"` + "\u00a0\"": `{"k\u2066":"\u00a0"`,
	} {
		if got := string(EscapeInvisibleJSON([]byte(in))); got != want {
			t.Errorf("EscapeInvisibleJSON(%q) = %q, want %q", in, got, want)
		}
	}
}

// The escaped text is JSON of the same value, and holds nothing invisible
// but the whitespace between tokens.
func FuzzEscapeInvisibleJSON(f *testing.F) {
	for _, s := range []string{`{"a":"WD-1` + "\u200b" + `"}`, `["` + "\u202e" + `x", 1, null]`, "{\n \"\U000E0041\": \"\u00a0\"}", `"plain"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var before any
		if json.Unmarshal(b, &before) != nil {
			return
		}
		out := EscapeInvisibleJSON(b)
		var after any
		if err := json.Unmarshal(out, &after); err != nil {
			t.Fatalf("EscapeInvisibleJSON(%q) = %q, not JSON: %v", b, out, err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("EscapeInvisibleJSON(%q) = %q: another value", b, out)
		}
		for _, r := range string(out) {
			if Invisible(r) && r != ' ' && r != '\t' && r != '\n' && r != '\r' {
				t.Fatalf("EscapeInvisibleJSON(%q) = %q keeps U+%04X", b, out, r)
			}
		}
	})
}

func TestCheckNote(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, note, want string // want "": accepted
	}{
		{"plain", "checked with the bank", ""},
		{"lines and tabs", "line one\n\tline two", ""},
		{"bidi shown, not refused", "ok \u202e DETTELPMOC", ""},
		{"the longest", strings.Repeat("a", MaxNoteBytes), ""},
		{"too long", strings.Repeat("a", MaxNoteBytes+1), "at most 4096"},
		{"carriage return", "done\rfailed", "U+000D at byte 4"},
		{"escape", "a\x1b[2Kb", "U+001B"},
		{"a C1 control", "a\u009bb", "U+009B"},
		{"DEL", "a\x7f", "U+007F"},
		{"NUL", "a\x00", "NUL"},
		{"invalid UTF-8", "a\xff", "UTF-8"},
	} {
		err := CheckNote("reason", tc.note)
		var e *Error
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &e) || e.Field != "reason" || e.Code != CodeInvalidArgument || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want invalid_argument naming reason and saying %q", tc.name, err, tc.want)
		}
	}
	if !utf8.ValidString(strings.Repeat("é", MaxNoteBytes/2)) || CheckNote("note", strings.Repeat("é", MaxNoteBytes/2)) != nil {
		t.Error("a note of MaxNoteBytes in two-byte characters is refused")
	}
}
