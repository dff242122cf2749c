package airlock

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Characters that are not seen where text is shown (docs/hardening.md,
// "text that cannot disguise itself"): they hide, reorder or fake what a
// person reads. WD-24813 followed by a zero-width space reads WD-24813; a
// right-to-left override reverses what follows it, airlock's own words
// included; an escape rewrites a terminal. Wherever airlock shows text an
// agent or a service gave it — the page, the notices, the CLI — it shows
// these as what they are.

// Invisible reports whether r is not seen as itself where text is shown:
// a control character (C0, DEL, C1), a format character (the bidi
// controls, zero-width spaces and joiners, the byte-order mark, soft
// hyphen, tags), a separator other than the space (no-break and other
// width spaces, line and paragraph separators), a variation selector, any
// other code point Unicode says a renderer may ignore (the Mongolian free
// variation selectors, U+2065, U+FFF0–FFF8, the unassigned tags) and the
// blank fillers (Hangul, Braille).
func Invisible(r rune) bool {
	switch {
	case r >= 0x20 && r < 0x7f:
		return false // printable ASCII, the common case
	case r < 0x20 || r >= 0x7f && r < 0xa0:
		return true
	case r == 0x034f, r == 0x115f, r == 0x1160, r == 0x17b4, r == 0x17b5, r == 0x2800, r == 0x3164, r == 0xffa0:
		return true
	case r >= 0xfe00 && r <= 0xfe0f, r >= 0xe0100 && r <= 0xe01ef:
		return true
	}
	return unicode.In(r, unicode.Cf, unicode.Zs, unicode.Zl, unicode.Zp, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point)
}

// HasInvisible reports whether s holds an Invisible character.
func HasInvisible(s string) bool {
	for _, r := range s {
		if Invisible(r) {
			return true
		}
	}
	return false
}

// RevealInvisible is s with each Invisible character written as
// [U+XXXX], as the CLI's tables and the notices show text: nothing in it
// hides, reorders or rewrites what is around it.
func RevealInvisible(s string) string { return reveal(s, false) }

// RevealShortened is s as text of a bounded place shows it (a notice, a
// CLI table's cell): RevealInvisible, then cut at max bytes with its full
// length said.
func RevealShortened(s string, max int) string {
	n := len(s)
	if s = RevealInvisible(s); len(s) > max {
		s = fmt.Sprintf("%s (%d bytes in all)", Shorten(s, max), n)
	}
	return s
}

// RevealInvisibleLines is RevealInvisible keeping newlines and tabs, for
// text of several lines (an error message on a terminal).
func RevealInvisibleLines(s string) string { return reveal(s, true) }

func reveal(s string, lines bool) string {
	hidden := func(r rune) bool { return Invisible(r) && (!lines || r != '\n' && r != '\t') }
	if strings.IndexFunc(s, hidden) < 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for _, r := range s {
		if hidden(r) {
			fmt.Fprintf(&b, "[U+%04X]", r)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EscapeInvisibleJSON is the JSON text b with each Invisible character
// written as a \u escape: the same values, and nothing in the text that a
// terminal or a browser would act on. Outside strings JSON holds only
// ASCII, so only strings change; the JSON whitespace (tab, newline,
// carriage return between tokens) is kept.
func EscapeInvisibleJSON(b []byte) []byte {
	return ReplaceInvisible(b, func(dst []byte, r rune) []byte {
		if r > 0xffff {
			r -= 0x10000
			return fmt.Appendf(dst, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
		}
		return fmt.Appendf(dst, `\u%04x`, r)
	})
}

// ReplaceInvisible is text b with each Invisible character but tab,
// newline and carriage return (the layout of JSON and of markup) replaced
// by what with appends for it; b itself when it holds none.
func ReplaceInvisible(b []byte, with func(dst []byte, r rune) []byte) []byte {
	hidden := func(r rune) bool { return Invisible(r) && r != '\t' && r != '\n' && r != '\r' }
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if hidden(r) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	out = append(out, b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if hidden(r) {
			out = with(out, r)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}
