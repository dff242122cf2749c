package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the fixture is written with the driver the store uses

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store/sqlite"
)

// previousSchema is the schema of the release before who-decides (0014):
// the fixture database is made with the first 13 migrations, as that
// release made it, and holds a plan it wrote.
const previousSchema = 13

func schemaFixture(t *testing.T, path string, upTo int) {
	t.Helper()
	ms, err := sqlite.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE airlock_schema_migrations (version INTEGER NOT NULL PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL)`)
	for _, m := range ms[:min(upTo, len(ms))] {
		exec(m.SQL)
		exec(`INSERT INTO airlock_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, m.Version, m.Name, time.Now().UnixMicro())
	}
	for v := len(ms) + 1; v <= upTo; v++ { // a schema from the future
		exec(`INSERT INTO airlock_schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`, v, "future", time.Now().UnixMicro())
	}
	if upTo == previousSchema {
		now := time.Now().UnixMicro()
		exec(`INSERT INTO airlock_plans (id, key, tool, status, rule, decision, args, decision_hash, run_id, created_at, updated_at, expires_at)
			VALUES ('pl_old', 'k-old', 'approve_withdrawal', 'awaiting_approval', 'everything_else', 'human', '{"record_id":"WD-OLD"}', 'h-old', 'run-old', ?, ?, ?)`,
			now, now, now+int64(time.Hour/time.Microsecond))
		// Its planned event names the agent that proposed it, as that
		// release wrote it (0015 fills proposed_by from it).
		exec(`INSERT INTO airlock_audit (at, kind, run_id, key, tool, args, actor, plan_id, rule, decision_hash)
			VALUES (?, 'planned', 'run-old', 'k-old', 'approve_withdrawal', '{"record_id":"WD-OLD"}', 'agent-old', 'pl_old', 'everything_else', 'h-old')`, now)
	}
}

// TestUpgradeFromThePreviousSchema: migrate --status and --dry-run show
// what the new binary would change and change nothing; migrating keeps
// what the previous release wrote, and its plan is decided by the new
// rules; a database newer than the binary is refused naming both versions.
func TestUpgradeFromThePreviousSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	schemaFixture(t, path, previousSchema)
	dsn := "sqlite:" + path

	r := runCLI(t, "migrate", "--status", "--db", dsn)
	if r.code != 0 || !strings.Contains(r.stdout, "0013_tasks") || !regexpMatch(`0014_approvals\s+pending`, r.stdout) ||
		!strings.Contains(r.stdout, fmt.Sprintf("schema version %d of 16", previousSchema)) {
		t.Fatalf("migrate --status: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "migrate", "--dry-run", "--db", dsn)
	if r.code != 0 || !strings.Contains(r.stdout, "-- 0014_approvals") || !strings.Contains(r.stdout, "ADD COLUMN proposed_by") || strings.Contains(r.stdout, "0013_tasks") {
		t.Fatalf("migrate --dry-run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if v, err := databaseSchema(context.Background(), dsn); err != nil || v != previousSchema {
		t.Fatalf("after --status and --dry-run the schema is %d (%v); want them to change nothing", v, err)
	}
	if r := runCLI(t, "migrate", "--db", dsn); r.code != 0 {
		t.Fatalf("migrate: %s", r.stderr)
	}
	s, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p, err := s.GetPlan(ctx, "pl_old")
	if err != nil || p.ApprovalsRequiredOr() != 1 || len(p.Approvals) != 0 || p.ProposedBy != "agent-old" {
		t.Fatalf("the previous release's plan after the upgrade: %+v %v", p, err)
	}
	got, err := s.DecidePlan(ctx, &airlock.PlanDecision{ID: p.ID, Approve: true, By: "alice", Role: airlock.RoleApprover, Reason: "checked",
		DecisionHash: p.DecisionHash, Now: time.Now()})
	if err != nil || got.Status != airlock.PlanApproved || len(got.Approvals) != 1 {
		t.Fatalf("deciding it: %+v %v", got, err)
	}

	future := filepath.Join(t.TempDir(), "future.db")
	schemaFixture(t, future, 17)
	for _, args := range [][]string{{"migrate", "--db", "sqlite:" + future}, {"migrate", "--status", "--db", "sqlite:" + future}} {
		r := runCLI(t, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "schema version 17, newer than this airlock (16)") {
			t.Fatalf("airlock %s on a newer schema: exit %d %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }

// previousRelease is the commit whose binary plays the release before this
// one in TestRollingUpgrade: the last commit at schema 13. Bump it (to the
// last release's tag) when a release is cut.
const previousRelease = "213172bad88c3ef47e616d0207a9fc9eb3ec111c"

// buildPrevious builds airlock as the previous release: that commit's tree,
// from the repository's history (git archive), with the module cache.
func buildPrevious(t *testing.T) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git clone: %v", err)
	}
	if err := exec.Command("git", "cat-file", "-e", previousRelease+"^{commit}").Run(); err != nil {
		if os.Getenv("AIRLOCK_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("commit %s is not in this clone's history (a shallow clone?)", previousRelease)
		}
		t.Skipf("commit %s is not in this clone's history", previousRelease)
	}
	dir := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %s | tar -x -C %q", strings.TrimSpace(string(root)), previousRelease, dir))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "airlock-previous")
	build := exec.Command("go", "build", "-o", out, "./cmd/airlock")
	build.Dir = dir
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the previous release: %v\n%s", err, b)
	}
	return out
}

// TestRollingUpgrade: the previous release serves a PostgreSQL database;
// the new binary starts beside it and migrates the schema while it
// serves; both take calls for the same work at once, and each piece of
// work runs once; the previous release, restarted, refuses the newer
// schema.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	previous := buildPrevious(t)
	dsn := testdb.Schema(t)
	payments := startPayments(t)
	config := e2eManifest(t, payments.url(), "", "", "")
	old := start(t, tokenEnv, previous, "serve", "--config", config, "--db", dsn, "--listen", freeAddr(t))
	if v, err := databaseSchema(context.Background(), dsn); err != nil || v != previousSchema {
		t.Fatalf("the previous release migrated to %d (%v), want %d", v, err, previousSchema)
	}
	// A plan the previous release proposed: its row has no proposer (0014
	// added the column), its planned event names the agent.
	status, proposed, err := tryAPICall("POST", old.url()+"/v1/calls", agentToken, `{"tool":"plan_approve_withdrawal","args":{"record_id":"RU-PLAN"}}`)
	oldPlan, _ := proposed["plan"].(map[string]any)
	if err != nil || status != 200 || oldPlan["id"] == nil {
		t.Fatalf("a plan proposed to the previous release: %d %v %v", status, proposed, err)
	}
	upgraded := serve(t, config, dsn)
	if v, err := databaseSchema(context.Background(), dsn); err != nil || v != 16 {
		t.Fatalf("the new binary migrated to %d (%v), want 16", v, err)
	}
	if status, p, err := tryAPICall("GET", upgraded.url()+"/v1/plans/"+oldPlan["id"].(string), approverToken, ""); err != nil || status != 200 || p["proposed_by"] != "agent-1" {
		t.Fatalf("the previous release's plan after 0015: %d %v %v; want proposed_by agent-1, from its planned event", status, p, err)
	}
	const works = 20
	var wg sync.WaitGroup
	errs := make(chan error, works*4)
	for i := range works {
		for _, base := range []string{old.url(), upgraded.url(), old.url(), upgraded.url()} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body, err := tryAPICall("POST", base+"/v1/calls", agentToken, fmt.Sprintf(`{"tool":"add_note","args":{"record_id":"RU-%d","text":"rolling"}}`, i))
				if err == nil && status != 200 {
					err = fmt.Errorf("%s: %d %v", base, status, body)
				}
				if err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	st := stats(t, payments)
	for i := range works {
		if n := len(st.Notes[fmt.Sprintf("RU-%d", i)]); n != 1 {
			t.Fatalf("RU-%d ran %d times across the two versions", i, n)
		}
	}
	r, err := exec.Command(previous, "migrate", "--db", dsn).CombinedOutput()
	if err == nil || !strings.Contains(string(r), "newer than this airlock") {
		t.Fatalf("the previous release on the new schema: %v\n%s", err, r)
	}
}
