package airlock

import (
	"strconv"
	"strings"
)

// minorUnitDigits are the ISO 4217 currencies whose minor unit is not a
// hundredth: none (JPY) or a thousandth (KWD). Every other code has two.
var minorUnitDigits = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
}

// FormatMoney writes an amount given in a currency's minor units as a
// person reads it: 250000 USD is "2,500.00 USD", 1200 JPY "1,200 JPY",
// 1500 KWD "1.500 KWD" (ISO 4217 minor units; two digits when the code is
// not known to have other).
func FormatMoney(minor int64, currency string) string {
	currency = strings.ToUpper(strings.TrimSpace(currency))
	digits, ok := minorUnitDigits[currency]
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
	if currency != "" {
		b.WriteByte(' ')
		b.WriteString(currency)
	}
	return b.String()
}
