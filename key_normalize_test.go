package airlock_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock"
	"golang.org/x/text/unicode/norm"
)

// normVector is one case of testdata/key-normalization.json: two values of
// one natural-key field under a list of normalizers, and whether they are one
// key. Values are raw JSON, so numbers reach the key as a client sends them.
type normVector struct {
	Name      string          `json:"name"`
	Normalize []string        `json:"normalize"`
	A         json.RawMessage `json:"a"`
	B         json.RawMessage `json:"b"`
	Same      bool            `json:"same"`
	ValueA    string          `json:"value_a"`
	ValueB    string          `json:"value_b"`
	Error     string          `json:"error"`
}

// keyTool is a tool keyed by one field "id" under the given normalizers,
// once ever, so that only the value decides the key.
func keyTool(normalize []string) *airlock.Tool {
	return &airlock.Tool{
		Name:       "keyed",
		NaturalKey: []airlock.KeyField{{Field: "id", Normalize: normalize}},
		Window:     &airlock.Window{Kind: airlock.WindowForever},
	}
}

func deriveValue(tool *airlock.Tool, raw json.RawMessage) (*airlock.Derivation, error) {
	args, err := airlock.ParseArgs([]byte(`{"id":` + string(raw) + `}`))
	if err != nil {
		return nil, err
	}
	return airlock.DeriveKey(airlock.KeyInput{Tool: tool, Args: args, At: time.Unix(0, 0)})
}

func TestGoldenKeyNormalization(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("testdata/key-normalization.json")
	if err != nil {
		t.Fatal(err)
	}
	var vectors []normVector
	if err := json.Unmarshal(raw, &vectors); err != nil {
		t.Fatal(err)
	}
	if len(vectors) < 40 {
		t.Fatalf("%d vectors: the file lost cases", len(vectors))
	}
	for _, v := range vectors {
		t.Run(v.Name, func(t *testing.T) {
			t.Parallel()
			tool := keyTool(v.Normalize)
			a, err := deriveValue(tool, v.A)
			if v.Error != "" {
				if err == nil || !strings.Contains(err.Error(), v.Error) {
					t.Fatalf("%s: error %v, want one containing %q", v.A, err, v.Error)
				}
				if airlock.ErrorCode(err) != airlock.CodeInvalidArgument {
					t.Fatalf("%s: code %s, want %s", v.A, airlock.ErrorCode(err), airlock.CodeInvalidArgument)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := deriveValue(tool, v.B)
			if err != nil {
				t.Fatal(err)
			}
			if got := a.Parts.Fields[0].Value; got != v.ValueA {
				t.Errorf("a %s normalizes to %+q, want %+q", v.A, got, v.ValueA)
			}
			if got := b.Parts.Fields[0].Value; got != v.ValueB {
				t.Errorf("b %s normalizes to %+q, want %+q", v.B, got, v.ValueB)
			}
			if same := a.Key == b.Key; same != v.Same {
				t.Errorf("%s and %s: one key %v, want %v", v.A, v.B, same, v.Same)
			}
		})
	}
}

// TestCaseNormalizersNeverMergeIdentities checks every code point: upper
// and lower put two characters together only when each is the other's case,
// so neither folds one record into another's key (docs/concepts.md).
func TestCaseNormalizersNeverMergeIdentities(t *testing.T) {
	t.Parallel()
	upperOf := map[string][]rune{}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if r >= 0xD800 && r <= 0xDFFF {
			continue
		}
		s := string(r)
		if !norm.NFC.IsNormalString(s) {
			continue // such a character reaches the normalizers composed
		}
		u, _ := airlock.Normalize("upper", s)
		l, _ := airlock.Normalize("lower", s)
		// The pair {lower, upper} is the same seen from either side.
		if ul, _ := airlock.Normalize("lower", u); ul != l {
			t.Errorf("U+%04X: upper %+q lowers to %+q, but lower is %+q", r, u, ul, l)
		}
		if lu, _ := airlock.Normalize("upper", l); lu != u {
			t.Errorf("U+%04X: lower %+q uppers to %+q, but upper is %+q", r, l, lu, u)
		}
		upperOf[u] = append(upperOf[u], r)
	}
	for u, rs := range upperOf {
		if len(rs) > 2 {
			t.Errorf("%+q is upper of %d characters %q: more than one case pair", u, len(rs), string(rs))
		}
	}
}

// FuzzKeyNormalization: two values with one key normalize to one text, a
// normalized value keys as itself (normalizing twice changes nothing), and
// the text that is hashed is NFC.
func FuzzKeyNormalization(f *testing.F) {
	for _, s := range []string{"WD-ı", "WD-I", "ſ", "ǆ", "cafe\u0301", "WD\u200b-1", "１２３", "\u00a0x", "1.0", "-0"} {
		f.Add(s, s+"\u0301", uint8(0))
	}
	names := [][]string{{}, {"upper"}, {"lower"}, {"trim", "upper"}, {"strip_ignorable"}, {"nfkc"}, {"nfkc", "strip_ignorable", "trim", "lower"}}
	f.Fuzz(func(t *testing.T, a, b string, pick uint8) {
		if !utf8.ValidString(a) || !utf8.ValidString(b) {
			return
		}
		tool := keyTool(names[int(pick)%len(names)])
		da, errA := deriveValue(tool, mustJSON(t, a))
		db, errB := deriveValue(tool, mustJSON(t, b))
		if errA != nil || errB != nil {
			return
		}
		va, vb := da.Parts.Fields[0].Value, db.Parts.Fields[0].Value
		if (da.Key == db.Key) != (va == vb) {
			t.Fatalf("%+q and %+q: one key %v, but values %+q and %+q", a, b, da.Key == db.Key, va, vb)
		}
		if !norm.NFC.IsNormalString(va) {
			t.Fatalf("%+q normalizes to %+q, not NFC", a, va)
		}
		again, err := deriveValue(tool, mustJSON(t, va))
		if err != nil {
			t.Fatalf("the normalized value %+q of %+q is refused: %v", va, a, err)
		}
		if again.Key != da.Key {
			t.Fatalf("%+q normalizes to %+q, which normalizes to %+q: not idempotent", a, va, again.Parts.Fields[0].Value)
		}
	})
}

func mustJSON(t *testing.T, s string) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWarningsNameKeyFieldsOfOpenType(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		prop   map[string]any
		expect string // "" for no warning
	}{
		{"string", map[string]any{"type": "string"}, ""},
		{"number", map[string]any{"type": "number"}, ""},
		{"integer or null", map[string]any{"type": []any{"integer", "null"}}, ""},
		{"no type", map[string]any{"description": "the id"}, "has no type"},
		{"string or number", map[string]any{"type": []any{"string", "number"}}, "may be any of string, number"},
		{"object", map[string]any{"type": "object"}, "is of type object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tool := keyTool(nil)
			tool.Kind = airlock.KindWrite
			tool.InputSchema = map[string]any{"type": "object", "properties": map[string]any{"id": tc.prop}}
			ws := (&airlock.Catalog{Tools: []*airlock.Tool{tool}}).Warnings()
			switch {
			case tc.expect == "" && len(ws) != 0:
				t.Fatalf("warnings %v, want none", ws)
			case tc.expect != "" && (len(ws) != 1 || !strings.Contains(ws[0].Message, tc.expect) || ws[0].Path != "tools[0].natural_key[0].field"):
				t.Fatalf("warnings %v, want one at tools[0].natural_key[0].field saying %q", ws, tc.expect)
			}
		})
	}
}
