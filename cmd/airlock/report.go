package main

import (
	"encoding/json"
	"time"

	"github.com/airlockhq/airlock/metrics"
	"github.com/airlockhq/airlock/store"
)

// cmdReport prints the figures that show the protection works.
func cmdReport(e *env, args []string) int {
	fs := newFlags(e, "report")
	config := configFlag(fs)
	db := dbFlag(fs)
	since := fs.Duration("since", 24*time.Hour, "the period to report on")
	format := fs.String("format", "text", "text or json")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		return fail(e, "--format %q: want text or json", *format)
	}
	m, err := loadManifest(*config)
	if err != nil {
		return fail(e, "%v", err)
	}
	s, err := store.OpenMigrated(e.ctx, *db)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer s.Close()
	r, err := metrics.Compute(e.ctx, s, m, *since, time.Now())
	if err != nil {
		return fail(e, "%v", err)
	}
	if *format == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(r)
	} else {
		r.WriteText(e.stdout)
	}
	for _, w := range r.Warnings {
		if w.Level == "error" {
			return 1
		}
	}
	return 0
}
