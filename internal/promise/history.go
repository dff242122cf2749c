package promise

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records operations from many goroutines. Its timestamps are a
// counter every invocation and answer takes in turn: porcupine needs only
// their order, and within one process the counter's order is the real one.
type History struct {
	clock atomic.Int64
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// Begin records an operation's invocation; done records its answer.
func (h *History) Begin(client int, in Input) (done func(Output)) {
	call := h.clock.Add(1)
	return func(out Output) {
		ret := h.clock.Add(1)
		h.mu.Lock()
		h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		h.mu.Unlock()
	}
}

// Instant records an operation that took effect at one instant (a
// service applying the work).
func (h *History) Instant(client int, in Input, out Output) {
	h.Begin(client, in)(out)
}

// Since records an operation invoked at the instant call (a counter value
// taken earlier) that answers now.
func (h *History) Since(call int64, client int, in Input, out Output) {
	ret := h.clock.Add(1)
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	h.mu.Unlock()
}

// Operations are the history so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

// Len is how many operations were recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Check checks the history against the model; the error names the first
// piece of work whose history breaks the promise and lists it.
func (h *History) Check(timeout time.Duration) error {
	m := Model()
	ops := h.Operations()
	res, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("the checker ran out of time (%v) on %d operations", timeout, len(ops))
	}
	// Find the partition that fails, to report it alone.
	for _, part := range m.Partition(ops) {
		if !porcupine.CheckOperations(m, part) {
			return fmt.Errorf("the promise is broken for %s; its history:\n%s", part[0].Input.(Input).Work, Describe(part))
		}
	}
	_ = info
	return fmt.Errorf("the history of %d operations is not linearizable", len(ops))
}

// nonce marks one effect's result: the services put one in every answer of
// theirs, and the model follows it through whatever wraps it (a record, an
// MCP result, a plan).
var nonce = regexp.MustCompile(`fx_[0-9a-f]{16}`)

// NonceOf is the effect's nonce in an answer's text, or "".
func NonceOf(text string) string {
	return nonce.FindString(text)
}
