package ui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/airlockhq/airlock"
)

// How the page shows what agents and services wrote (docs/hardening.md,
// "text that cannot disguise itself"): every invisible character
// (airlock.Invisible) as a badge naming it, so that a zero-width space or
// a right-to-left override is seen and does nothing; long values cut,
// with their full length said and the whole a link away.

const (
	// maxCell bounds a value in a list's cell (the work, the facts, the
	// run): a page of 100 plans stays light whatever the agents send.
	maxCell = 200
	// maxShownString bounds a string in the arguments, facts or result a
	// plan's page shows; the whole is at /ui/plans/{id}/arguments.json.
	maxShownString = 1000
	// maxShownJSON bounds the indented text of one value on a plan's page
	// (deep nesting indents every level): past it, the rest is a link away.
	maxShownJSON = 64 << 10
)

// invisibleNames name the invisible characters an approver is likeliest
// to meet; the others show their code point only.
var invisibleNames = map[rune]string{
	0x09: "tab", 0x0a: "line feed", 0x0d: "carriage return", 0x1b: "escape", 0x7f: "delete",
	0xa0: "no-break space", 0xad: "soft hyphen", 0x061c: "Arabic letter mark",
	0x200b: "zero-width space", 0x200c: "zero-width non-joiner", 0x200d: "zero-width joiner",
	0x200e: "left-to-right mark", 0x200f: "right-to-left mark",
	0x202a: "left-to-right embedding", 0x202b: "right-to-left embedding", 0x202c: "pop directional formatting",
	0x202d: "left-to-right override", 0x202e: "right-to-left override",
	0x2060: "word joiner", 0x2066: "left-to-right isolate", 0x2067: "right-to-left isolate",
	0x2068: "first strong isolate", 0x2069: "pop directional isolate",
	0x2028: "line separator", 0x2029: "paragraph separator", 0xfeff: "zero-width no-break space (byte-order mark)",
}

// badge is invisible character r as the page shows it.
func badge(b *strings.Builder, r rune) {
	name := invisibleNames[r]
	if name == "" {
		name = "an invisible or control character"
	}
	fmt.Fprintf(b, `<span class="invisible" title="%s">U+%04X</span>`, name, r)
}

// writeShown writes s as HTML: escaped, each invisible character a badge.
func writeShown(b *strings.Builder, s string) { writeShownWithin(b, s, -1, false) }

// writeShownWithin is writeShown stopping once it has written more than
// budget bytes (a badge is some 70 bytes for a 3-byte character, so the
// page is bounded by what it writes, not by what it was given); it reports
// whether it stopped early. budget < 0: no bound. layout: s is indented
// JSON, whose line feeds are its layout (a string's own are escaped), so
// they stay line feeds.
func writeShownWithin(b *strings.Builder, s string, budget int, layout bool) (cut bool) {
	limit := b.Len() + budget
	start := 0
	for i, r := range s {
		if budget >= 0 && b.Len()+(i-start) > limit {
			template.HTMLEscape(b, []byte(s[start:i]))
			return true
		}
		if airlock.Invisible(r) && (!layout || r != '\n') {
			template.HTMLEscape(b, []byte(s[start:i]))
			badge(b, r)
			start = i + utf8.RuneLen(r)
		}
	}
	template.HTMLEscape(b, []byte(s[start:]))
	return false
}

// shown is s as a list's cell shows it: invisible characters as badges,
// cut at max bytes (or where its badges make it four times that) with its
// full length said.
func shown(s string, max int) template.HTML {
	var b strings.Builder
	if cut := writeShownWithin(&b, airlock.Shorten(s, max), 4*max, false); cut || len(s) > max {
		fmt.Fprintf(&b, ` <span class="cut">(%d bytes in all)</span>`, len(s))
	}
	return template.HTML(b.String())
}

// cell is s in a list's cell.
func cell(s string) template.HTML { return shown(s, maxCell) }

// shownJSON is a JSON value as a plan's page shows it: indented, each
// string over maxShownString bytes cut with its length said, invisible
// characters as badges. A value that is not JSON is shown as text.
func shownJSON(raw json.RawMessage) template.HTML {
	if len(raw) == 0 {
		return "—"
	}
	out, _ := displayJSON(raw)
	var b strings.Builder
	if writeShownWithin(&b, string(out), maxShownJSON, true) {
		fmt.Fprintf(&b, "\n[… cut here: the value is %d bytes as sent]", len(raw))
	}
	return template.HTML(b.String())
}

// planPart is a plan's arguments, facts or result as its page shows them:
// shownJSON in a <pre id=id>, and, when it was cut, a link to the whole
// (/ui/plans/{planID}/{name}.json).
func planPart(planID, id, name string, raw json.RawMessage) template.HTML {
	if len(raw) == 0 {
		return template.HTML(`<pre id="` + id + `">—</pre>`)
	}
	out, cut := displayJSON(raw)
	var b strings.Builder
	b.WriteString(`<pre id="` + id + `">`)
	if writeShownWithin(&b, string(out), maxShownJSON, true) {
		fmt.Fprintf(&b, "\n[… cut here: the value is %d bytes as sent; the whole is a link away]", len(raw))
		cut = true
	}
	b.WriteString(`</pre>`)
	if cut {
		fmt.Fprintf(&b, `<p><a href="/ui/plans/%s/%s.json" id="whole-%s">The whole %s (%d bytes)</a></p>`,
			template.HTMLEscapeString(url.PathEscape(planID)), name, id, name, len(raw))
	}
	return template.HTML(b.String())
}

// displayJSON is raw indented, its long strings cut; cut reports whether
// one was. Member order is kept.
func displayJSON(raw []byte) (out []byte, cut bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	var buf bytes.Buffer
	enc := jsontext.NewEncoder(&buf, jsontext.WithIndent("  "), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return raw, false
		}
		if tok.Kind() == '"' {
			if s := tok.String(); len(s) > maxShownString {
				tok, cut = jsontext.String(fmt.Sprintf("%s [%d bytes in all]", airlock.Shorten(s, maxShownString), len(s))), true
			}
		}
		if err := enc.WriteToken(tok); err != nil {
			return raw, false
		}
		if buf.Len() > maxShownJSON {
			b, n := buf.Bytes(), maxShownJSON
			for n > 0 && !utf8.RuneStart(b[n]) {
				n--
			}
			out := append(bytes.Clone(b[:n]), fmt.Sprintf("\n[… cut here: the value is %d bytes as sent; the whole is a link away]", len(raw))...)
			return out, true
		}
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), cut
}

// revealRest writes every invisible character left in a rendered page,
// but the tab, the newline and the carriage return of the markup, as
// [U+XXXX] text: what a template shows without a badge still cannot hide
// or reorder itself. The page's own markup holds none; only data can.
func revealRest(page []byte) []byte {
	return airlock.ReplaceInvisible(page, func(dst []byte, r rune) []byte { return fmt.Appendf(dst, "[U+%04X]", r) })
}

// maxFieldRows bounds the rows of one value's labelled fields on a plan's
// page: past it, the rest is a link away.
const maxFieldRows = 500

// planFields is a plan's arguments or facts as labelled fields, one leaf a
// row in the order the value holds them ("payee.account", "items[0]"),
// strings shown with their invisible characters as badges and cut at
// maxShownString, money the tool's display names formatted beside its raw
// value; the whole is a link away (/ui/plans/{planID}/{name}.json). src is
// "args" or "facts", the prefix money's references use. A value that is
// not a JSON object is shown as planPart shows it.
func planFields(planID, id, name string, raw json.RawMessage, money map[string]string, src string) template.HTML {
	if len(bytes.TrimSpace(raw)) == 0 || bytes.TrimSpace(raw)[0] != '{' {
		return planPart(planID, id, name, raw)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<table class="fields" id="%s">`, id)
	rows, cut := 0, false
	err := walkLeaves(raw, func(shown, ref string, isString bool, text string) bool {
		if rows == maxFieldRows || b.Len() > maxShownJSON {
			cut = true
			return false
		}
		rows++
		b.WriteString(`<tr><th>`)
		writeShown(&b, airlock.Shorten(shown, maxCell))
		b.WriteString(`</th><td>`)
		switch {
		case isString:
			s := text
			if writeShownWithin(&b, airlock.Shorten(s, maxShownString), 4*maxShownString, false) || len(s) > maxShownString {
				fmt.Fprintf(&b, ` <span class="cut">[%d bytes in all]</span>`, len(s))
				cut = true
			}
		case money[src+"."+ref] != "":
			fmt.Fprintf(&b, `<strong class="money">%s</strong> <small>%s</small>`, template.HTMLEscapeString(money[src+"."+ref]), template.HTMLEscapeString(text))
		default:
			template.HTMLEscape(&b, []byte(text))
		}
		b.WriteString(`</td></tr>`)
		return true
	})
	if err != nil {
		return planPart(planID, id, name, raw)
	}
	b.WriteString(`</table>`)
	link := "As JSON"
	if cut {
		link = fmt.Sprintf("The whole %s (%d bytes)", name, len(raw))
	}
	fmt.Fprintf(&b, `<p><small><a href="/ui/plans/%s/%s.json" id="whole-%s">%s</a></small></p>`,
		template.HTMLEscapeString(url.PathEscape(planID)), name, id, link)
	return template.HTML(b.String())
}

// walkLeaves calls leaf for each scalar (and empty object or array) of a
// JSON value, in order, with its path as shown ("payee.account",
// "items[0]") and as a reference ("items.0", as airlock.LookupPath reads
// it), whether it is a string, and its text (a string's value, or the
// literal: 12, true, null, {}); leaf returns false to stop.
func walkLeaves(raw []byte, leaf func(shown, ref string, isString bool, text string) bool) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	type frame struct {
		shown, ref string
		array      bool
		index      int
		name       string // an object's member name, read before its value
		named      bool
		empty      bool
	}
	var stack []*frame
	// path is where the next value sits.
	path := func() (string, string) {
		if len(stack) == 0 {
			return "", ""
		}
		f := stack[len(stack)-1]
		seg, refSeg := f.name, f.name
		if strings.Contains(f.name, ".") {
			// A member named "obj.a" is not obj's member a: it names no
			// reference, so no money is shown for it.
			refSeg = "\x00" + f.name
		}
		if f.array {
			seg, refSeg = fmt.Sprintf("[%d]", f.index), fmt.Sprint(f.index)
		}
		shown, ref := f.shown, f.ref
		if f.array {
			return shown + seg, join(ref, refSeg)
		}
		return join(shown, seg), join(ref, refSeg)
	}
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && !top.array && !top.named && tok.Kind() == '"' {
			top.name, top.named = tok.String(), true // a member's name
			continue
		}
		switch tok.Kind() {
		case '{', '[':
			s, r := path()
			if top != nil {
				top.empty = false
			}
			stack = append(stack, &frame{shown: s, ref: r, array: tok.Kind() == '[', empty: true})
			continue
		case '}', ']':
			f := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if f.empty && len(stack) > 0 {
				if !leaf(f.shown, f.ref, false, map[bool]string{true: "[]", false: "{}"}[f.array]) {
					return nil
				}
			}
		default:
			s, r := path()
			if top != nil {
				top.empty = false
			}
			if !leaf(s, r, tok.Kind() == '"', tok.String()) {
				return nil
			}
		}
		// A value ended: the enclosing frame moves on.
		if len(stack) > 0 {
			f := stack[len(stack)-1]
			f.index++
			f.named = false
		}
	}
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}
