// Package python_test runs the Python client's tests (python3 -m unittest)
// against an airlock built from this tree, as part of go test ./...
package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// EnvRequirePython makes a missing python3 a failure (CI).
const EnvRequirePython = "AIRLOCK_TEST_REQUIRE_PYTHON"

func TestPythonClient(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv(EnvRequirePython) == "1" {
			t.Fatalf("no python3 and %s=1", EnvRequirePython)
		}
		t.Skip("no python3; skipping the Python client's tests")
	}
	bin := filepath.Join(t.TempDir(), "airlock")
	if out, err := exec.Command("go", "build", "-o", bin, "../../cmd/airlock").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(python, "-W", "error::ResourceWarning", "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Env = append(os.Environ(), "AIRLOCK_BIN="+bin, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
