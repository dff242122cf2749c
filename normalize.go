package airlock

import (
	"encoding/json"
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// A normalizer turns a natural-key value into its canonical text, so that
// the same work gives the same key whatever whitespace or case the model used.
// Every text value is in NFC before the first normalizer and after the last
// (keyText), so a normalizer sees one spelling of each character.
type normalizer func(string) (string, error)

var normalizers = map[string]normalizer{
	"trim":            func(s string) (string, error) { return strings.TrimSpace(s), nil },
	"upper":           func(s string) (string, error) { return strings.Map(pairedUpper, s), nil },
	"lower":           func(s string) (string, error) { return strings.Map(pairedLower, s), nil },
	"digits":          digitsOnly,
	"decimal":         canonicalDecimal,
	"strip_ignorable": func(s string) (string, error) { return strings.Map(dropIgnorable, s), nil },
	"nfkc":            func(s string) (string, error) { return norm.NFKC.String(s), nil },
}

// NormalizerNames lists the known normalizers.
func NormalizerNames() []string {
	names := make([]string, 0, len(normalizers))
	for n := range normalizers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pairedUpper and pairedLower change a letter's case only when the letter
// and its other case are a plain pair: each maps to the other, and the title
// case is the upper case. Letters whose case mapping leaves their identity —
// the dotless ı and dotted İ (whose other case is the ASCII i or I), the long
// ſ (whose upper case is S), the Kelvin and Ohm signs, and the digraphs ǆ/ǅ/Ǆ
// with their three cases — are kept as they are, so that upper and lower
// never fold two different records into one key. docs/concepts.md states
// the rule; testdata/key-normalization.json holds every pair.
func pairedUpper(r rune) rune {
	if r < utf8.RuneSelf {
		if 'a' <= r && r <= 'z' {
			return r - 'a' + 'A'
		}
		return r
	}
	if u := unicode.ToUpper(r); u != r && casePair(r, u) {
		return u
	}
	return r
}

func pairedLower(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			return r - 'A' + 'a'
		}
		return r
	}
	if l := unicode.ToLower(r); l != r && casePair(l, r) {
		return l
	}
	return r
}

// casePair reports whether lower and upper are one letter's two cases and
// nothing else: each maps to the other, and the title case is the upper.
func casePair(lower, upper rune) bool {
	return unicode.ToUpper(lower) == upper && unicode.ToLower(upper) == lower &&
		unicode.ToTitle(lower) == upper && unicode.ToTitle(upper) == upper
}

// dropIgnorable removes Unicode's default-ignorable code points (zero-width
// space and joiners, the byte order mark, soft hyphen, variation selectors,
// bidirectional marks): characters that draw nothing, so two spellings that
// look the same are one value. The set is the derived property
// Default_Ignorable_Code_Point, computed from the tables package unicode has.
func dropIgnorable(r rune) rune {
	if r < utf8.RuneSelf {
		return r
	}
	if isDefaultIgnorable(r) {
		return -1
	}
	return r
}

func isDefaultIgnorable(r rune) bool {
	if !unicode.Is(unicode.Other_Default_Ignorable_Code_Point, r) &&
		!unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Variation_Selector, r) {
		return false
	}
	// The derivation's exceptions: white space, the interlinear annotation
	// marks, Egyptian hieroglyph format controls, prepended marks.
	switch {
	case unicode.Is(unicode.White_Space, r),
		r >= 0xFFF9 && r <= 0xFFFB,
		r >= 0x13430 && r <= 0x1343F,
		unicode.Is(unicode.Prepended_Concatenation_Mark, r):
		return false
	}
	return true
}

// toNFC writes text in Unicode's composed normal form, so that é sent as one
// code point and as e + combining accent is one value. ASCII is already NFC.
func toNFC(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return norm.NFC.String(s)
		}
	}
	return s
}

func digitsOnly(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= '0' && c <= '9' {
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// decimalRE accepts plain decimals with an optional short exponent; the
// exponent is bounded so that a hostile value cannot make a huge number.
var decimalRE = regexp.MustCompile(`^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d{1,3})?$`)

// maxDecimalDigits bounds a canonical decimal's length: a value longer than
// this is refused rather than keyed.
const maxDecimalDigits = 256

// canonicalDecimal writes a decimal number in its shortest exact form:
// "001.500" → "1.5", "-0.0" → "0", "1e3" → "1000".
func canonicalDecimal(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) > maxDecimalDigits || !decimalRE.MatchString(s) {
		return "", fmt.Errorf("%q is not a decimal number (want digits with an optional point, such as 125.50)", Shorten(s, 40))
	}
	return exactDecimal(s)
}

// exactDecimal writes a number that decimalRE (or JSON's grammar with a
// bounded exponent) accepted in its shortest exact decimal form.
func exactDecimal(s string) (string, error) {
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", fmt.Errorf("%q is not a decimal number", Shorten(s, 40))
	}
	// The denominator of a decimal is 2^a·5^b; max(a, b) fractional digits
	// write it exactly.
	d := new(big.Int).Set(r.Denom())
	twos, fives := 0, 0
	for d.Bit(0) == 0 && d.Sign() > 0 {
		d.Rsh(d, 1)
		twos++
	}
	five, rem := big.NewInt(5), new(big.Int)
	for {
		q, m := new(big.Int).QuoRem(d, five, rem)
		if m.Sign() != 0 {
			break
		}
		d = q
		fives++
	}
	places := max(twos, fives)
	out := r.FloatString(places)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	if out == "-0" {
		out = "0"
	}
	if len(out) > maxDecimalDigits {
		return "", fmt.Errorf("%q is too large or too precise a number to key exactly (more than %d digits written out)", Shorten(s, 40), maxDecimalDigits)
	}
	return out, nil
}

// canonicalNumber writes a JSON number by its value, so that 1, 1.0 and 1e0
// are one key and -0 is 0. Integers, the usual case, are copied.
func canonicalNumber(n json.Number) (string, error) {
	s := string(n)
	if isPlainInteger(s) {
		return s, nil
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		// An exponent beyond three digits would write out a number larger
		// than any key can hold; refuse it before big.Rat builds it.
		exp := strings.TrimLeft(s[i+1:], "+-")
		if e, err := strconv.Atoi(exp); err != nil || e > maxDecimalDigits+len(s) {
			return "", fmt.Errorf("the number %s is too large or too precise to key exactly (more than %d digits written out)", Shorten(s, 40), maxDecimalDigits)
		}
	}
	return exactDecimal(s)
}

// isPlainInteger reports whether s is a JSON integer already in canonical
// form: no leading zeros, no "-0".
func isPlainInteger(s string) bool {
	if s == "" || s == "-0" {
		return false
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || len(digits) > maxDecimalDigits {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return false
		}
	}
	return true
}

// Shorten cuts s to at most n bytes, at a rune boundary so that the cut
// text stays valid UTF-8, and marks the cut with "…": for quoting a
// caller's input or an upstream's answer in an error message.
func Shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// Normalize applies one named normalizer to a value, as a natural key does:
// the text in NFC before and after.
func Normalize(name, value string) (string, error) {
	f, ok := normalizers[name]
	if !ok {
		return "", Errorf(CodeInvalidArgument, "%q is not a normalizer: want one of %s", name, strings.Join(NormalizerNames(), ", "))
	}
	out, err := f(toNFC(value))
	if err != nil {
		return "", err
	}
	return toNFC(out), nil
}
