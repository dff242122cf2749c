package airlock

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// Text that reaches the store must be valid UTF-8 without NUL: PostgreSQL's
// text type refuses both (one bad value would fail a whole batched write),
// and a lossy rewrite to U+FFFD would let two distinct values — two natural
// keys — collide into one record. So text from callers is refused at the
// edge, naming the field; text from upstreams (results, error messages) is
// made storable instead, since the work it reports is already done.

// DefaultMaxRunIDBytes caps a run id (guard.Config.MaxRunIDBytes, the
// manifest's limits.run_id_bytes).
const DefaultMaxRunIDBytes = 256

// CheckText returns an invalid_argument error naming field when s is not
// text the store can hold: invalid UTF-8, or a NUL character.
func CheckText(field, s string) error {
	if !utf8.ValidString(s) {
		return FieldErrorf(CodeInvalidArgument, field, "not valid UTF-8 at byte %d; send text as UTF-8 (nothing was executed)", firstInvalidUTF8([]byte(s)))
	}
	if i := strings.IndexByte(s, 0); i >= 0 {
		return FieldErrorf(CodeInvalidArgument, field, "holds a NUL character at byte %d; text cannot hold NUL (nothing was executed)", i)
	}
	return nil
}

// CheckRunID checks a run id: storable text of at most max bytes (0:
// DefaultMaxRunIDBytes).
func CheckRunID(runID string, max int) error {
	if max <= 0 {
		max = DefaultMaxRunIDBytes
	}
	if len(runID) > max {
		return FieldErrorf(CodeInvalidArgument, "run_id", "is %d bytes; a run id is at most %d bytes (limits.run_id_bytes; nothing was executed)", len(runID), max)
	}
	if err := CheckText("run_id", runID); err != nil {
		return err
	}
	// A control character (C0, DEL, C1) in a run id rewrites a terminal
	// that prints it (airlock plans list) and hides in a page: a run id is
	// a name, not text to lay out.
	for i, r := range runID {
		if r < 0x20 || r >= 0x7f && r < 0xa0 {
			return FieldErrorf(CodeInvalidArgument, "run_id", "holds the control character U+%04X at byte %d; a run id is a name without control characters (nothing was executed)", r, i)
		}
	}
	return nil
}

// MaxNoteBytes bounds a note about the work: a decision's reason, a
// settlement's note, a completion's error.
const MaxNoteBytes = 4096

// CheckNote checks a note about the work (a decision's reason, a
// settlement's note, a completion's error) before it is kept: text the
// store can hold, at most MaxNoteBytes, and no control character but tab
// and newline — a carriage return or an escape in a note rewrites the
// terminal or the log line that shows it. The error names field.
func CheckNote(field, s string) error {
	if len(s) > MaxNoteBytes {
		return FieldErrorf(CodeInvalidArgument, field, "is %d bytes; at most %d (nothing was done)", len(s), MaxNoteBytes)
	}
	if err := CheckText(field, s); err != nil {
		return err
	}
	for i, r := range s {
		if (r < 0x20 && r != '\t' && r != '\n') || r >= 0x7f && r < 0xa0 {
			return FieldErrorf(CodeInvalidArgument, field, "holds the control character U+%04X at byte %d; a note has no control characters but tab and newline (nothing was done)", r, i)
		}
	}
	return nil
}

func firstInvalidUTF8(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return -1
}

// CheckJSONText refuses JSON whose strings the decoder would rewrite or the
// store could not hold: invalid UTF-8 (which encoding/json turns into
// U+FFFD), \u0000, and UTF-16 surrogates that do not pair (also U+FFFD).
// Errors are invalid_argument, naming field and the byte.
func CheckJSONText(field string, raw []byte) error { return checkJSONText(field, raw, false) }

// CheckJSONEncoding is CheckJSONText without the NUL check: for a whole
// message, whose fields are checked for NUL where they are read (so that
// the error names the field), but whose invalid UTF-8 and unpaired
// surrogates the decoder would rewrite before any field is seen.
func CheckJSONEncoding(field string, raw []byte) error { return checkJSONText(field, raw, true) }

func checkJSONText(field string, raw []byte, allowNUL bool) error {
	if !utf8.Valid(raw) {
		return FieldErrorf(CodeInvalidArgument, field, "not valid UTF-8 at byte %d; send text as UTF-8 (two different invalid strings would read as one)", firstInvalidUTF8(raw))
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return nil // no escapes: nothing else to look for
	}
	in := false
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if !in {
			in = c == '"'
			continue
		}
		switch c {
		case '"':
			in = false
		case '\\':
			if i+5 >= len(raw) || raw[i+1] != 'u' {
				i++ // an escaped character; malformed JSON is the decoder's to report
				continue
			}
			r := hex4(raw[i+2 : i+6])
			switch {
			case r == 0 && !allowNUL:
				return FieldErrorf(CodeInvalidArgument, field, `holds \u0000 (NUL) at byte %d; text cannot hold NUL`, i)
			case r == 0:
				i += 5
			case r >= 0xD800 && r < 0xDC00:
				if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
					return FieldErrorf(CodeInvalidArgument, field, "holds an unpaired UTF-16 surrogate %s at byte %d; send a valid character", raw[i:i+6], i)
				}
				if lo := hex4(raw[i+8 : i+12]); lo < 0xDC00 || lo >= 0xE000 {
					return FieldErrorf(CodeInvalidArgument, field, "holds an unpaired UTF-16 surrogate %s at byte %d; send a valid character", raw[i:i+6], i)
				}
				i += 11
			case r >= 0xDC00 && r < 0xE000:
				return FieldErrorf(CodeInvalidArgument, field, "holds an unpaired UTF-16 surrogate %s at byte %d; send a valid character", raw[i:i+6], i)
			default:
				i += 5
			}
		}
	}
	return nil
}

// hex4 is the value of four hex digits, or -1.
func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// StorableText is upstream text (an error message) as the store can hold
// it: invalid bytes and NUL become U+FFFD.
func StorableText(s string) string {
	if utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// StorableJSON is an upstream's JSON result as the store can hold it:
// invalid bytes (inside strings, in JSON that parsed) become U+FFFD.
func StorableJSON(b []byte) []byte {
	if b == nil || utf8.Valid(b) {
		return b
	}
	return bytes.ToValidUTF8(b, []byte("\uFFFD"))
}

// CheckJSONNames refuses a JSON value in which an object names a member
// twice ({"tool":"save_note","tool":"pay_out"}): decoders disagree on which
// one counts (Go's takes the last, others the first), so a proxy, a log or
// a person reading it could see other work than airlock runs. The error's
// field is the member's path, after prefix when raw is a part of the
// request (prefix "args": args.payee.account). Anything else wrong with
// raw is left to the decoder that reads it, which says what.
func CheckJSONNames(prefix string, raw []byte) error {
	if jsontext.Value(raw).IsValid() {
		return nil // the common case: valid, no name twice; no allocation
	}
	_, err := jsontext.NewDecoder(bytes.NewReader(raw)).ReadValue()
	return DuplicateNameError(prefix, err)
}

// DuplicateNameError is CheckJSONNames' error for err, a jsontext decoder's
// error, when err is a member named twice; nil for any other error (for a
// caller that walks the value with its own decoder).
func DuplicateNameError(prefix string, err error) error {
	var se *jsontext.SyntacticError
	if !errors.Is(err, jsontext.ErrDuplicateName) || !errors.As(err, &se) {
		return nil
	}
	path := slices.Collect(se.JSONPointer.Tokens())
	if prefix != "" {
		path = append([]string{prefix}, path...)
	}
	return FieldErrorf(CodeInvalidArgument, strings.Join(path, "."), "the member %q is given twice in one object: give it once (readers disagree on which one counts); nothing was executed",
		se.JSONPointer.LastToken())
}
