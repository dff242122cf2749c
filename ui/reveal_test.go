package ui

import "testing"

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
