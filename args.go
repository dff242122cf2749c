package airlock

import "encoding/json"

// Args are a call's arguments, parsed once where they enter airlock (the
// gateway, the idempotency middleware, a plan read back from the store) and
// passed down as they are: the parsed object serves the key, the schema and
// the rules; its canonical bytes serve the upstream, the record, the audit
// log and the hash. Nothing below the edge parses or re-encodes them.
//
// The zero value and nil are the empty object. Args are immutable: Value
// must not be modified.
type Args struct {
	value map[string]any
	canon json.RawMessage
}

// NewArgs parses raw arguments (a JSON object; empty means {}) with numbers
// kept exact, and writes their canonical form. Errors name the field "args".
func NewArgs(raw []byte) (*Args, error) {
	m, err := ParseArgs(raw)
	if err != nil {
		return nil, err
	}
	return ArgsOf(m), nil
}

// ArgsOf wraps an object already parsed (by ParseArgs, or built with
// json.Number for numbers). The map must not be modified afterwards.
func ArgsOf(m map[string]any) *Args {
	if m == nil {
		m = map[string]any{}
	}
	return &Args{value: m, canon: CanonicalArgs(m)}
}

// MustArgs is NewArgs for arguments known to be valid (tests, examples);
// it panics otherwise.
func MustArgs(raw string) *Args {
	a, err := NewArgs([]byte(raw))
	if err != nil {
		panic(err)
	}
	return a
}

var emptyArgs = ArgsOf(nil)

// Value is the parsed object (numbers as json.Number). Do not modify it.
func (a *Args) Value() map[string]any {
	if a == nil || a.value == nil {
		return emptyArgs.value
	}
	return a.value
}

// JSON is the canonical form: keys sorted, no insignificant whitespace,
// numbers as sent (CanonicalArgs). Do not modify it.
func (a *Args) JSON() json.RawMessage {
	if a == nil || a.canon == nil {
		return emptyArgs.canon
	}
	return a.canon
}
