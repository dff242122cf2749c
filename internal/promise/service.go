package promise

import (
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Service is the system every tool of the workload changes: an HTTP
// service that applies a piece of work (or refuses it definitively, when
// its arguments say fail), records each effect in the history, and
// misbehaves as services do: it stalls past the caller's timeout, drops the
// connection after applying the work or before it. On /k/ paths it honours
// Idempotency-Key as a payments service does: a key it has applied is
// answered again, never applied twice.
type Service struct {
	h     *History
	stall time.Duration // how long a stalled request takes

	mu     sync.Mutex
	rng    *rand.Rand
	faults float64 // the share of requests that misbehave
	keys   map[string]*keyed
}

// keyed is what a service that honours keys remembers of a key.
type keyed struct {
	mu     sync.Mutex // one request of a key at a time
	done   bool
	status int
	body   []byte
}

// Work arguments every tool of the workload takes.
type Work struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	Fail   bool   `json:"fail,omitempty"`
}

// NewService makes a service that misbehaves on a faults share of requests,
// drawing from seed.
func NewService(h *History, seed uint64, faults float64, stall time.Duration) *Service {
	return &Service{h: h, stall: stall, rng: rand.New(rand.NewPCG(seed, 7)), faults: faults, keys: map[string]*keyed{}}
}

// fault is how one request misbehaves.
type fault int

const (
	behave fault = iota
	stallThenApply
	dropAfterApply
	dropBeforeApply
)

func (s *Service) draw() fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rng.Float64() >= s.faults {
		return behave
	}
	return fault(1 + s.rng.IntN(3))
}

// ServeHTTP serves POST /tools/TOOL and POST /k/tools/TOOL (keys honoured).
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	honours := strings.HasPrefix(r.URL.Path, "/k/")
	tool := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, "/k"), "/tools/")
	body, err := io.ReadAll(r.Body)
	var work Work
	if err != nil || json.Unmarshal(body, &work) != nil || work.ID == "" {
		http.Error(w, `{"error":"bad request"}`, http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if !honours {
		s.apply(w, tool, key, &work)
		return
	}
	if key == "" {
		http.Error(w, `{"error":"Idempotency-Key required"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	k := s.keys[key]
	if k == nil {
		k = &keyed{}
		s.keys[key] = k
	}
	s.mu.Unlock()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(k.status)
		_, _ = w.Write(k.body)
		return
	}
	k.status, k.body, k.done = s.apply(w, tool, key, &work)
}

// apply applies the work once (with a fault drawn for this request) and
// answers; it returns what it answered, for a key it remembers.
func (s *Service) apply(w http.ResponseWriter, tool, key string, work *Work) (int, []byte, bool) {
	// The effect may land any time from the request's arrival on: a
	// stalled request applies the work after its caller gave up, and that
	// is the same attempt, not a second one.
	arrived := s.h.clock.Add(1)
	f := s.draw()
	if f == dropBeforeApply {
		drop(w)
		return 0, nil, false
	}
	if f == stallThenApply {
		time.Sleep(s.stall)
	}
	status, body := s.applyFrom(arrived, tool, key, work)
	if f == dropAfterApply {
		drop(w)
		return status, body, true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status, body, true
}

// Apply applies the work and records the effect: 200 with a new nonce, or
// 422 (a definitive refusal, also with its nonce) when the work says fail.
func (s *Service) Apply(tool, key string, work *Work) (int, []byte) {
	return s.applyFrom(s.h.clock.Add(1), tool, key, work)
}

// applyFrom applies the work for a request that arrived at the instant
// arrived.
func (s *Service) applyFrom(arrived int64, tool, key string, work *Work) (int, []byte) {
	n := NewNonce()
	status := http.StatusOK
	body, _ := json.Marshal(map[string]any{"done": n, "id": work.ID})
	if work.Fail {
		status = http.StatusUnprocessableEntity
		body, _ = json.Marshal(map[string]any{"error": "refused " + n, "id": work.ID})
	}
	s.h.Since(arrived, -1, Input{Kind: Effect, Work: WorkName(tool, work.ID), Key: key}, Output{Result: n})
	return status, body
}

// WorkName names a piece of work: a tool's work on one id. Tools that
// share a plan's work (plan_pay and pay) share its name.
func WorkName(tool, id string) string {
	return strings.TrimPrefix(tool, "plan_") + "/" + id
}

// NewNonce is a new effect's nonce.
func NewNonce() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return "fx_" + hex.EncodeToString(b[:])
}

// drop closes the connection without an answer: the caller cannot know
// whether the work was applied.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("promise: the service's writer cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err == nil {
		_ = conn.Close()
	}
}
