package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
)

// RunRetention checks the audit log's archive and purge: exports of
// consecutive periods cover the chain once, a purge removes exactly what
// an export up to the same time held, in bounded batches, and the chain
// stays verifiable (and continues) from the anchor. exec tampers.
func RunRetention(t *testing.T, newStore NewStore, exec Exec) {
	ctx := context.Background()
	day0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// fill writes n events an hour apart from start and seals them.
	fill := func(t *testing.T, s airlock.Store, start time.Time, n int) {
		t.Helper()
		var events []*airlock.AuditEvent
		for i := range n {
			events = append(events, &airlock.AuditEvent{
				At: start.Add(time.Duration(i) * time.Hour), Kind: airlock.EventCompleted, RunID: "run-1",
				Key: fmt.Sprintf("k-%s-%d", start.Format("0102"), i), Tool: "approve_withdrawal",
				Result: json.RawMessage(`{"approved":true}`), Actor: "agent-1", Outcome: airlock.OutcomeTextSucceeded,
			})
		}
		must(t, s.AppendAudit(ctx, events))
		_, err := audit.SealPending(ctx, s)
		must(t, err)
	}
	verify := func(t *testing.T, s airlock.Store, events int64) *audit.Report {
		t.Helper()
		r, err := audit.Verify(ctx, s)
		must(t, err)
		if !r.OK || r.Events != events {
			t.Fatalf("verify: %+v %+v, want ok with %d events", r, r.Problem, events)
		}
		return r
	}
	export := func(t *testing.T, s airlock.Store, since, until time.Time) (*audit.ExportStats, []byte) {
		t.Helper()
		var b bytes.Buffer
		st, err := audit.Export(ctx, s, since, until, &b)
		must(t, err)
		return st, b.Bytes()
	}

	t.Run("ExportsOfConsecutiveDaysCoverTheChainOnce", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 72) // three days, an event an hour
		_, all := export(t, s, time.Time{}, time.Time{})
		var joined []byte
		var prev *audit.ExportStats
		for d := range 3 {
			since, until := day0.AddDate(0, 0, d), day0.AddDate(0, 0, d+1)
			if d == 0 {
				since = time.Time{}
			}
			if d == 2 {
				until = time.Time{}
			}
			st, b := export(t, s, since, until)
			if st.Events != 24 {
				t.Fatalf("day %d: %d events exported, want 24", d, st.Events)
			}
			if prev != nil && (st.FirstSeq != prev.LastSeq+1 || st.PrevHash != prev.LastHash) {
				t.Fatalf("day %d begins at %d after %s; the day before ended at %d with %s", d, st.FirstSeq, st.PrevHash, prev.LastSeq, prev.LastHash)
			}
			r, err := audit.VerifyExport(bytes.NewReader(b))
			must(t, err)
			if !r.OK || r.Events != 24 {
				t.Fatalf("day %d's export: %+v %+v", d, r, r.Problem)
			}
			joined = append(joined, b...)
			prev = st
		}
		if !bytes.Equal(joined, all) {
			t.Fatal("the days' exports joined differ from the export of everything")
		}
	})

	t.Run("AnEditedExportFailsItsCheck", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 10)
		_, b := export(t, s, time.Time{}, time.Time{})
		edited := strings.Replace(string(b), `"actor":"agent-1"`, `"actor":"mallory"`, 1)
		r, err := audit.VerifyExport(strings.NewReader(edited))
		must(t, err)
		if r.OK || r.Problem == nil || r.Problem.Kind != "edited" || r.Problem.Seq != 1 {
			t.Fatalf("edited export: %+v %+v", r, r.Problem)
		}
		lines := strings.SplitAfter(string(b), "\n")
		dropped := strings.Join(append(lines[:4:4], lines[5:]...), "")
		r, err = audit.VerifyExport(strings.NewReader(dropped))
		must(t, err)
		if r.OK || r.Problem == nil || r.Problem.Kind != "deleted" || r.Problem.Seq != 5 {
			t.Fatalf("export without event 5: %+v %+v", r, r.Problem)
		}
		if _, err := audit.VerifyExport(strings.NewReader("{not json\n")); err == nil {
			t.Fatal("a malformed export was read")
		}
	})

	t.Run("PurgeRemovesWhatTheExportHeldInBatches", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 72)
		before := day0.AddDate(0, 0, 2)
		archived, _ := export(t, s, time.Time{}, before)
		st, err := audit.Purge(ctx, s, before, 5)
		must(t, err)
		if int64(st.Events) != archived.Events || st.Events != 48 {
			t.Fatalf("purged %d events, the export up to the same time held %d (want 48)", st.Events, archived.Events)
		}
		if st.Batches != 10 { // 48 in batches of 5
			t.Fatalf("%d batches, want 10", st.Batches)
		}
		if st.Anchor.Seq != archived.LastSeq || st.Anchor.Hash != archived.LastHash || st.Anchor.Purged != 48 || !st.Anchor.At.Equal(day0.Add(47*time.Hour)) {
			t.Fatalf("anchor %+v after an export that ended at %d with %s", st.Anchor, archived.LastSeq, archived.LastHash)
		}
		r := verify(t, s, 24)
		if r.Anchor == nil || r.Anchor.Seq != 48 {
			t.Fatalf("verify names no anchor: %+v", r.Anchor)
		}
		again, err := audit.Purge(ctx, s, before, 5)
		must(t, err)
		if again.Events != 0 {
			t.Fatalf("a second purge removed %d events", again.Events)
		}
		// Unsealed events are never purged, whatever their time.
		must(t, s.AppendAudit(ctx, []*airlock.AuditEvent{{At: day0, Kind: airlock.EventClaimed, Actor: "late"}}))
		st, err = audit.Purge(ctx, s, day0.AddDate(1, 0, 0), 100)
		must(t, err)
		if st.Events != 24 {
			t.Fatalf("purging all sealed: %d, want 24", st.Events)
		}
		if n, err := s.UnsealedAudit(ctx); err != nil || n != 1 {
			t.Fatalf("unsealed after purge: %d, %v", n, err)
		}
		// With every sealed event purged, sealing continues from the anchor.
		fill(t, s, day0.AddDate(0, 0, 5), 3)
		r = verify(t, s, 4)
		if r.Anchor.Seq != 72 || r.Anchor.Purged != 72 {
			t.Fatalf("anchor after purging all: %+v", r.Anchor)
		}
		events, err := s.AuditLog(ctx, &airlock.AuditLogParams{After: 0, Limit: 10})
		must(t, err)
		if len(events) != 4 || events[0].Seq != 73 {
			t.Fatalf("the chain did not continue from the anchor: %d events, first %+v", len(events), events[0])
		}
	})

	t.Run("DeletingTheFirstKeptEventIsFound", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 10)
		_, err := audit.Purge(ctx, s, day0.Add(4*time.Hour), 100) // events 1-4
		must(t, err)
		exec(t, s, `DELETE FROM airlock_audit WHERE seq = 5`)
		r, err := audit.Verify(ctx, s)
		must(t, err)
		if r.OK || r.Problem == nil || r.Problem.Kind != "deleted" || r.Problem.Seq != 5 {
			t.Fatalf("deleting the first kept event: %+v %+v", r, r.Problem)
		}
	})

	t.Run("SeqAtFindsTheBoundary", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 2500) // more than one galloping step
		for _, tc := range []struct {
			at   time.Time
			want int64
		}{
			{day0.Add(-time.Hour), 1},
			{day0, 1},
			{day0.Add(time.Minute), 2},
			{day0.Add(1000 * time.Hour), 1001},
			{day0.Add(2499 * time.Hour), 2500},
			{day0.Add(2500 * time.Hour), 2501},
			{day0.AddDate(10, 0, 0), 2501},
		} {
			got, err := audit.SeqAt(ctx, s, tc.at)
			must(t, err)
			if got != tc.want {
				t.Errorf("SeqAt(%s) = %d, want %d", tc.at, got, tc.want)
			}
		}
	})

	t.Run("PurgeFiguresKeepsLaterMinutes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		fill(t, s, day0, 48)
		calls := func(since, until time.Time) int64 {
			f, err := s.Figures(ctx, &airlock.FiguresParams{Since: since, Until: until})
			must(t, err)
			return f.ByTool["approve_withdrawal"][airlock.FigureSucceeded]
		}
		if n := calls(day0, day0.AddDate(0, 0, 2)); n != 48 {
			t.Fatalf("rollup holds %d completions, want 48", n)
		}
		total := 0
		for {
			n, err := s.PurgeFigures(ctx, &airlock.PurgeFiguresParams{Before: day0.AddDate(0, 0, 1), Limit: 7})
			must(t, err)
			if n > 7 {
				t.Fatalf("a batch of 7 deleted %d rows", n)
			}
			total += n
			if n == 0 {
				break
			}
		}
		if total == 0 || calls(day0, day0.AddDate(0, 0, 1)) != 0 || calls(day0.AddDate(0, 0, 1), day0.AddDate(0, 0, 2)) != 24 {
			t.Fatalf("after purging day 1's figures: %d rows, day 1 %d, day 2 %d", total,
				calls(day0, day0.AddDate(0, 0, 1)), calls(day0.AddDate(0, 0, 1), day0.AddDate(0, 0, 2)))
		}
	})
}
