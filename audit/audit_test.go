package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/store/sqlite"
)

// A sealed log exports to JSON lines that verify on their own; an export
// with one event edited, dropped or moved names the first break; purging a
// prefix leaves the kept chain verifiable from its anchor, and an export
// of what is kept starts where the purge ended.
func TestExportVerifiesOnItsOwnAndPurgeKeepsTheChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "a.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	var events []*airlock.AuditEvent
	for i := range 10 {
		events = append(events, &airlock.AuditEvent{At: start.Add(time.Duration(i) * time.Minute), Kind: airlock.EventClaimed,
			RunID: "run", Key: "k" + string(rune('a'+i)), Tool: "approve", Actor: "agent"})
	}
	if err := s.AppendAudit(ctx, events); err != nil {
		t.Fatal(err)
	}
	if n, err := audit.SealPending(ctx, s); err != nil || n != 10 {
		t.Fatalf("sealed %d: %v", n, err)
	}
	var export bytes.Buffer
	st, err := audit.Export(ctx, s, time.Time{}, time.Time{}, &export)
	if err != nil || st.Events != 10 || st.FirstSeq != 1 || st.LastSeq != 10 {
		t.Fatalf("export: %+v %v", st, err)
	}
	if rep, err := audit.VerifyExport(bytes.NewReader(export.Bytes())); err != nil || !rep.OK {
		t.Fatalf("the export does not verify: %+v %v", rep, err)
	}

	lines := strings.SplitAfter(strings.TrimSuffix(export.String(), "\n"), "\n")
	edit := func(i int) string {
		var e map[string]any
		_ = json.Unmarshal([]byte(lines[i]), &e)
		e["actor"] = "someone else"
		b, _ := json.Marshal(e)
		out := append([]string{}, lines...)
		out[i] = string(b) + "\n"
		return strings.Join(out, "")
	}
	drop := func(i int) string { return strings.Join(append(append([]string{}, lines[:i]...), lines[i+1:]...), "") }
	swap := func(i int) string {
		out := append([]string{}, lines...)
		out[i], out[i+1] = out[i+1], out[i]
		return strings.Join(out, "")
	}
	for name, tampered := range map[string]string{"edited": edit(4), "dropped": drop(4), "moved": swap(4)} {
		rep, err := audit.VerifyExport(strings.NewReader(tampered))
		if err != nil || rep.OK || rep.Problem == nil || rep.Problem.Seq < 5 || rep.Problem.Seq > 6 {
			t.Errorf("%s: %+v %v, want the break at event 5 or 6", name, rep, err)
		}
	}

	// Purge the first half; what is kept still verifies, from the anchor.
	ps, err := audit.Purge(ctx, s, start.Add(5*time.Minute), 2)
	if err != nil || ps.Events != 5 || ps.Anchor.Seq != 5 {
		t.Fatalf("purge: %+v %v", ps, err)
	}
	rep, err := audit.Verify(ctx, s)
	if err != nil || !rep.OK || rep.Anchor == nil || rep.Anchor.Seq != 5 || rep.Events != 5 {
		t.Fatalf("after the purge: %+v %v", rep, err)
	}
	var rest bytes.Buffer
	if st, err := audit.Export(ctx, s, time.Time{}, time.Time{}, &rest); err != nil || st.FirstSeq != 6 || st.PrevHash != ps.Anchor.Hash {
		t.Fatalf("export after the purge: %+v %v", st, err)
	}
	if rep, err := audit.VerifyExport(&rest); err != nil || !rep.OK || rep.Anchor.Seq != 5 {
		t.Fatalf("the kept part's export: %+v %v", rep, err)
	}
}
