package ui

import (
	"encoding/json"
	"strings"
	"testing"
)

// What a template shows without a badge is still revealed: the rendered
// page keeps its markup's layout and shows any other invisible character
// as [U+XXXX].
func TestRevealRestOfAPage(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"<p>plain</p>\n\t<p>é</p>\r\n":      "<p>plain</p>\n\t<p>é</p>\r\n",
		"<td>a\u202eb</td>":                 "<td>a[U+202E]b</td>",
		`<input value="x` + "\u200b" + `">`: `<input value="x[U+200B]">`,
		"<td>\x1b[2K</td>":                  "<td>[U+001B][2K</td>",
	} {
		if got := string(revealRest([]byte(in))); got != want {
			t.Errorf("revealRest(%q) = %q, want %q", in, got, want)
		}
	}
}

// Deep nesting does not blow the page up: the indented text of one value
// stops at 64 KB and says it is cut.
func TestDeepNestingIsCut(t *testing.T) {
	t.Parallel()
	raw := []byte(`{"record_id":"WD-1","lines":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`)
	out, cut := displayJSON(raw)
	if !cut || len(out) > maxShownJSON+200 || !strings.Contains(string(out), "cut here") {
		t.Fatalf("2,000 levels: %d bytes shown, cut %v", len(out), cut)
	}
}

// Indented JSON keeps its line feeds as line feeds (a string's own are
// escaped in it), and what it writes is bounded, badges and all.
func TestShownJSONLayoutAndBound(t *testing.T) {
	t.Parallel()
	if got := string(shownJSON(json.RawMessage(`{"a":[1,2],"s":"x\ny"}`))); strings.Contains(got, "U+000A") || strings.Count(got, "\n") != 6 {
		t.Fatalf("indented JSON: %q", got)
	}
	items := make([]string, 300)
	for i := range items {
		items[i] = strings.Repeat("\u200b", 333)
	}
	raw, _ := json.Marshal(items)
	if got := planPart("pl_1", "result", "result", raw); len(got) > maxShownJSON+4<<10 || !strings.Contains(string(got), "cut here") || !strings.Contains(string(got), `id="whole-result"`) {
		t.Fatalf("300 strings of zero-width spaces: %d bytes written", len(got))
	}
}

// Money is shown for the member its reference names: a member named
// "obj.a" is not obj's member a.
func TestMoneyOnlyWhereItsReferencePoints(t *testing.T) {
	t.Parallel()
	got := string(planFields("pl_1", "args", "arguments", json.RawMessage(`{"obj":{"a":100},"obj.a":99999999}`), map[string]string{"args.obj.a": "1.00 USD"}, "args"))
	if strings.Count(got, `class="money"`) != 1 || !strings.Contains(got, `<strong class="money">1.00 USD</strong> <small>100</small>`) || !strings.Contains(got, "<td>99999999</td>") {
		t.Fatalf("money beside the wrong value:\n%s", got)
	}
}
