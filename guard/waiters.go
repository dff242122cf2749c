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

// RecordWatch is a wait for a record's changes (Guard.Watch): C is closed
// at the next change; Rearm, after it closed, waits for the one after;
// Stop ends the wait registered last.
type RecordWatch struct {
	hub    *hub
	key    string
	c      <-chan struct{}
	cancel func()
}

func (h *hub) watch(key string) *RecordWatch {
	w := &RecordWatch{hub: h, key: key}
	w.c, w.cancel = h.wait(key)
	return w
}

// C is closed when the record may have moved.
func (w *RecordWatch) C() <-chan struct{} { return w.c }

// Rearm waits for the next change, once C has closed.
func (w *RecordWatch) Rearm() {
	w.cancel()
	w.c, w.cancel = w.hub.wait(w.key)
}

// Stop ends the wait.
func (w *RecordWatch) Stop() { w.cancel() }
