package guard

import (
	"container/list"
	"sync"

	"github.com/airlockhq/airlock"
)

// recordCache is a bounded LRU of final records. Final records never change,
// so serving repeats from it is safe; it is what makes repeats cheap. It is
// bounded by count and by bytes (arguments, results and identifiers can
// each be up to a request in size); a record larger than a tenth of the
// byte budget is not cached (its repeats read the store).
type recordCache struct {
	mu       sync.Mutex
	max      int
	maxBytes int64
	bytes    int64
	ll       *list.List
	items    map[string]*list.Element
}

func newRecordCache(max int, maxBytes int64) *recordCache {
	return &recordCache{max: max, maxBytes: maxBytes, ll: list.New(), items: make(map[string]*list.Element, min(max, 1<<16))}
}

// recordBytes is about what a cached record holds in memory.
func recordBytes(r *airlock.Record) int64 {
	return int64(len(r.Key)+len(r.Tool)+len(r.RunID)+len(r.WindowID)+len(r.Args)+len(r.ArgsHash)+
		len(r.Result)+len(r.Content)+len(r.Note)+len(r.Owner)) + 256
}

func (c *recordCache) get(key string) *airlock.Record {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*airlock.Record)
	}
	return nil
}

func (c *recordCache) put(rec *airlock.Record) {
	if c == nil || !rec.State.Final() {
		return
	}
	size := recordBytes(rec)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[rec.Key]; ok {
		c.bytes -= recordBytes(e.Value.(*airlock.Record))
		c.ll.Remove(e)
		delete(c.items, rec.Key)
	}
	if size > c.maxBytes/10 {
		return
	}
	c.items[rec.Key] = c.ll.PushFront(rec)
	c.bytes += size
	for c.ll.Len() > c.max || c.bytes > c.maxBytes {
		old := c.ll.Back()
		c.ll.Remove(old)
		r := old.Value.(*airlock.Record)
		delete(c.items, r.Key)
		c.bytes -= recordBytes(r)
	}
}
