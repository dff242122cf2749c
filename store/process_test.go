package store_test

// Tests with real OS processes: the test binary re-executes itself as a
// child (AIRLOCK_TEST_CHILD names the role) against one database file or
// one PostgreSQL schema.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/guard"
	"github.com/airlockhq/airlock/internal/bench"
	"github.com/airlockhq/airlock/internal/testdb"
	"github.com/airlockhq/airlock/store"
)

const (
	envChild    = "AIRLOCK_TEST_CHILD"
	envDSN      = "AIRLOCK_TEST_CHILD_DSN"
	envKeySpace = "AIRLOCK_TEST_CHILD_KEYSPACE"
	envKeys     = "AIRLOCK_TEST_CHILD_KEYS"
)

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "":
		os.Exit(m.Run())
	case "race":
		os.Exit(childRace())
	case "hang":
		os.Exit(childHang())
	default:
		fmt.Fprintln(os.Stderr, "unknown child role")
		os.Exit(2)
	}
}

// crashTool is a write tool in a forever window keyed on record_id.
func crashTool() *airlock.Tool { return bench.Tool() }

// childRace waits for a line on stdin (so that every child starts at
// once), then races 16 callers on each key of the key space and prints
// the bench result.
func childRace() int {
	ctx := context.Background()
	s, err := store.OpenMigrated(ctx, os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer s.Close()
	g := guard.New(s, nil)
	defer g.Close()
	var keys int
	_, _ = fmt.Sscan(os.Getenv(envKeys), &keys)
	fmt.Println("READY")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	res := bench.Run(ctx, &bench.GuardCaller{Guard: g, Tool: crashTool()}, bench.Config{
		Impl: "airlock", Mode: bench.ModeRace, Calls: keys * 16, Concurrency: 16,
		KeySpace: os.Getenv(envKeySpace), Work: 2 * time.Millisecond,
	})
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// childHang claims a key, says so, and hangs inside the side effect until
// it is killed.
func childHang() int {
	ctx := context.Background()
	s, err := store.OpenMigrated(ctx, os.Getenv(envDSN))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	g := guard.New(s, &guard.Config{Lease: 2 * time.Second})
	args := airlock.ArgsOf(map[string]any{"record_id": os.Getenv(envKeySpace)})
	_, err = g.Do(ctx, &airlock.Call{Tool: crashTool(), Args: args}, func(context.Context, string) airlock.Outcome {
		fmt.Println("CLAIMED")
		select {} // the side effect is under way when the process dies
	})
	fmt.Fprintln(os.Stderr, "unreachable:", err)
	return 1
}

type dbCase struct {
	name string
	dsn  func(t *testing.T) string
}

func databases() []dbCase {
	return []dbCase{
		{"sqlite", func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "shared.db") }},
		{"postgres", func(t *testing.T) string { return testdb.Schema(t) }},
	}
}

func child(t *testing.T, role, dsn, keySpace string, keys int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+role, envDSN+"="+dsn, envKeySpace+"="+keySpace, fmt.Sprintf("%s=%d", envKeys, keys))
	cmd.Stderr = os.Stderr
	return cmd
}

func TestManyProcessesOneExecutionPerKey(t *testing.T) {
	t.Parallel()
	for _, db := range databases() {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			dsn := db.dsn(t)
			// Migrate once up front, so that the children race on keys, not on schema.
			s, err := store.OpenMigrated(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			s.Close()

			const procs, keys = 4, 40
			space := fmt.Sprintf("mp-%d", time.Now().UnixNano())
			type proc struct {
				cmd   *exec.Cmd
				stdin interface{ Close() error }
				out   *bufio.Reader
			}
			ps := make([]proc, procs)
			for i := range ps {
				cmd := child(t, "race", dsn, space, keys)
				in, _ := cmd.StdinPipe()
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				ps[i] = proc{cmd, in, bufio.NewReader(out)}
				if line, err := ps[i].out.ReadString('\n'); err != nil || strings.TrimSpace(line) != "READY" {
					t.Fatalf("child %d: %q, %v", i, line, err)
				}
			}
			for _, p := range ps {
				_ = p.stdin.Close() // the start signal: EOF on stdin
			}
			var total int64
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i, p := range ps {
				wg.Add(1)
				go func() {
					defer wg.Done()
					line, err := p.out.ReadString('\n')
					var res bench.Result
					if err != nil || json.Unmarshal([]byte(line), &res) != nil {
						t.Errorf("child %d printed %q (%v)", i, line, err)
						return
					}
					if !res.OK || res.Errors != 0 {
						t.Errorf("child %d: %+v", i, res)
					}
					t.Logf("child %d: executions %d, wake p50 %dus", i, res.Executions, res.WakeP50us)
					mu.Lock()
					total += res.Executions
					mu.Unlock()
				}()
			}
			wg.Wait()
			if total != keys {
				t.Fatalf("%d processes ran %d side effects for %d keys; want exactly %d", procs, total, keys, keys)
			}
		})
	}
}

func TestKilledMidCallBecomesInDoubt(t *testing.T) {
	t.Parallel()
	for _, db := range databases() {
		for _, happened := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/settled_happened=%v", db.name, happened), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				dsn := db.dsn(t)
				recordID := fmt.Sprintf("WD-%d", time.Now().UnixNano())

				cmd := child(t, "hang", dsn, recordID, 0)
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "CLAIMED" {
					_ = cmd.Process.Kill()
					t.Fatalf("child: %q, %v", line, err)
				}
				// Between claim and completion.
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
				_ = cmd.Wait()

				s, err := store.OpenMigrated(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				g := guard.New(s, &guard.Config{Lease: 2 * time.Second})
				defer g.Close()
				call := &airlock.Call{Tool: crashTool(), Args: airlock.ArgsOf(map[string]any{"record_id": recordID})}
				ran := 0
				fn := func(context.Context, string) airlock.Outcome {
					ran++
					return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: json.RawMessage(`{"second":true}`)}
				}
				d, err := g.Derive(call)
				if err != nil {
					t.Fatal(err)
				}

				// Before the lease ends, the record is running: no re-run.
				rec, err := g.Get(ctx, d.Key)
				if err != nil || rec.State != airlock.StateRunning {
					t.Fatalf("after the kill: %+v, %v; want running", rec, err)
				}
				// After the lease, the reaper (any replica) moves it to in_doubt.
				deadline := time.Now().Add(15 * time.Second)
				for {
					if _, err := guard.NewReaper(g, nil).Reap(ctx); err != nil {
						t.Fatal(err)
					}
					rec, err = g.Get(ctx, d.Key)
					if err == nil && rec.State == airlock.StateInDoubt {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("record still %+v after the lease", rec)
					}
					time.Sleep(200 * time.Millisecond)
				}
				ans, err := g.Do(ctx, call, fn)
				if err != nil || ans.Status != airlock.StatusInDoubt || !ans.Repeat || ran != 0 {
					t.Fatalf("repeat of an in-doubt call: %+v, %v, ran %d; want in_doubt, repeat, not run", ans, err, ran)
				}

				if _, err := g.Settle(ctx, airlock.SettleRequest{Key: d.Key, Happened: happened, Result: json.RawMessage(`{"settled":true}`), Note: "checked the ledger", By: "alice", Role: airlock.RoleAdmin}); err != nil {
					t.Fatal(err)
				}
				ans, err = g.Do(ctx, call, fn)
				if err != nil {
					t.Fatal(err)
				}
				if happened {
					if ans.Status != airlock.StatusSucceeded || !ans.Repeat || string(ans.Result) != `{"settled":true}` || ran != 0 {
						t.Fatalf("after settling as happened: %+v, ran %d", ans, ran)
					}
				} else {
					if ans.Status != airlock.StatusSucceeded || ans.Repeat || string(ans.Result) != `{"second":true}` || ran != 1 {
						t.Fatalf("after settling as not happened: %+v, ran %d; want a fresh execution", ans, ran)
					}
				}
			})
		}
	}
}
