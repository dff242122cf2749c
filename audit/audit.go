// Package audit reads, verifies and exports the audit log (DESIGN §2.5).
// Events are written unsealed in the transaction of the change they
// describe; the sealer (RunSealer) gives them consecutive sequence numbers
// and chains each event's hash to the previous one, afterwards and in one
// place, so the hot path never waits on the chain. Verify walks the chain
// and names the first event that was edited, deleted, inserted or moved.
package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/airlockhq/airlock"
)

// Problem is the first break in the chain.
type Problem struct {
	Seq     int64  `json:"seq"`
	ID      int64  `json:"id,omitempty"`
	Kind    string `json:"kind"` // edited | deleted | inserted_or_reordered
	Message string `json:"message"`
}

// Report is the outcome of Verify.
type Report struct {
	Events   int64    `json:"events"`   // sealed events checked
	Unsealed int      `json:"unsealed"` // events written but not sealed yet
	OK       bool     `json:"ok"`
	Problem  *Problem `json:"problem,omitempty"`
}

const page = 1000

// Verify checks the whole chain.
func Verify(ctx context.Context, s airlock.AuditStore) (*Report, error) {
	r := &Report{OK: true}
	var prevSeq int64
	prevHash := ""
	for {
		events, err := s.AuditLog(ctx, prevSeq, page)
		if err != nil {
			return nil, err
		}
		for _, e := range events {
			switch {
			case e.Seq != prevSeq+1:
				r.OK = false
				r.Problem = &Problem{Seq: prevSeq + 1, Kind: "deleted", Message: fmt.Sprintf(
					"event %d is missing (the chain jumps from %d to %d): deleted", prevSeq+1, prevSeq, e.Seq)}
			case e.PrevHash != prevHash:
				r.OK = false
				r.Problem = &Problem{Seq: e.Seq, ID: e.ID, Kind: "inserted_or_reordered", Message: fmt.Sprintf(
					"event %d (id %d, %s) does not follow event %d: inserted or reordered", e.Seq, e.ID, e.Kind, prevSeq)}
			case e.ChainHash(prevHash) != e.Hash:
				r.OK = false
				r.Problem = &Problem{Seq: e.Seq, ID: e.ID, Kind: "edited", Message: fmt.Sprintf(
					"event %d (id %d, %s) does not match its hash: edited", e.Seq, e.ID, e.Kind)}
			}
			if !r.OK {
				return r, nil
			}
			r.Events++
			prevSeq, prevHash = e.Seq, e.Hash
		}
		if len(events) < page {
			break
		}
	}
	n, err := s.UnsealedAudit(ctx)
	if err != nil {
		return nil, err
	}
	r.Unsealed = n
	return r, nil
}

// Export writes sealed events at or after since as JSON lines.
func Export(ctx context.Context, s airlock.AuditStore, since time.Time, w io.Writer) (int, error) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var after int64
	n := 0
	for {
		events, err := s.AuditLog(ctx, after, page)
		if err != nil {
			return n, err
		}
		for _, e := range events {
			after = e.Seq
			if e.At.Before(since) {
				continue
			}
			if err := enc.Encode(e); err != nil {
				return n, err
			}
			n++
		}
		if len(events) < page {
			return n, nil
		}
	}
}

// SealPending seals every event written so far, page by page, and returns
// how many it sealed (a stopping server's last pass).
func SealPending(ctx context.Context, s airlock.AuditStore) (int, error) {
	total := 0
	for {
		n, err := s.SealAudit(ctx, page)
		total += n
		if err != nil || n < page {
			return total, err
		}
	}
}

// RunSealer seals new events every interval until ctx ends; sealed, when
// set, is told how many events each round sealed.
func RunSealer(ctx context.Context, s airlock.AuditStore, every time.Duration, log *slog.Logger, sealed func(int)) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		for {
			n, err := s.SealAudit(ctx, page)
			if err == nil && sealed != nil && n > 0 {
				sealed(n)
			}
			if err != nil {
				if ctx.Err() == nil && log != nil {
					log.Warn("airlock: sealing the audit log", "err", err)
				}
				break
			}
			if n < page {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
