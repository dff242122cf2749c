package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/audit"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/store/sqlite"
)

var headLine = regexp.MustCompile(`audit head: event (\d+), hash ([0-9a-f]+)`)

// TestBackupUnderLoad: a copy taken while calls complete and the audit log
// is sealed holds a consistent database: restored, every record completed
// in it answers its repeat with the first result without running the work
// again, and its audit chain verifies against the head the backup printed.
func TestBackupUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	dsn := "sqlite:" + filepath.Join(dir, "live.db")
	if r := runCLI(t, "migrate", "--db", dsn); r.code != 0 {
		t.Fatal(r.stderr)
	}
	live, err := sqlite.Open(filepath.Join(dir, "live.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	g := guard.New(live, nil)
	m, err := loadManifest("")
	if err != nil {
		t.Fatal(err)
	}
	tool := m.Tool("add_note")
	call := func(g *guard.Guard, i int, ran *atomic.Int64) (*airlock.Answer, error) {
		args := airlock.MustArgs(fmt.Sprintf(`{"record_id":"WD-%d","text":"checked"}`, i))
		return g.Do(ctx, &airlock.Call{Tool: tool, Args: args}, func(context.Context, string) airlock.Outcome {
			ran.Add(1)
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(fmt.Sprintf(`{"note":%d}`, i))}
		})
	}
	start := time.Now()
	// Load: four writers and a sealer, until the backup is taken.
	var stop atomic.Bool
	var ran atomic.Int64
	var next, completed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := call(g, int(next.Add(1)), &ran); err != nil {
					t.Error(err)
					return
				}
				completed.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if _, err := audit.SealPending(ctx, live); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for completed.Load() < 200 { // the backup lands mid-load, after 200 completions
		if t.Failed() {
			break
		}
	}
	backup := filepath.Join(dir, "copy.db")
	r := runCLI(t, "backup", "--db", dsn, "--out", backup)
	stop.Store(true)
	wg.Wait()
	g.Close()
	h := headLine.FindStringSubmatch(r.stdout)
	if r.code != 0 || h == nil || h[1] == "0" {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if again := runCLI(t, "backup", "--db", dsn, "--out", backup); again.code == 0 || !strings.Contains(again.stderr, "exists") {
		t.Fatalf("a backup over an existing file: exit %d %s", again.code, again.stderr)
	}

	// Restore: a new server's store on the copy.
	restored, err := sqlite.Open(backup, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	if err := restored.Ping(ctx); err != nil {
		t.Fatalf("the copy is not a migrated database: %v", err)
	}
	rg := guard.New(restored, nil)
	defer rg.Close()
	var rerun atomic.Int64
	checked := 0
	for i := 1; i <= int(next.Load()); i++ {
		args := airlock.MustArgs(fmt.Sprintf(`{"record_id":"WD-%d","text":"checked"}`, i))
		// The call's window (24h, from midnight UTC) is today's, unless the
		// test ran across midnight: both are tried.
		var rec *airlock.Record
		var err error = airlock.ErrNotFound
		for _, at := range []time.Time{start, time.Now()} {
			d, derr := airlock.DeriveKey(airlock.KeyInput{Tool: tool, Calendar: &m.Calendar, Args: args.Value(), At: at})
			if derr != nil {
				t.Fatal(derr)
			}
			if rec, err = restored.Get(ctx, d.Key); err == nil {
				break
			}
		}
		if errors.Is(err, airlock.ErrNotFound) || (err == nil && rec.State != airlock.StateSucceeded) {
			continue // after the copy's snapshot, or not completed in it
		}
		if err != nil {
			t.Fatal(err)
		}
		ans, err := call(rg, i, &rerun)
		if err != nil || !ans.Repeat || string(ans.Result) != string(rec.Result) || string(ans.Result) != fmt.Sprintf(`{"note":%d}`, i) {
			t.Fatalf("WD-%d after restore: %+v %v", i, ans, err)
		}
		checked++
	}
	if checked < 200 || rerun.Load() != 0 {
		t.Fatalf("%d completed records checked after restore, %d ran again; want at least 200 and none", checked, rerun.Load())
	}
	// The command backup printed checks the copy and changes nothing in
	// it: events the copy holds unsealed are reported, not sealed.
	before, err := os.ReadFile(backup)
	if err != nil {
		t.Fatal(err)
	}
	if v := runCLI(t, "audit", "verify", "--db", "sqlite:"+backup, "--expect-head", h[2]); v.code != 0 || !strings.Contains(v.stdout, "not sealed yet") {
		t.Fatalf("audit verify of the copy: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	if after, err := os.ReadFile(backup); err != nil || !bytes.Equal(before, after) {
		t.Fatalf("audit verify changed the copy it checked (%v)", err)
	}
	if pg := runCLI(t, "backup", "--db", "postgres://127.0.0.1/x", "--out", filepath.Join(dir, "pg.db")); pg.code != 2 || !strings.Contains(pg.stderr, "pg_dump") {
		t.Fatalf("backup of PostgreSQL: exit %d %s", pg.code, pg.stderr)
	}
}
