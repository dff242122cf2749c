package guard

import (
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
