package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A read command given a database that is not there refuses it (exit 2,
// naming the path) and creates nothing — no directory, no file — so a
// mistyped backup path never reads as "ok: 0 events"; a file that is not
// a migrated airlock database is refused the same way, and left as it was.
func TestReadCommandsCreateNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "airlock.yaml")
	if err := os.WriteFile(config, []byte(textManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "nonexistent", "x.db")
	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, db := range []string{missing, empty} {
		for _, args := range [][]string{
			{"audit", "verify"}, {"audit", "export"}, {"report", "--config", config},
			{"plans", "list", "--config", config}, {"plans", "show", "pl_00", "--config", config},
			{"records", "show", "k1", "--config", config}, {"migrate", "--status"},
		} {
			r := runCLI(t, append(args, "--db", "sqlite:"+db)...)
			want := "no database at " + db
			if db == empty && args[0] == "migrate" {
				// An empty file is a database at schema 0: --status says so
				// (and, below, leaves it as it was).
				if r.code != 0 || !strings.Contains(r.stdout, "schema version 0 of") {
					t.Errorf("migrate --status on an empty file: exit %d %s%s", r.code, r.stdout, r.stderr)
				}
				continue
			}
			if db == empty {
				want = "is not an airlock database"
			}
			if r.code != 2 || !strings.Contains(r.stderr, want) {
				t.Errorf("airlock %s on %s: exit %d %q; want 2 saying %q", strings.Join(args, " "), filepath.Base(db), r.code, r.stderr, want)
			}
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !os.IsNotExist(err) {
		t.Fatalf("a read command made the missing database's directory: %v", err)
	}
	if fi, err := os.Stat(empty); err != nil || fi.Size() != 0 {
		t.Fatalf("a read command changed the empty file: %v %v", fi, err)
	}
}
