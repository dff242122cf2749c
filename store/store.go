// Package store opens an airlock store from a DSN: "sqlite:PATH" for the
// embedded SQLite store, "postgres://…" (or "postgresql://…") for
// PostgreSQL. The Store interface itself lives in the root package
// (airlock.Store) so that the guard depends on nothing but the standard
// library; the drivers are store/sqlite and store/postgres.
package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store/postgres"
	"github.com/airlockhq/airlock/store/sqlite"
)

// DefaultDSN is the embedded database `airlock serve` uses with no --db.
const DefaultDSN = "sqlite:./airlock-data/airlock.db"

// Kind names the driver a DSN selects: "sqlite" or "postgres".
func Kind(dsn string) (string, error) {
	switch {
	case strings.HasPrefix(dsn, "sqlite:"):
		if SQLitePath(dsn) == "" { // sqlite: and sqlite:// name no file
			return "", airlock.FieldErrorf(airlock.CodeInvalidArgument, "db", "sqlite DSN has no path: want sqlite:PATH, such as %s", DefaultDSN)
		}
		return "sqlite", nil
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		return "postgres", nil
	}
	return "", airlock.FieldErrorf(airlock.CodeInvalidArgument, "db", "%q is not a DSN: want sqlite:PATH or postgres://USER@HOST:PORT/DB", dsn)
}

// Options tune Open. The zero value is what a server uses.
type Options struct {
	// NoAudit leaves out the audit events of claims and completions, to
	// measure what the audit log costs. Never in service.
	NoAudit bool
	// ReadOnly opens an embedded (SQLite) database read-only, for a command
	// that only reads it (sqlite.Config.ReadOnly). PostgreSQL ignores it.
	ReadOnly bool
}

// Open opens the store a DSN names. It does not migrate; call Migrate.
func Open(ctx context.Context, dsn string) (airlock.Store, error) {
	return OpenWith(ctx, dsn, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, dsn string, o Options) (airlock.Store, error) {
	kind, err := Kind(dsn)
	if err != nil {
		return nil, err
	}
	switch kind {
	case "sqlite":
		s, err := sqlite.Open(SQLitePath(dsn), &sqlite.Config{NoAudit: o.NoAudit, ReadOnly: o.ReadOnly})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", airlock.ErrStoreUnavailable, err)
		}
		return s, nil
	default:
		s, err := postgres.Open(ctx, dsn, &postgres.Config{NoAudit: o.NoAudit})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", airlock.ErrStoreUnavailable, err)
		}
		return s, nil
	}
}

// OpenMigrated opens the store and applies the embedded migrations.
func OpenMigrated(ctx context.Context, dsn string) (airlock.Store, error) {
	s, err := Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: migrating: %w", airlock.ErrStoreUnavailable, err)
	}
	return s, nil
}

// SQLitePath is the file a sqlite: DSN names.
func SQLitePath(dsn string) string {
	p := strings.TrimPrefix(dsn, "sqlite:")
	// Accept sqlite:///abs/path and sqlite://rel as well as sqlite:PATH.
	return strings.TrimPrefix(p, "//")
}
