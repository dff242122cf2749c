package airlock

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// KeyVersion is the first element of the canonical form. It changes only if
// the derivation changes, so that old and new keys can never collide.
const KeyVersion = "airlock.key/v1"

// KeyInput is everything a key is derived from.
type KeyInput struct {
	Tool     *Tool
	Calendar *Calendar      // for business_day windows; nil means UTC, no cutoff, no holidays
	Args     map[string]any // decoded with ParseArgs
	At       time.Time      // the time of the call
	RunID    string         // required for the run window
}

// KeyPart is one natural-key field as it went into the key.
type KeyPart struct {
	Field string `json:"field"`
	Input string `json:"input"` // the value as the caller sent it (as text)
	Value string `json:"value"` // after the normalizers
}

// KeyParts are the parts of a key, for `airlock key` and for people asking
// why two calls did or did not collide.
type KeyParts struct {
	Tool        string    `json:"tool"`
	Fields      []KeyPart `json:"fields"`
	Window      string    `json:"window"`       // the window kind, e.g. business_day
	WindowID    string    `json:"window_id"`    // e.g. business_day:2026-09-21
	WindowStart time.Time `json:"window_start"` // zero for run and forever
	WindowEnd   time.Time `json:"window_end"`   // zero for run and forever
	Canonical   string    `json:"canonical"`    // the exact bytes that were hashed
}

// Derivation is a derived key with its parts and, inside the grace period
// after a window boundary, the key of the same work in the previous window.
type Derivation struct {
	Key   string   `json:"key"`
	Parts KeyParts `json:"parts"`
	// Previous is the previous window's key when At is within the tool's
	// grace after the window started; a repeat from the same run matches it.
	Previous string `json:"previous,omitempty"`
}

// DeriveKey derives the key of a call: hex(sha256(canonical))[:32], where
// canonical is the JSON array [KeyVersion, tool, [[field, value]...], window id].
func DeriveKey(in KeyInput) (*Derivation, error) {
	t := in.Tool
	if t == nil {
		return nil, Errorf(CodeInvalidArgument, "no tool")
	}
	parts := KeyParts{Tool: t.Name, Fields: make([]KeyPart, 0, len(t.NaturalKey))}
	values := make([][2]string, 0, len(t.NaturalKey))
	for _, kf := range t.NaturalKey {
		p, err := keyPart(in.Args, kf)
		if err != nil {
			return nil, err
		}
		parts.Fields = append(parts.Fields, p)
		values = append(values, [2]string{p.Field, p.Value})
	}
	if t.Window == nil {
		return nil, Errorf(CodeInvalidArgument, "tool %s has no window", t.Name)
	}
	w, err := windowAt(*t.Window, in.Calendar, in.At, in.RunID)
	if err != nil {
		return nil, err
	}
	parts.Window = t.Window.String()
	parts.WindowID, parts.WindowStart, parts.WindowEnd = w.id, w.start, w.end
	parts.Canonical = canonical(t.Name, values, w.id)
	d := &Derivation{Key: hashKey(parts.Canonical), Parts: parts}
	if w.prevID != "" && !w.start.IsZero() && in.At.Sub(w.start) < t.GraceOr() {
		d.Previous = hashKey(canonical(t.Name, values, w.prevID))
	}
	return d, nil
}

func canonical(tool string, values [][2]string, windowID string) string {
	buf := make([]byte, 0, 64+len(tool)+len(windowID)+32*len(values))
	buf = append(buf, '[')
	buf = appendJSONString(buf, KeyVersion)
	buf = append(buf, ',')
	buf = appendJSONString(buf, tool)
	buf = append(buf, ",["...)
	for i, v := range values {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, '[')
		buf = appendJSONString(buf, v[0])
		buf = append(buf, ',')
		buf = appendJSONString(buf, v[1])
		buf = append(buf, ']')
	}
	buf = append(buf, "],"...)
	buf = appendJSONString(buf, windowID)
	buf = append(buf, ']')
	return string(buf)
}

// appendJSONString appends s as encoding/json writes it without HTML
// escaping. Printable ASCII without quote or backslash, the usual case,
// is copied; anything else goes through encoding/json, so the canonical
// form is exactly what it has always been (TestCanonicalMatchesEncodingJSON).
func appendJSONString(buf []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			var b bytes.Buffer
			enc := json.NewEncoder(&b)
			enc.SetEscapeHTML(false)
			_ = enc.Encode(s) // a string always encodes
			return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
		}
	}
	buf = append(buf, '"')
	buf = append(buf, s...)
	return append(buf, '"')
}

func hashKey(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:16]) // the first 32 hex digits
}

func keyPart(args map[string]any, kf KeyField) (KeyPart, error) {
	v, ok := lookupPath(args, kf.Field)
	if !ok || v == nil {
		return KeyPart{}, FieldErrorf(CodeMissingField, kf.Field, "missing required field %q: it identifies the work and must be given; nothing was executed", kf.Field)
	}
	// Text is read in NFC and numbers by their value before any normalizer,
	// always: one record spelled two ways is one key (docs/concepts.md).
	var p KeyPart
	switch x := v.(type) {
	case string:
		p = KeyPart{Field: kf.Field, Input: x, Value: toNFC(x)}
	case json.Number:
		text, err := canonicalNumber(x)
		if err != nil {
			return KeyPart{}, FieldErrorf(CodeInvalidArgument, kf.Field, "field %q: %v; nothing was executed", kf.Field, err)
		}
		p = KeyPart{Field: kf.Field, Input: x.String(), Value: text}
	case float64:
		in := strconv.FormatFloat(x, 'g', -1, 64)
		text, err := canonicalNumber(json.Number(in))
		if err != nil {
			return KeyPart{}, FieldErrorf(CodeInvalidArgument, kf.Field, "field %q: %v; nothing was executed", kf.Field, err)
		}
		p = KeyPart{Field: kf.Field, Input: in, Value: text}
	case bool:
		p = KeyPart{Field: kf.Field, Input: strconv.FormatBool(x), Value: strconv.FormatBool(x)}
	default:
		return KeyPart{}, FieldErrorf(CodeInvalidArgument, kf.Field, "field %q must be a string or a number, not %s; nothing was executed", kf.Field, jsonTypeName(v))
	}
	for _, n := range kf.Normalize {
		f, ok := normalizers[n]
		if !ok {
			return KeyPart{}, Errorf(CodeInvalidManifest, "unknown normalizer %q", n)
		}
		out, err := f(p.Value)
		if err != nil {
			return KeyPart{}, FieldErrorf(CodeInvalidArgument, kf.Field, "field %q: %v; nothing was executed", kf.Field, err)
		}
		p.Value = out
	}
	if len(kf.Normalize) > 0 {
		p.Value = toNFC(p.Value) // a case mapping may leave a character decomposed
	}
	if strings.TrimSpace(p.Value) == "" {
		return KeyPart{}, FieldErrorf(CodeMissingField, kf.Field, "field %q is empty: it identifies the work and must have a value; nothing was executed", kf.Field)
	}
	return p, nil
}

func jsonTypeName(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case nil:
		return "null"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// LookupPath is the value a natural key's dotted field path names in
// parsed arguments (through objects, and arrays by index).
func LookupPath(args map[string]any, path string) (any, bool) { return lookupPath(args, path) }

// lookupPath follows a dotted path through objects (and, by index, arrays).
func lookupPath(v any, path string) (any, bool) {
	if m, ok := v.(map[string]any); ok && !strings.Contains(path, ".") {
		// A top-level field, the usual natural key.
		x, ok := m[path]
		return x, ok
	}
	cur := v
	for _, seg := range strings.Split(path, ".") {
		switch c := cur.(type) {
		case map[string]any:
			next, ok := c[seg]
			if !ok {
				return nil, false
			}
			cur = next
		case []any:
			var i int
			if !isIndex(seg) || len(seg) > 9 {
				return nil, false
			}
			if _, err := fmt.Sscan(seg, &i); err != nil {
				return nil, false
			}
			if i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

// ParseArgs decodes a call's arguments: a JSON object, numbers kept exact.
func ParseArgs(raw []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{}, nil
	}
	if err := CheckJSONText("args", raw); err != nil {
		return nil, err
	}
	if err := CheckJSONNames("args", raw); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Error{Code: CodeInvalidArgument, Field: "args", Message: "arguments are not valid JSON: " + err.Error()}
	}
	if dec.More() {
		return nil, FieldErrorf(CodeInvalidArgument, "args", "arguments must be one JSON object; found more after it")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, FieldErrorf(CodeInvalidArgument, "args", "arguments must be a JSON object, not %s", jsonTypeName(v))
	}
	return m, nil
}

// CanonicalArgs writes arguments in one form (keys sorted, no
// insignificant whitespace, numbers as sent), so that equal arguments
// compare equal whatever their field order.
//
// The bytes are those of encoding/json without HTML escaping; the values
// ParseArgs produces (objects, arrays, strings, json.Number, bool, nil) are
// written directly, since reflection over a map costs more than the rest of
// a call's key work, and anything else goes through encoding/json.
func CanonicalArgs(args map[string]any) []byte {
	return appendCanonicalValue(make([]byte, 0, 128), args)
}

func appendCanonicalValue(buf []byte, v any) []byte {
	switch x := v.(type) {
	case map[string]any:
		if x == nil {
			return append(buf, "null"...)
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys) // encoding/json sorts map keys by their bytes too
		buf = append(buf, '{')
		for i, k := range keys {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendJSONString(buf, k)
			buf = append(buf, ':')
			buf = appendCanonicalValue(buf, x[k])
		}
		return append(buf, '}')
	case []any:
		if x == nil {
			return append(buf, "null"...)
		}
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = appendCanonicalValue(buf, e)
		}
		return append(buf, ']')
	case string:
		return appendJSONString(buf, x)
	case bool:
		return strconv.AppendBool(buf, x)
	case nil:
		return append(buf, "null"...)
	case json.Number:
		if isJSONNumber(string(x)) {
			return append(buf, x...)
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return append(buf, "null"...) // not JSON (a NaN, a channel): ParseArgs never yields one
	}
	return append(buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}

// isJSONNumber reports whether s is a number as JSON writes it, which is
// how encoding/json decides to copy a json.Number verbatim.
func isJSONNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i == len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i == len(s) || s[i] < '0' || s[i] > '9' {
			return false
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	return i == len(s)
}

// ArgsHash is the hex SHA-256 of CanonicalArgs.
func ArgsHash(canonicalArgs []byte) string {
	sum := sha256.Sum256(canonicalArgs)
	return hex.EncodeToString(sum[:])
}

// DiffArgs names the fields (dotted paths) whose values differ between two
// argument sets, sorted.
func DiffArgs(a, b map[string]any) []string {
	var out []string
	diffInto(&out, "", a, b)
	slices.Sort(out)
	return out
}

func diffInto(out *[]string, prefix string, a, b map[string]any) {
	seen := map[string]bool{}
	for k, av := range a {
		seen[k] = true
		p := joinPath(prefix, k)
		bv, ok := b[k]
		if !ok {
			*out = append(*out, p)
			continue
		}
		am, aok := av.(map[string]any)
		bm, bok := bv.(map[string]any)
		if aok && bok {
			diffInto(out, p, am, bm)
			continue
		}
		if !jsonEqual(av, bv) {
			*out = append(*out, p)
		}
	}
	for k := range b {
		if !seen[k] {
			*out = append(*out, joinPath(prefix, k))
		}
	}
}

func joinPath(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func jsonEqual(a, b any) bool {
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

// NormalizeKeyFields returns a copy of args in which each natural-key field
// holds its normalized value, so that arguments differing only in what the
// normalizers remove (case, spaces) compare equal. Fields that are absent
// or fail to normalize are left as they are.
func NormalizeKeyFields(t *Tool, args map[string]any) map[string]any {
	if t == nil || len(t.NaturalKey) == 0 || args == nil {
		return args
	}
	out := copyMap(args)
	for _, kf := range t.NaturalKey {
		p, err := keyPart(args, kf)
		if err != nil {
			continue
		}
		setPath(out, kf.Field, p.Value)
	}
	return out
}

// ArgsHash is the hash a record keeps of a call's arguments: of their
// canonical form with the natural-key fields normalized as the key took
// them, so that values that normalize alike are not a conflict.
func (d *Derivation) ArgsHash(tool *Tool, args *Args) string {
	hashed := args.JSON() // nil is {}: Args' methods say so
	if normalizes(args.Value(), d.Parts.Fields) {
		hashed = CanonicalArgs(NormalizeKeyFields(tool, args.Value()))
	}
	return ArgsHash(hashed)
}

// normalizes reports whether NormalizeKeyFields would change args: some
// natural-key field is not a string or its normalizers change it. When
// nothing changes, the arguments' hash is the hash of their canonical form
// as sent, and the copy is not needed.
func normalizes(args map[string]any, parts []KeyPart) bool {
	for _, p := range parts {
		v, _ := lookupPath(args, p.Field)
		if s, ok := v.(string); !ok || s != p.Value {
			return true
		}
	}
	return false
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = copyMap(sub)
		}
		out[k] = v
	}
	return out
}

// setPath sets a dotted path through nested objects (arrays are left alone).
func setPath(m map[string]any, path string, v any) {
	segs := strings.Split(path, ".")
	cur := m
	for _, seg := range segs[:len(segs)-1] {
		next, ok := cur[seg].(map[string]any)
		if !ok {
			return
		}
		cur = next
	}
	if _, ok := cur[segs[len(segs)-1]]; ok {
		cur[segs[len(segs)-1]] = v
	}
}
