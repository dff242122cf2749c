package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
)

// cmdAudit verifies, exports or purges the audit log, on the database
// directly (or, verify --file, an export).
func cmdAudit(e *env, args []string) int {
	sub := args[0] // run (main.go) has checked it
	fs := newFlags(e, "audit "+sub)
	db := dbFlag(fs)
	var since, until, before whenFlag
	var file, out, expectHead *string
	var expectCount *int64
	var format *string
	if sub == "export" {
		format = fs.String("format", "jsonl", "jsonl (one event a line), the only export format")
	} else {
		format = fs.String("format", "text", "text or json")
	}
	switch sub {
	case "export":
		fs.Var(&since, "since", "export events from this time: RFC 3339, a date (YYYY-MM-DD, UTC) or an age such as 24h or 7d (default: the first kept)")
		fs.Var(&until, "until", "export events before this time, same forms (default: the last sealed)")
		out = fs.String("out", "", "write to this file instead of standard output (it must not exist)")
	case "purge":
		fs.Var(&before, "before", "purge sealed events before this time: RFC 3339, a date (YYYY-MM-DD, UTC) or an age such as 90d; required")
	case "verify":
		file = fs.String("file", "", "verify an export (JSON lines) instead of the database")
		expectHead = fs.String("expect-head", "", "a head recorded earlier (its hash, or at least 12 hex digits of it) that the chain must still hold; finds a deleted or rewritten tail")
		expectCount = fs.Int64("expect-count", 0, "how many events were sealed when the head was recorded; the chain must reach it")
	}
	batch := 0
	if sub == "purge" {
		fs.IntVar(&batch, "batch", 1000, "events deleted per transaction")
	}
	// verify and export read: they change nothing unless asked (a backup's
	// pending events are reported, not sealed into its chain); purge writes.
	sealHelp := map[string]string{
		"verify": "seal the events written since the server last did, before verifying (without it they are reported as not sealed yet, and the database is opened read-only)",
		"export": "seal the events written since the server last did, before exporting (without it the export ends at the last sealed event, and the database is opened read-only)",
		"purge":  "seal the events written since the server last did, before purging",
	}[sub]
	seal := fs.Bool("seal", sub == "purge", sealHelp)
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	formats := []string{"text", "json"}
	if sub == "export" {
		formats = []string{"jsonl"}
	}
	if !slices.Contains(formats, *format) { // before anything is read or sealed
		return usageError(e, "audit "+sub, "--format %q: want %s", *format, strings.Join(formats, " or "))
	}
	if expectHead == nil {
		expectHead, expectCount = new(string), new(int64)
	}
	if sub == "verify" && *file != "" && (*expectHead != "" || *expectCount != 0) {
		return usageError(e, "audit verify", "--expect-head and --expect-count check the database's chain, not --file")
	}
	if sub == "verify" && *expectCount < 0 {
		return usageError(e, "audit verify", "--expect-count must be 0 (not checked) or more, not %d", *expectCount)
	}
	if sub == "verify" && *file != "" {
		f, err := os.Open(*file)
		if err != nil {
			return fail(e, "%v", err)
		}
		defer f.Close()
		r, err := audit.VerifyExport(f)
		if err != nil {
			return fail(e, "%s: %v", *file, err)
		}
		return printVerify(e, r, *format)
	}
	if sub == "purge" && before.t.IsZero() {
		return usageError(e, "audit purge", "--before is required (for example --before 90d)")
	}
	if sub == "purge" && batch <= 0 {
		return usageError(e, "audit purge", "--batch must be at least 1, not %d", batch)
	}
	if sub == "export" && !since.t.IsZero() && !until.t.IsZero() && !since.t.Before(until.t) {
		return usageError(e, "audit export", "--since (%s) must be before --until (%s)", since.t.Format(time.RFC3339), until.t.Format(time.RFC3339))
	}
	s, code := openForReading(e, *db, sub != "purge" && !*seal) // nothing created, nothing migrated
	if code != 0 {
		return code
	}
	defer s.Close()
	if *seal {
		if _, err := audit.SealPending(e.ctx, s); err != nil {
			return fail(e, "sealing: %v", err)
		}
	}
	switch sub {
	case "export":
		return exportAudit(e, s, since.t, until.t, *out)
	case "purge":
		st, err := audit.Purge(e.ctx, s, before.t, batch)
		if err != nil {
			return fail(e, "purging: %v (%d events purged before the error)", err, st.Events)
		}
		if *format == "json" {
			_ = json.NewEncoder(e.stdout).Encode(st)
		} else {
			fmt.Fprintf(e.stdout, "purged %d events in %d batches; the chain now begins after event %d (hash %s)\n",
				st.Events, st.Batches, st.Anchor.Seq, shortHash(st.Anchor.Hash))
		}
		return 0
	}
	r, err := audit.VerifyExpecting(e.ctx, s, audit.Expect{Head: *expectHead, Count: *expectCount})
	if err != nil {
		return fail(e, "%v", err)
	}
	return printVerify(e, r, *format)
}

func exportAudit(e *env, s airlock.AuditStore, since, until time.Time, out string) int {
	w := e.stdout
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fail(e, "%v", err)
		}
		defer f.Close()
		w = f
	}
	st, err := audit.Export(e.ctx, s, since, until, w)
	if err == nil && out != "" {
		err = w.(*os.File).Sync()
	}
	if err != nil {
		return fail(e, "exporting: %v", err)
	}
	msg := fmt.Sprintf("exported %d events", st.Events)
	if st.Events > 0 {
		msg += fmt.Sprintf(" (events %d to %d)", st.FirstSeq, st.LastSeq)
	}
	if out != "" {
		msg += " to " + out
	}
	fmt.Fprintln(e.stderr, msg)
	return 0
}

func printVerify(e *env, r *audit.Report, format string) int {
	switch {
	case format == "json":
		_ = json.NewEncoder(e.stdout).Encode(r)
	case r.OK && r.Anchor != nil:
		fmt.Fprintf(e.stdout, "ok: %d events chained from event %d (after %d purged), %d not sealed yet\nhead: event %d, hash %s (keep it outside the database; --expect-head)\n",
			r.Events, r.Anchor.Seq+1, r.Anchor.Seq, r.Unsealed, r.Head.Seq, r.Head.Hash)
	case r.OK:
		fmt.Fprintf(e.stdout, "ok: %d events chained, %d not sealed yet\nhead: event %d, hash %s (keep it outside the database; --expect-head)\n",
			r.Events, r.Unsealed, r.Head.Seq, r.Head.Hash)
	default:
		fmt.Fprintf(e.stdout, "BROKEN at event %d: %s\n", r.Problem.Seq, r.Problem.Message)
	}
	if !r.OK {
		return 1
	}
	return 0
}

func shortHash(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}

// whenFlag is a point in time given as RFC 3339, a date (midnight UTC) or
// an age before now ("24h", "7d").
type whenFlag struct {
	t   time.Time
	raw string
}

var _ flag.Value = (*whenFlag)(nil)

func (w *whenFlag) String() string { return w.raw }

func (w *whenFlag) Set(s string) error {
	t, err := parseWhen(s, time.Now())
	if err != nil {
		return err
	}
	w.t, w.raw = t, s
	return nil
}

func parseWhen(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	var d airlock.Duration
	_ = d.UnmarshalText([]byte(s))
	if err := d.Err(); err == nil && d.Duration > 0 {
		return now.Add(-d.Duration), nil
	}
	return time.Time{}, errors.New("want a time (RFC 3339 such as 2026-12-01T00:00:00Z), a date (2026-12-01) or an age (24h, 7d)")
}
