package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/store"
)

// cmdAudit verifies or exports the audit log, on the database directly.
func cmdAudit(e *env, args []string) int {
	if len(args) == 0 || (args[0] != "verify" && args[0] != "export") {
		fmt.Fprintln(e.stderr, "airlock audit: want verify or export")
		return 2
	}
	sub := args[0]
	fs := newFlags(e, "audit "+sub)
	db := dbFlag(fs)
	since := fs.Duration("since", 0, "export: only events from this long ago (default: all)")
	format := fs.String("format", "jsonl", "export: jsonl; verify: text or json")
	seal := fs.Bool("seal", true, "seal events written since the server last did, before reading")
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	s, err := store.OpenMigrated(e.ctx, *db)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.Close()
	if *seal {
		for {
			n, err := s.SealAudit(e.ctx, 1000)
			if err != nil {
				return fail(e, "sealing: %v", err)
			}
			if n == 0 {
				break
			}
		}
	}
	if sub == "export" {
		if *format != "jsonl" {
			return fail(e, "--format %q: export writes jsonl", *format)
		}
		from := time.Time{}
		if *since > 0 {
			from = time.Now().Add(-*since)
		}
		if _, err := audit.Export(e.ctx, s, from, e.stdout); err != nil {
			return fail(e, "%v", err)
		}
		return 0
	}
	r, err := audit.Verify(e.ctx, s)
	if err != nil {
		return fail(e, "%v", err)
	}
	if *format == "json" {
		_ = json.NewEncoder(e.stdout).Encode(r)
	} else if r.OK {
		fmt.Fprintf(e.stdout, "ok: %d events chained, %d not sealed yet\n", r.Events, r.Unsealed)
	} else {
		fmt.Fprintf(e.stdout, "BROKEN at event %d: %s\n", r.Problem.Seq, r.Problem.Message)
	}
	if !r.OK {
		return 1
	}
	return 0
}
