package ui

import (
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
