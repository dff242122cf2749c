package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/store/sqlite"
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

// A read command changes nothing in the database it reads: not the bytes
// of a database in rollback-journal mode (the store's own opening would
// switch it to WAL), not those of one a killed writer left with its -wal
// beside it (closing would checkpoint it), and a file whose name holds #
// or ? is that file, not a new one named by the part before it.
func TestReadCommandsChangeNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A database with a plan and a record in it.
	live := filepath.Join(dir, "live", "a.db")
	if r := runCLI(t, "migrate", "--db", "sqlite:"+live); r.code != 0 {
		t.Fatal(r.stderr)
	}
	s, err := sqlite.Open(live, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := guard.New(s, nil)
	m, err := withdrawals.Manifest() // the commands' default manifest
	if err != nil {
		t.Fatal(err)
	}
	ans, err := g.Do(context.Background(), &airlock.Call{Tool: m.Tool("add_note"), Args: airlock.MustArgs(`{"record_id":"WD-1","text":"x"}`)},
		func(context.Context, string) airlock.Outcome {
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{}`)}
		})
	if err != nil {
		t.Fatal(err)
	}
	// A killed writer's files: copied while the store is open, its last
	// writes still in the -wal.
	crashed := filepath.Join(dir, "crashed")
	if err := os.MkdirAll(crashed, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if b, err := os.ReadFile(live + suffix); err == nil {
			if err := os.WriteFile(filepath.Join(crashed, "a.db"+suffix), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	g.Close()
	s.Close()
	if _, err := os.Stat(filepath.Join(crashed, "a.db-wal")); err != nil {
		t.Fatalf("the copy has no -wal to leave alone: %v", err)
	}
	// The same database in rollback-journal mode, under a name with # and ?.
	odd := filepath.Join(dir, "odd", "a#b?c.db")
	if err := os.MkdirAll(filepath.Dir(odd), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(live)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(odd, b, 0o644); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", sqlite.URI(odd, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA journal_mode=DELETE`); err != nil {
		t.Fatal(err)
	}
	db.Close()

	for _, path := range []string{filepath.Join(crashed, "a.db"), odd} {
		files := func() map[string]string {
			out := map[string]string{}
			entries, _ := os.ReadDir(filepath.Dir(path))
			for _, e := range entries {
				b, _ := os.ReadFile(filepath.Join(filepath.Dir(path), e.Name()))
				out[e.Name()] = string(b)
			}
			return out
		}
		before := files()
		for _, args := range [][]string{
			{"audit", "verify"}, {"audit", "export"}, {"report"}, {"plans", "list"}, {"records", "show", ans.Key},
			{"migrate", "--status"}, {"version"},
		} {
			r := runCLI(t, append(args, "--db", "sqlite:"+path)...)
			if r.code != 0 {
				t.Errorf("airlock %s on %s: exit %d %s", strings.Join(args, " "), filepath.Base(path), r.code, r.stderr)
			}
		}
		after := files()
		for name, content := range before {
			// (-shm is SQLite's shared-memory index of the -wal, which
			// every reader writes; the data is in the file and its -wal.)
			if after[name] != content && !strings.HasSuffix(name, "-shm") {
				t.Errorf("the read commands changed %s", name)
			}
		}
		for name := range after {
			if _, had := before[name]; !had && !strings.HasSuffix(name, "-shm") && !strings.HasSuffix(name, "-wal") {
				t.Errorf("the read commands made %s beside %s", name, filepath.Base(path))
			}
		}
	}
}
