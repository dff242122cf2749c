package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// Every deploy file gives airlock the time its shutdown takes: the grace
// period before a supervisor kills it is --shutdown-timeout's default, as
// the binary's help says it, and at least 10 s more.
func TestDeployFilesWaitForTheShutdown(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "serve", "--help")
	m := regexp.MustCompile(`--shutdown-timeout duration\s+.*\(default ([0-9a-z.]+)\)`).FindStringSubmatch(r.stdout + r.stderr)
	if m == nil {
		t.Fatalf("serve --help does not give --shutdown-timeout's default:\n%s%s", r.stdout, r.stderr)
	}
	shutdown, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..", "deploy")
	for _, f := range []struct{ file, pattern, unit string }{
		{"systemd/airlock.service", `(?m)^TimeoutStopSec=(\d+)$`, "s"},
		{"kubernetes/deployment.yaml", `terminationGracePeriodSeconds: (\d+)`, "s"},
		{"compose.yaml", `stop_grace_period: (\d+)s`, "s"},
	} {
		b, err := os.ReadFile(filepath.Join(root, f.file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(f.pattern).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s gives no grace period (%s)", f.file, f.pattern)
			continue
		}
		n, _ := strconv.Atoi(string(m[1]))
		if grace := time.Duration(n) * time.Second; grace < shutdown+10*time.Second {
			t.Errorf("%s: a grace period of %s; --shutdown-timeout defaults to %s, so it needs at least %s", f.file, grace, shutdown, shutdown+10*time.Second)
		}
	}
}
