package airlock_test

import (
	"math"
	"testing"

	"github.com/airlockhq/airlock"
)

func TestFormatMoney(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minor    int64
		currency string
		want     string
	}{
		{250000, "USD", "2,500.00 USD"},
		{100000, "usd", "1,000.00 USD"},
		{12500, "USD", "125.00 USD"},
		{5, "EUR", "0.05 EUR"},
		{0, "USD", "0.00 USD"},
		{-9900, "USD", "-99.00 USD"},
		{1200, "JPY", "1,200 JPY"},
		{1500, "KWD", "1.500 KWD"},
		{123456789, "XYZ", "1,234,567.89 XYZ"},
		{100, "", "1.00"},
		{math.MinInt64, "USD", "-92,233,720,368,547,758.08 USD"},
	} {
		if got := airlock.FormatMoney(tc.minor, tc.currency); got != tc.want {
			t.Errorf("FormatMoney(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}
