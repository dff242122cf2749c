package airlock

import "testing"

func TestFoldedNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, args, where, a, b string
	}{
		{"distinct", `{"accountId":"A","amount":1}`, "", "", ""},
		{"case", `{"accountId":"A","accountid":"B"}`, "", "accountId", "accountid"},
		{"nested under anything", `{"payout":{"accountId":"A","ACCOUNTID":"B"}}`, "payout", "ACCOUNTID", "accountId"},
		{"in an array", `{"lines":[{"x":1},{"Id":1,"id":2}]}`, "lines.1", "Id", "id"},
		{"full folding", `{"straße":1,"strasse":2}`, "", "strasse", "straße"},
		{"compatibility", `{"ﬁle":1,"file":2}`, "", "file", "ﬁle"},
		{"an invisible character", "{\"accountId\":1,\"account\u200bId\":2}", "", "accountId", "account\u200bId"},
		{"Kelvin sign", "{\"k\":1,\"\u212a\":2}", "", "k", "\u212a"},
	} {
		args, err := ParseArgs([]byte(tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		where, a, b := FoldedNames(args, "")
		if where != tc.where || a != tc.a || b != tc.b {
			t.Errorf("%s: FoldedNames = %q %q %q, want %q %q %q", tc.name, where, a, b, tc.where, tc.a, tc.b)
		}
	}
}
