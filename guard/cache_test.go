package guard

import (
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
)

// The record cache holds at most its byte budget: records of a megabyte
// each push the oldest out, and one over a tenth of the budget is not
// cached at all.
func TestRecordCacheIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	c := newRecordCache(10000, 10<<20)
	big := strings.Repeat("x", 900<<10)
	for i := range 100 {
		c.put(&airlock.Record{Key: fmt.Sprint("k", i), State: airlock.StateSucceeded, RunID: big})
	}
	n, bytes := c.usage()
	if bytes > 10<<20 || n > 11 || n == 0 {
		t.Fatalf("%d records, %d bytes: want at most 10 MiB", n, bytes)
	}
	if c.get("k99") == nil || c.get("k0") != nil {
		t.Fatal("want the newest kept and the oldest gone")
	}
	c.put(&airlock.Record{Key: "huge", State: airlock.StateSucceeded, Result: []byte(strings.Repeat("y", 2<<20))})
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
