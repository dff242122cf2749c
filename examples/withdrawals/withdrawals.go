// Package withdrawals is the bundled example: a manifest for an agent that
// works a queue of withdrawals, with its approval rule tests.
package withdrawals

import (
	"embed"

	"github.com/airlockhq/airlock/manifest"
)

// Files holds airlock.yaml and policy/*.yaml.
//
//go:embed airlock.yaml policy/*.yaml
var Files embed.FS

// ManifestName is the manifest's name inside Files.
const ManifestName = "airlock.yaml"

// Manifest loads the bundled example's manifest (what airlock serve runs
// with no --config).
func Manifest() (*manifest.Manifest, error) {
	return manifest.LoadFS(Files, ManifestName, "examples/withdrawals/airlock.yaml")
}
