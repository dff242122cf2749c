package airlock

import (
	"fmt"
	"math/big"
	"regexp"
	"sort"
	"strings"
)

// A normalizer turns a natural-key value into its canonical text, so that
// the same work gives the same key whatever whitespace or case the model used.
type normalizer func(string) (string, error)

var normalizers = map[string]normalizer{
	"trim":    func(s string) (string, error) { return strings.TrimSpace(s), nil },
	"upper":   func(s string) (string, error) { return strings.ToUpper(s), nil },
	"lower":   func(s string) (string, error) { return strings.ToLower(s), nil },
	"digits":  digitsOnly,
	"decimal": canonicalDecimal,
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

// canonicalDecimal writes a decimal number in its shortest exact form:
// "001.500" → "1.5", "-0.0" → "0", "1e3" → "1000".
func canonicalDecimal(s string) (string, error) {
	s = strings.TrimSpace(s)
	if len(s) > 256 || !decimalRE.MatchString(s) {
		return "", fmt.Errorf("%q is not a decimal number (want digits with an optional point, such as 125.50)", truncate(s, 40))
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return "", fmt.Errorf("%q is not a decimal number", truncate(s, 40))
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
	if len(out) > 256 {
		return "", fmt.Errorf("%q is too large or too precise a decimal (more than 256 digits written out)", truncate(s, 40))
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Normalize applies one named normalizer to a value.
func Normalize(name, value string) (string, error) {
	f, ok := normalizers[name]
	if !ok {
		return "", Errorf(CodeInvalidArgument, "%q is not a normalizer: want one of %s", name, strings.Join(NormalizerNames(), ", "))
	}
	return f(value)
}
