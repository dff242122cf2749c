package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
)

// cmdMigrate applies the migrations, or with --status and --dry-run shows
// them (docs/operations.md, "Migrations", "Upgrades").
func cmdMigrate(e *env, args []string) int {
	fs := newFlags(e, "migrate")
	db := dbFlag(fs)
	status := fs.Bool("status", false, "list the migrations, applied and pending, and change nothing")
	dryRun := fs.Bool("dry-run", false, "print the SQL of the pending migrations, and change nothing")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *status || *dryRun {
		return migrateReport(e, *db, *dryRun)
	}
	m, err := withdrawals.Manifest() // migrating needs no tools; any manifest will do
	if err != nil {
		return fail(e, "%v", err)
	}
	// The store's tables and River's (the commit queue).
	a, err := app.New(e.ctx, &app.Config{Manifest: m, DSN: *db, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(e, "%v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		return fail(e, "%v", err)
	}
	fmt.Fprintf(e.stdout, "migrated %s\n", redactDSN(*db))
	return 0
}

// migrateReport is migrate --status and --dry-run: what is applied and what
// would be, without changing the database. River's own migrations (the
// commit queue's tables) are applied with airlock's and not listed.
func migrateReport(e *env, dsn string, dryRun bool) int {
	kind, err := store.Kind(dsn)
	if err != nil {
		return usageError(e, "migrate", "--db: %v", err)
	}
	ms, err := sqlite.Migrations()
	if kind != "sqlite" {
		ms, err = postgres.Migrations()
	}
	if err != nil {
		return fail(e, "%v", err)
	}
	have := 0
	if kind == "sqlite" && !fileExists(store.SQLitePath(dsn)) {
		// --status reads a database: there is none to read. --dry-run may
		// show what migrate would create.
		if !dryRun {
			return failCode(e, &usageErr{fmt.Sprintf("--db: no database at %s (airlock migrate --db %s creates one; --dry-run shows its SQL)", store.SQLitePath(dsn), dsn)})
		}
		fmt.Fprintf(e.stdout, "-- no database at %s: migrate creates it and applies\n", store.SQLitePath(dsn))
	}
	if kind != "sqlite" || fileExists(store.SQLitePath(dsn)) {
		if have, err = databaseSchema(e.ctx, dsn); err != nil {
			return fail(e, "%v", err)
		}
	}
	latest := 0
	if len(ms) > 0 {
		latest = ms[len(ms)-1].Version
	}
	if have > latest {
		return fail(e, "the database is at schema version %d, newer than this airlock (%d): upgrade airlock", have, latest)
	}
	if dryRun {
		if have == latest {
			fmt.Fprintf(e.stdout, "-- schema version %d: nothing to apply\n", have)
			return 0
		}
		for _, m := range ms[have:] {
			fmt.Fprintf(e.stdout, "-- %04d_%s\n%s\n", m.Version, m.Name, strings.TrimSpace(m.SQL))
		}
		return 0
	}
	for _, m := range ms {
		state := "pending"
		if m.Version <= have {
			state = "applied"
		}
		fmt.Fprintf(e.stdout, "%04d_%-20s %s\n", m.Version, m.Name, state)
	}
	fmt.Fprintf(e.stdout, "schema version %d of %d (%s)\n", have, latest, redactDSN(dsn))
	return 0
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
