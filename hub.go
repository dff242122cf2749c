package airlock

import (
	"container/list"
	"sync"
)

// hub wakes callers waiting for a record to leave running.
type hub struct {
	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{}
}

func newHub() *hub { return &hub{waiters: map[string]map[chan struct{}]struct{}{}} }

func (h *hub) wait(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	set := h.waiters[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.waiters[key] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if set, ok := h.waiters[key]; ok {
			delete(set, ch)
			if len(set) == 0 {
				delete(h.waiters, key)
			}
		}
		h.mu.Unlock()
	}
}

func (h *hub) notify(key string) {
	h.mu.Lock()
	set := h.waiters[key]
	delete(h.waiters, key)
	h.mu.Unlock()
	for ch := range set {
		close(ch)
	}
}

// recordCache is a bounded LRU of final records. Final records never change,
// so serving repeats from it is safe; it is what makes repeats cheap.
type recordCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[string]*list.Element
}

func newRecordCache(max int) *recordCache {
	return &recordCache{max: max, ll: list.New(), items: make(map[string]*list.Element, max)}
}

func (c *recordCache) get(key string) *Record {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.ll.MoveToFront(e)
		return e.Value.(*Record)
	}
	return nil
}

func (c *recordCache) put(rec *Record) {
	if c == nil || !rec.State.Final() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[rec.Key]; ok {
		e.Value = rec
		c.ll.MoveToFront(e)
		return
	}
	c.items[rec.Key] = c.ll.PushFront(rec)
	if c.ll.Len() > c.max {
		old := c.ll.Back()
		c.ll.Remove(old)
		delete(c.items, old.Value.(*Record).Key)
	}
}
