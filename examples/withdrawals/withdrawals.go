// Package withdrawals is the bundled example: a manifest for an agent that
// works a queue of withdrawals, with its approval rule tests.
package withdrawals

import "embed"

// Files holds airlock.yaml and policy/*.yaml.
//
//go:embed airlock.yaml policy/*.yaml
var Files embed.FS

// ManifestName is the manifest's name inside Files.
const ManifestName = "airlock.yaml"
