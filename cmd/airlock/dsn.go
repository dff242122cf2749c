package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/sqlite"
)

// redactDSN hides a password in a postgres URL for printing.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// usageErr is a command given what it cannot use — a database that is not
// there or not airlock's, a manifest that is not there, flags missing: a
// usage error (exit 2). A read command never makes an empty database that
// would read as a pass.
type usageErr struct{ msg string }

func (e *usageErr) Error() string { return e.msg }

// existingDatabase refuses, before anything is opened, a database a read
// command cannot read: a DSN that is not one, a SQLite file that does not
// exist (opening it would create it and its directory) or holds no airlock
// tables (exit 2); a file it cannot read says why (exit 1). PostgreSQL is
// checked when it is opened.
func existingDatabase(ctx context.Context, dsn string) error {
	kind, err := store.Kind(dsn)
	if err != nil {
		return &usageErr{"--db: " + err.Error()}
	}
	if kind != "sqlite" {
		return nil
	}
	path := store.SQLitePath(dsn)
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &usageErr{fmt.Sprintf("--db: no database at %s (a read command opens an existing database only; airlock migrate --db %s creates one)", path, dsn)}
	case err != nil:
		return fmt.Errorf("--db %s: %w", path, err)
	case fi.IsDir():
		return &usageErr{fmt.Sprintf("--db %s is a directory, not a database file", path)}
	}
	// Read-only, the path escaped: nothing is written, not even the journal
	// mode the store's own opening sets.
	version, err := sqlite.SchemaVersionOf(ctx, path)
	switch {
	case err != nil && strings.Contains(err.Error(), "not a database"):
		return &usageErr{fmt.Sprintf("--db %s is not an airlock database: it is not a SQLite database", path)}
	case err != nil:
		return fmt.Errorf("--db %s: cannot read it: %w", path, err)
	case version == 0:
		return &usageErr{fmt.Sprintf("--db %s is not an airlock database at this version: it has no airlock tables (airlock migrate --db %s creates them)", path, dsn)}
	}
	return nil
}

// openForReading opens the database dsn names for a command that reads it
// (audit, report): it must exist and be migrated; nothing is created or
// migrated, and unless the command writes (readOnly false: audit purge,
// --seal) an embedded database is opened read-only. On failure it has
// said why and returns the exit code: 2 for a database that is not there
// or not airlock's, 1 for one it cannot reach.
func openForReading(e *env, dsn string, readOnly bool) (airlock.Store, int) {
	if err := existingDatabase(e.ctx, dsn); err != nil {
		return nil, failCode(e, err)
	}
	s, err := store.OpenWith(e.ctx, dsn, store.Options{ReadOnly: readOnly})
	if err != nil {
		return nil, failCode(e, err)
	}
	if err := s.Ping(e.ctx); err != nil {
		s.Close()
		if kind, _ := store.Kind(dsn); kind == "postgres" {
			if v, verr := databaseSchema(e.ctx, dsn); verr == nil && v == 0 {
				return nil, failCode(e, &usageErr{fmt.Sprintf("--db %s is not an airlock database at this version: it has no airlock tables (airlock migrate --db … creates them)", redactDSN(dsn))})
			}
			return nil, fail(e, "--db %s: cannot reach the database: %v", redactDSN(dsn), err) // exit 1
		}
		return nil, failCode(e, &usageErr{fmt.Sprintf("--db %s is not an airlock database at this version: %v", redactDSN(dsn), err)})
	}
	return s, 0
}

// failCode prints err and returns its exit code: 2 for a usage error
// (usageErr), 1 for anything else.
func failCode(e *env, err error) int {
	fail(e, "%v", err)
	if _, ok := errors.AsType[*usageErr](err); ok {
		return 2
	}
	return 1
}
