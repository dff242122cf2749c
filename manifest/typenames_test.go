package manifest

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
)

// The words an unknown-field error uses list every field of the type in
// the file, in the struct's order: a field added to a type must be added
// to its words.
func TestTypeNamesListEveryField(t *testing.T) {
	t.Parallel()
	listed := regexp.MustCompile(`\(([^()]*)\)$`)
	for _, v := range []any{Manifest{}, Retention{}, Limits{}, Notify{}, airlock.Calendar{},
		Auth{}, OIDCSpec{}, IssuerSpec{}, TokenSpec{}, Upstream{}, MCPUpstream{},
		airlock.Tool{}, airlock.Reconcile{}, airlock.KeyField{}, airlock.ToolUpstream{}, airlock.Answers{}, airlock.Approval{},
		airlock.Lookup{}, airlock.Rule{}} {
		typ := reflect.TypeOf(v)
		words, ok := typeNames[typ.String()]
		if !ok {
			t.Errorf("%s has no words in typeNames", typ)
			continue
		}
		fields := yamlFields(typ)
		m := listed.FindStringSubmatch(words)
		if m == nil {
			t.Errorf("%s: %q lists no fields", typ, words)
			continue
		}
		got := strings.Split(m[1], ", ")
		if !slices.Equal(sortedCopy(got), sortedCopy(fields)) {
			t.Errorf("%s: the words list %v; the struct has %v", typ, got, fields)
		}
	}
}

func sortedCopy(s []string) []string { c := slices.Clone(s); slices.Sort(c); return c }

// yamlFields are the names a type's fields have in the file, those of an
// inline field's type included.
func yamlFields(typ reflect.Type) []string {
	var fields []string
	for f := range typ.Fields() {
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case opts == "inline":
			fields = append(fields, yamlFields(f.Type)...)
		case name != "" && name != "-":
			fields = append(fields, name)
		}
	}
	return fields
}
