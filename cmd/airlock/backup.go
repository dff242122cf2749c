package main

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/store"
	"github.com/airlockhq/airlock/store/sqlite"
)

// cmdBackup copies an embedded database while it serves (docs/operations.md,
// "Backups"); PostgreSQL is backed up with its own tools.
func cmdBackup(e *env, args []string) int {
	fs := newFlags(e, "backup")
	db := dbFlag(fs)
	out := fs.String("out", "", "the file to write the copy to (it must not exist); required")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *out == "" {
		return usageError(e, "backup", "--out is required: the file to write the copy to")
	}
	kind, err := store.Kind(*db)
	if err != nil {
		return usageError(e, "backup", "--db: %v", err)
	}
	if kind != "sqlite" {
		return usageError(e, "backup", "--db is PostgreSQL: back it up with pg_dump or a base backup with WAL archiving (docs/operations.md, \"Backups\")")
	}
	schema, err := databaseSchema(e.ctx, *db)
	if err != nil {
		return failCode(e, err)
	}
	if schema == 0 {
		return failCode(e, &usageErr{fmt.Sprintf("--db %s holds no airlock database (never migrated)", redactDSN(*db))})
	}
	// Read-only: the copy is read from one snapshot; the source is not
	// changed (VACUUM INTO writes only the new file).
	src, err := sqlite.Open(store.SQLitePath(*db), &sqlite.Config{ReadOnly: true})
	if err != nil {
		return fail(e, "backup: %v", err)
	}
	err = src.Backup(e.ctx, *out)
	src.Close()
	if err != nil {
		return fail(e, "%v", err)
	}
	// The copy's own head: what its audit chain must verify against.
	cp, err := sqlite.Open(*out, &sqlite.Config{ReadOnly: true})
	if err != nil {
		return fail(e, "backup: opening the copy: %v", err)
	}
	defer cp.Close()
	head, err := cp.AuditHead(context.Background())
	if err != nil {
		return fail(e, "backup: reading the copy's audit head: %v", err)
	}
	fmt.Fprintf(e.stdout, "backed up %s to %s (schema %d)\n", redactDSN(*db), *out, schema)
	if head.Hash == "" {
		fmt.Fprintf(e.stdout, "audit head: none (no event sealed yet)\ncheck it: airlock audit verify --db sqlite:%s\n", *out)
		return 0
	}
	fmt.Fprintf(e.stdout, "audit head: event %d, hash %s\ncheck it: airlock audit verify --db sqlite:%s --expect-head %s\n", head.Seq, head.Hash, *out, head.Hash)
	return 0
}
