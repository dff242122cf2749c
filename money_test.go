package airlock_test

import (
	"encoding/json"
	"maps"
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
		{123456789, "XYZ", "1,234,567.89 XYZ"}, // not a currency: two digits
		{1000, "CLP", "1,000 CLP"},
		{1000, "BHD", "1.000 BHD"},
		{100, "", "1.00"},
		{math.MinInt64, "USD", "-92,233,720,368,547,758.08 USD"},
	} {
		if got := airlock.FormatMoney(tc.minor, tc.currency); got != tc.want {
			t.Errorf("FormatMoney(%d, %q) = %q, want %q", tc.minor, tc.currency, got, tc.want)
		}
	}
}

func TestToolMoneyAndNote(t *testing.T) {
	t.Parallel()
	tool := &airlock.Tool{Name: "pay", Kind: airlock.KindIrreversible, Display: &airlock.Display{
		Money: []airlock.MoneyField{
			{Amount: "facts.amount_minor", Currency: "facts.currency"},
			{Amount: "args.fee.minor", Currency: "EUR"},
			{Amount: "args.bad", Currency: "USD"},
			{Amount: "facts.other", Currency: "facts.nocode"},
			{Amount: "facts.other", Currency: "XYZ"},      // not a currency: the raw value shows
			{Amount: "args.odd", Currency: "args.oddcur"}, // "uſd" is not USD, though ToUpper makes it so
		},
		Note: "args.note",
	}}
	args := json.RawMessage(`{"record_id":"WD-1","fee":{"minor":1250},"bad":12.5,"note":"customer called","odd":100,"oddcur":"u\u017fd"}`)
	facts := json.RawMessage(`{"amount_minor":250000,"currency":"usd","other":5}`)
	got := tool.Money(args, facts)
	want := map[string]string{"facts.amount_minor": "2,500.00 USD", "args.fee.minor": "12.50 EUR"}
	if !maps.Equal(got, want) {
		t.Fatalf("Money = %v, want %v (a fraction and a missing currency left raw)", got, want)
	}
	if n := tool.AgentNote(args); n != "customer called" {
		t.Fatalf("AgentNote = %q", n)
	}
	if n := (&airlock.Tool{}).AgentNote(args); n != "" {
		t.Fatalf("AgentNote without display = %q", n)
	}
	if m := (&airlock.Tool{}).Money(args, facts); m != nil {
		t.Fatalf("Money without display = %v", m)
	}
}
