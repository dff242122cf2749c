// Package idempotency is net/http middleware that gives any Go tool server
// the server side of idempotency keys (the IETF Idempotency-Key header
// draft), backed by an airlock store: a request with an Idempotency-Key is
// claimed before the handler runs; its status and body are stored; a repeat
// gets them back with Idempotent-Replayed: true; a repeat that arrives while
// the first is in flight waits for it; the same key with another payload
// gets 422.
package idempotency

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
)

// Header names.
const (
	KeyHeader      = "Idempotency-Key"
	ReplayedHeader = "Idempotent-Replayed"
)

// Config configures the middleware. A nil *Config means all defaults.
type Config struct {
	// Retention is how long a key is remembered. Default 24h.
	Retention time.Duration
	// RepeatWait is how long a repeat waits for the first request in
	// flight before answering 409. Default 15s.
	RepeatWait time.Duration
	// MaxBody caps the request body. Default 1 MiB.
	MaxBody int64
	// Required makes a request without the header a 400. Default: such
	// requests pass through unguarded.
	Required bool
}

// stored is what is kept of a response.
type stored struct {
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	Body        []byte `json:"body"`
}

// Middleware wraps next. Only POST, PUT, PATCH and DELETE are guarded.
func Middleware(guard *guard.Guard, cfg *Config, next http.Handler) http.Handler {
	if cfg == nil {
		cfg = &Config{}
	}
	retention := cfg.Retention
	if retention <= 0 {
		retention = 24 * time.Hour
	}
	wait := airlock.NewDuration(cfg.RepeatWait)
	if cfg.RepeatWait <= 0 {
		wait = airlock.NewDuration(15 * time.Second)
	}
	maxBody := cfg.MaxBody
	if maxBody <= 0 {
		maxBody = 1 << 20
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(KeyHeader)
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			next.ServeHTTP(w, r)
			return
		}
		if key == "" {
			if cfg.Required {
				problem(w, http.StatusBadRequest, "missing Idempotency-Key header")
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if len(key) > 255 {
			problem(w, http.StatusBadRequest, "Idempotency-Key is longer than 255 characters")
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			problem(w, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		// The payload the key is bound to: method, path and body.
		payload, _ := json.Marshal(map[string]any{"method": r.Method, "path": r.URL.Path, "body": bodyValue(body)})
		args, err := airlock.NewArgs(payload)
		if err != nil {
			problem(w, http.StatusInternalServerError, "the request could not be bound to its key")
			return
		}
		tool := &airlock.Tool{
			Name: "http " + r.Method + " " + r.URL.Path, Kind: airlock.KindWrite,
			OnMismatch: airlock.MismatchReject, RepeatWait: &wait,
		}
		sum := sha256.Sum256([]byte(r.Method + " " + r.URL.Path + "\x00" + key))
		kc := &airlock.KeyedCall{
			Tool: tool, Key: "idem:" + hex.EncodeToString(sum[:16]), Args: args,
			ExpiresAt: guard.Now().Add(retention), // the guard's clock, as its keys' windows
		}
		ans, err := guard.DoKeyed(r.Context(), kc, func(ctx context.Context, _ string) airlock.Outcome {
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			req := r.Clone(ctx)
			req.Body = io.NopCloser(bytes.NewReader(body))
			next.ServeHTTP(rec, req)
			out, _ := json.Marshal(stored{Status: rec.status, ContentType: rec.header.Get("Content-Type"), Body: rec.body.Bytes()})
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: out}
		})
		switch {
		case errors.Is(err, airlock.ErrArgumentsMismatch):
			problem(w, http.StatusUnprocessableEntity, "this Idempotency-Key was already used with another request payload")
			return
		case err != nil:
			problem(w, http.StatusServiceUnavailable, "the idempotency store is unavailable; the request was not processed")
			return
		}
		switch ans.Status {
		case airlock.StatusSucceeded, airlock.StatusFailed:
			var s stored
			if err := json.Unmarshal(ans.Result, &s); err != nil {
				problem(w, http.StatusInternalServerError, "stored response is unreadable")
				return
			}
			if ans.Repeat {
				w.Header().Set(ReplayedHeader, "true")
			}
			if s.ContentType != "" {
				w.Header().Set("Content-Type", s.ContentType)
			}
			w.WriteHeader(s.Status)
			_, _ = w.Write(s.Body)
		case airlock.StatusInProgress:
			problem(w, http.StatusConflict, "a request with this Idempotency-Key is still being processed; retry later")
		default:
			problem(w, http.StatusConflict, "the outcome of the first request with this Idempotency-Key is unknown; it must be settled before a retry")
		}
	})
}

func bodyValue(b []byte) any {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if json.Valid(b) {
		return json.RawMessage(b)
	}
	return base64.StdEncoding.EncodeToString(b)
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
}

// recorder captures a handler's response.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	wrote  bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
