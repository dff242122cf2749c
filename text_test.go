package airlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParseArgsRefusesTextTheStoreCannotHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, raw, want string // want "": accepted
	}{
		{"plain", `{"a":"x"}`, ""},
		{"escaped character", `{"a":"\u00e9\n"}`, ""},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, ""},
		{"escaped backslash before u0000", `{"a":"\\u0000"}`, ""},
		{"NUL", `{"a":"x\u0000"}`, "NUL"},
		{"NUL in a key", `{"a\u0000":"x"}`, "NUL"},
		{"NUL nested", `{"a":[{"b":"\u0000"}]}`, "NUL"},
		{"lone high surrogate", `{"a":"\ud800"}`, "unpaired UTF-16 surrogate"},
		{"high surrogate then a letter", `{"a":"\ud800\u0041"}`, "unpaired UTF-16 surrogate"},
		{"lone low surrogate", `{"a":"\udc00"}`, "unpaired UTF-16 surrogate"},
		{"invalid UTF-8", "{\"a\":\"X\xff\xfe\"}", "not valid UTF-8 at byte 7"},
		{"invalid UTF-8, other order", "{\"a\":\"X\xfe\xff\"}", "not valid UTF-8 at byte 7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseArgs([]byte(tc.raw))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Field != "args" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v; want invalid_argument on args containing %q", err, tc.want)
			}
		})
	}
}

func TestCheckRunID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, run string
		max       int
		want      string
	}{
		{"empty", "", 0, ""},
		{"at the default cap", strings.Repeat("r", 256), 0, ""},
		{"over the default cap", strings.Repeat("r", 257), 0, "at most 256 bytes"},
		{"over a configured cap", strings.Repeat("r", 33), 32, "at most 32 bytes"},
		{"NUL", "run\x00", 0, "NUL"},
		{"invalid UTF-8", "run\xff", 0, "not valid UTF-8 at byte 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckRunID(tc.run, tc.max)
			var e *Error
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &e) || e.Field != "run_id" || !strings.Contains(e.Message, tc.want) {
				t.Fatalf("got %v; want run_id containing %q", err, tc.want)
			}
		})
	}
}

func TestStorableTextAndJSON(t *testing.T) {
	t.Parallel()
	if got := storableText("a\x00b\xffc"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("storableText: %q", got)
	}
	if got := string(storableJSON([]byte("{\"a\":\"x\xffy\"}"))); got != "{\"a\":\"x\uFFFDy\"}" {
		t.Errorf("storableJSON: %q", got)
	}
	if got := storableJSON([]byte(`{"a":1}`)); string(got) != `{"a":1}` {
		t.Errorf("valid JSON changed: %q", got)
	}
}

// The record cache holds at most its byte budget: records of a megabyte
// each push the oldest out, and one over a tenth of the budget is not
// cached at all.
func TestRecordCacheIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	c := newRecordCache(10000, 10<<20)
	big := strings.Repeat("x", 900<<10)
	for i := range 100 {
		c.put(&Record{Key: fmt.Sprint("k", i), State: StateSucceeded, RunID: big})
	}
	n, bytes := c.usage()
	if bytes > 10<<20 || n > 11 || n == 0 {
		t.Fatalf("%d records, %d bytes: want at most 10 MiB", n, bytes)
	}
	if c.get("k99") == nil || c.get("k0") != nil {
		t.Fatal("want the newest kept and the oldest gone")
	}
	c.put(&Record{Key: "huge", State: StateSucceeded, Result: []byte(strings.Repeat("y", 2<<20))})
	if c.get("huge") != nil {
		t.Fatal("a record over a tenth of the budget was cached")
	}
}

// usage is the cache's records and bytes.
func (c *recordCache) usage() (int, int64) {
	if c == nil {
		return 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ll.Len(), c.bytes
}
