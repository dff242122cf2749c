package main

import (
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/store"
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

// existingDatabase refuses, before anything is opened, a SQLite file that
// does not exist: opening it would create it and its directory.
func existingDatabase(dsn string) error {
	kind, err := store.Kind(dsn)
	if err != nil || kind != "sqlite" {
		return err
	}
	path := store.SQLitePath(dsn)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return &usageErr{fmt.Sprintf("--db: no database at %s (a read command opens an existing database only; airlock migrate --db %s creates one)", path, dsn)}
	}
	// Read-only: the store's own opening would turn a file that is not a
	// database yet into one (its journal mode is written on open).
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var version int
	if err := db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM airlock_schema_migrations`).Scan(&version); err != nil || version == 0 {
		return &usageErr{fmt.Sprintf("--db %s is not an airlock database at this version: it has no airlock tables (airlock migrate --db %s creates them)", path, dsn)}
	}
	return nil
}

// openForReading opens the database dsn names for a command that reads it
// (audit, report): it must exist and be migrated; nothing is created or
// migrated. On failure it has said why and returns the exit code: 2 for a
// database that is not there or not airlock's.
func openForReading(e *env, dsn string) (airlock.Store, int) {
	if err := existingDatabase(dsn); err != nil {
		return nil, failCode(e, err)
	}
	s, err := store.Open(e.ctx, dsn)
	if err != nil {
		return nil, failCode(e, err)
	}
	if err := s.Ping(e.ctx); err != nil {
		s.Close()
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
