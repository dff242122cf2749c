// Package payments is the bundled example's fake payments service: a
// ledger of withdrawals that can be looked up, approved and annotated over
// HTTP JSON. It protects itself with the idempotency middleware on its own
// SQLite database, and its latency can be set so that its p99 sits past an
// agent's timeout — the conditions of the incident airlock exists for.
package payments

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/idempotency"
	"github.com/airlockhq/airlock/store/sqlite"
)

// Config configures the service. A nil *Config means all defaults.
type Config struct {
	// DBPath is the service's own SQLite database (for idempotency keys).
	// Default: no idempotency (every request is executed: the naive service).
	DBPath string
	// Latency is added to every write. Default 0.
	Latency time.Duration
	// SlowRate is the share of writes that take SlowLatency instead. Default 0.
	SlowRate float64
	// SlowLatency is the latency of slow writes. Default 0.
	SlowLatency time.Duration
	// SlowRecords always take SlowLatency (a deterministic incident).
	SlowRecords []string
}

// Withdrawal is a ledger entry.
type Withdrawal struct {
	RecordID    string `json:"record_id"`
	AmountMinor int64  `json:"amount_minor"`
	Currency    string `json:"currency"`
	KYCComplete bool   `json:"kyc_complete"`
	Status      string `json:"status"`
	Approvals   int    `json:"approvals"`
}

// Ledger is the six overnight withdrawals of the incident.
var Ledger = []Withdrawal{
	{RecordID: "WD-24811", AmountMinor: 12500, Currency: "USD", KYCComplete: true},
	{RecordID: "WD-24812", AmountMinor: 48000, Currency: "USD", KYCComplete: true},
	{RecordID: "WD-24813", AmountMinor: 250000, Currency: "USD", KYCComplete: true},
	{RecordID: "WD-24814", AmountMinor: 9900, Currency: "USD", KYCComplete: false},
	{RecordID: "WD-24815", AmountMinor: 30000, Currency: "EUR", KYCComplete: true},
	{RecordID: "WD-24817", AmountMinor: 100000, Currency: "USD", KYCComplete: true},
}

// Service is the fake payments service.
type Service struct {
	cfg   Config
	store *sqlite.Store
	guard *guard.Guard

	mu        sync.Mutex
	ledger    map[string]*Withdrawal
	approvals map[string]int
	notes     map[string][]string
	calls     int
	inFlight  int // writes received and not yet answered
}

// New opens the service (and its database, when DBPath is set).
func New(cfg *Config) (*Service, error) {
	if cfg == nil {
		cfg = &Config{}
	}
	s := &Service{cfg: *cfg, ledger: map[string]*Withdrawal{}, approvals: map[string]int{}, notes: map[string][]string{}}
	for _, w := range Ledger {
		s.ledger[w.RecordID] = &w
	}
	if cfg.DBPath != "" {
		st, err := sqlite.Open(cfg.DBPath, nil)
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(context.Background()); err != nil {
			st.Close()
			return nil, err
		}
		s.store, s.guard = st, guard.New(st, nil)
	}
	return s, nil
}

// Close closes the database.
func (s *Service) Close() error {
	if s.guard != nil {
		s.guard.Close()
		return s.store.Close()
	}
	return nil
}

// Handler serves the API.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /withdrawals/get", s.get)
	mux.HandleFunc("POST /withdrawals/approve", s.approve)
	mux.HandleFunc("POST /withdrawals/note", s.note)
	mux.HandleFunc("GET /stats", s.stats)
	if s.guard == nil {
		return mux
	}
	return idempotency.Middleware(s.guard, nil, mux)
}

type request struct {
	RecordID string `json:"record_id"`
	Note     string `json:"note,omitempty"`
	Text     string `json:"text,omitempty"`
}

func decode(w http.ResponseWriter, r *http.Request) (request, bool) {
	var req request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || strings.TrimSpace(req.RecordID) == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want a JSON body with record_id"})
		return req, false
	}
	req.RecordID = strings.ToUpper(strings.TrimSpace(req.RecordID))
	return req, true
}

// withdrawal returns the ledger entry; ids outside the ledger get a
// made-up but stable entry, so any WD-n can be tried.
func (s *Service) withdrawal(id string) *Withdrawal {
	if w, ok := s.ledger[id]; ok {
		return w
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	n := int64(h.Sum32())
	w := &Withdrawal{RecordID: id, AmountMinor: 1000 + n%99000, Currency: "USD", KYCComplete: n%5 != 0}
	s.ledger[id] = w
	return w
}

func (s *Service) delay(record string) {
	d := s.cfg.Latency
	if s.cfg.SlowRate > 0 && rand.Float64() < s.cfg.SlowRate {
		d = s.cfg.SlowLatency
	}
	for _, r := range s.cfg.SlowRecords {
		if r == record {
			d = s.cfg.SlowLatency
		}
	}
	if d > 0 {
		s.mu.Lock()
		s.inFlight++
		s.mu.Unlock()
		time.Sleep(d)
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}
}

func (s *Service) get(w http.ResponseWriter, r *http.Request) {
	req, ok := decode(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	wd := *s.withdrawal(req.RecordID)
	wd.Approvals = s.approvals[req.RecordID]
	if wd.Approvals > 0 {
		wd.Status = "approved"
	} else {
		wd.Status = "queued"
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, wd)
}

func (s *Service) approve(w http.ResponseWriter, r *http.Request) {
	req, ok := decode(w, r)
	if !ok {
		return
	}
	s.delay(req.RecordID)
	s.mu.Lock()
	s.calls++
	s.withdrawal(req.RecordID)
	s.approvals[req.RecordID]++
	n := s.approvals[req.RecordID]
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"record_id": req.RecordID, "status": "approved",
		"approval_id": fmt.Sprintf("AP-%s-%d", req.RecordID, n), "approved_at": time.Now().UTC().Format(time.RFC3339),
	})
}

func (s *Service) note(w http.ResponseWriter, r *http.Request) {
	req, ok := decode(w, r)
	if !ok {
		return
	}
	if strings.TrimSpace(req.Text) == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "text is required"})
		return
	}
	s.delay(req.RecordID)
	s.mu.Lock()
	s.calls++
	s.notes[req.RecordID] = append(s.notes[req.RecordID], req.Text)
	n := len(s.notes[req.RecordID])
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"record_id": req.RecordID, "note_id": fmt.Sprintf("N-%s-%d", req.RecordID, n)})
}

// Stats is what the service executed.
type Stats struct {
	Calls     int                 `json:"calls"`
	Approvals map[string]int      `json:"approvals"`
	Notes     map[string][]string `json:"notes"`
	// InFlight is how many writes are inside their latency right now.
	InFlight int `json:"in_flight"`
}

// Stats returns a copy of what the service executed.
func (s *Service) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Calls: s.calls, Approvals: map[string]int{}, Notes: map[string][]string{}, InFlight: s.inFlight}
	for k, v := range s.approvals {
		st.Approvals[k] = v
	}
	for k, v := range s.notes {
		st.Notes[k] = append([]string(nil), v...)
	}
	return st
}

func (s *Service) stats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
