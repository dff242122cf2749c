package airlock

import "testing"

func TestFoldedNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args, field, a, b string
	}{
		{"distinct", `{"accountId":"A","amount":1}`, "", "", ""},
		{"case", `{"accountId":"A","accountid":"B"}`, "accountid", "accountId", "accountid"},
		{"nested under anything", `{"payout":{"accountId":"A","ACCOUNTID":"B"}}`, "payout.accountId", "ACCOUNTID", "accountId"},
		{"in an array", `{"lines":[{"x":1},{"Id":1,"id":2}]}`, "lines.1.id", "Id", "id"},
		{"full folding", `{"straße":1,"strasse":2}`, "straße", "strasse", "straße"},
		{"compatibility", `{"ﬁle":1,"file":2}`, "ﬁle", "file", "ﬁle"},
		{"an invisible character", "{\"accountId\":1,\"account\u200bId\":2}", "account\u200bId", "accountId", "account\u200bId"},
		{"Kelvin sign", "{\"k\":1,\"\u212a\":2}", "\u212a", "k", "\u212a"},
	} {
		args, err := ParseArgs([]byte(tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		field, a, b := FoldedNames(args, "")
		if field != tc.field || a != tc.a || b != tc.b {
			t.Errorf("%s: FoldedNames = %q %q %q, want %q %q %q", tc.name, field, a, b, tc.field, tc.a, tc.b)
		}
	}
}
