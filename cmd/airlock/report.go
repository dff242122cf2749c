package main

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/metrics"
)

// cmdReport prints the figures that show the protection works, computed
// from the database (--db, --config) or asked of a running server (--url).
func cmdReport(e *env, args []string) int {
	fs := newFlags(e, "report")
	config := configFlag(fs)
	db := dbFlag(fs)
	since := fs.Duration("since", 24*time.Hour, "the period to report on")
	format := fs.String("format", "text", "text or json")
	url := fs.String("url", os.Getenv("AIRLOCK_URL"), "a running airlock server (GET /v1/report), instead of --db and --config; env AIRLOCK_URL")
	token := fs.String("token", os.Getenv("AIRLOCK_TOKEN"), "an approver or admin token for --url; env AIRLOCK_TOKEN")
	seal := fs.Bool("seal", false, "with --db: seal the events written since the server last did, first (without it the figures are as the server last sealed them, and the database is opened read-only)")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		return usageError(e, "report", "--format %q: want text or json", *format)
	}
	if *since <= 0 {
		return usageError(e, "report", "--since %v: want a positive period such as 24h", *since)
	}
	var r *metrics.Report
	if *url != "" {
		if *token == "" {
			return usageError(e, "report", "--url needs --token (an approver or admin token)")
		}
		c := &planClient{url: strings.TrimSuffix(*url, "/"), token: *token}
		r = &metrics.Report{}
		if err := c.do(e.ctx, "GET", "/v1/report?since="+since.String(), nil, r); err != nil {
			return fail(e, "%v", err)
		}
	} else {
		m, err := loadManifest(*config)
		if err != nil {
			return failCode(e, err)
		}
		s, code := openForReading(e, *db, !*seal) // nothing created, nothing migrated
		if code != 0 {
			return code
		}
		defer s.Close()
		var src metrics.Source = s
		if !*seal {
			src = sealedOnly{s}
		}
		if r, err = metrics.Compute(e.ctx, src, &m.Catalog, *since, time.Now()); err != nil {
			return fail(e, "%v", err)
		}
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

// sealedOnly is a store the report reads as the server last sealed it: the
// report's sealing of pending events is left out, so a database opened
// read-only (report without --seal) is not written.
type sealedOnly struct{ airlock.Store }

func (sealedOnly) SealAudit(context.Context, int) (int, error) { return 0, nil }
