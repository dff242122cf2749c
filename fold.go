package airlock

import (
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// FoldName is a member name as a lenient reader might match it: its
// invisible characters dropped, NFKC-normalized and case-folded in full
// (ß as ss, ﬁ as fi). Two names with one FoldName are one name to a
// service that decodes without regard to case — Go's encoding/json, a
// Python casefold — so a tool that changes something never takes both
// (docs/gateway.md, "Declared arguments only").
func FoldName(s string) string {
	if ascii(s) {
		return strings.ToLower(s)
	}
	s = strings.Map(func(r rune) rune {
		if Invisible(r) {
			return -1
		}
		return r
	}, s)
	return cases.Fold().String(norm.NFKC.String(s))
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// FoldedNames finds, at any depth of v (parsed JSON), an object with two
// member names of one FoldName: the path of the second (under path) and
// the two names, in order; "" when there is none.
func FoldedNames(v any, path string) (field, a, b string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) > 1 {
			if a, b := foldedPair(x); a != "" {
				return joinPath(path, b), a, b
			}
		}
		for k, e := range x {
			switch e.(type) {
			case map[string]any, []any:
				if w, a, b := FoldedNames(e, joinPath(path, k)); a != "" {
					return w, a, b
				}
			}
		}
	case []any:
		for i, e := range x {
			if w, a, b := FoldedNames(e, joinPath(path, strconv.Itoa(i))); a != "" {
				return w, a, b
			}
		}
	}
	return "", "", ""
}

// foldedPair is two names of x with one FoldName (sorted), or "".
func foldedPair(x map[string]any) (string, string) {
	// The common case: a few ASCII names, compared without allocating.
	if len(x) <= 32 {
		simple := true
		for k := range x {
			if !ascii(k) {
				simple = false
				break
			}
		}
		if simple {
			for k := range x {
				for m := range x {
					if k < m && strings.EqualFold(k, m) {
						return k, m
					}
				}
			}
			return "", ""
		}
	}
	names := make([]string, 0, len(x))
	for k := range x {
		names = append(names, k)
	}
	sort.Strings(names)
	seen := make(map[string]string, len(names))
	for _, k := range names {
		f := FoldName(k)
		if first, ok := seen[f]; ok {
			return first, k
		}
		seen[f] = k
	}
	return "", ""
}
