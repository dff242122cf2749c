package airlock

import (
	"strconv"
	"strings"

	"golang.org/x/text/currency"
)

// MinorUnitDigits is how many digits of a currency's amount are its minor
// unit, by ISO 4217 as CLDR keeps it (golang.org/x/text/currency): 2 for
// USD, 0 for JPY, 3 for KWD; false for a code that is not a currency.
func MinorUnitDigits(code string) (int, bool) {
	u, err := currency.ParseISO(strings.ToUpper(strings.TrimSpace(code)))
	if err != nil {
		return 0, false
	}
	scale, _ := currency.Standard.Rounding(u)
	return scale, true
}

// FormatMoney writes an amount given in a currency's minor units as a
// person reads it: 250000 USD is "2,500.00 USD", 1200 JPY "1,200 JPY",
// 1500 KWD "1.500 KWD" (MinorUnitDigits; two digits for a code that is
// not a currency).
func FormatMoney(minor int64, code string) string {
	code = strings.ToUpper(strings.TrimSpace(code))
	digits, ok := MinorUnitDigits(code)
	if !ok {
		digits = 2
	}
	sign := ""
	u := uint64(minor)
	if minor < 0 {
		sign, u = "-", uint64(-(minor+1))+1 // math.MinInt64 too
	}
	s := strconv.FormatUint(u, 10)
	if len(s) <= digits {
		s = strings.Repeat("0", digits-len(s)+1) + s
	}
	whole, frac := s[:len(s)-digits], s[len(s)-digits:]
	var b strings.Builder
	b.WriteString(sign)
	for i, r := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if digits > 0 {
		b.WriteByte('.')
		b.WriteString(frac)
	}
	if code != "" {
		b.WriteByte(' ')
		b.WriteString(code)
	}
	return b.String()
}
