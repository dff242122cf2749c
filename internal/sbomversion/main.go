// Command sbomversion stamps the release version into a CycloneDX SBOM
// that cyclonedx-gomod wrote: it names airlock by the version git gives
// (a pseudo-version until the release is tagged), and the SBOM must say
// the version the binaries say (docs/operations.md, "Release artifacts").
//
//	go run ./internal/sbomversion --version v0.3.0 dist/airlock_v0.3.0.sbom.cdx.json
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	version := flag.String("version", "", "the release version; required")
	flag.Parse()
	if *version == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "sbomversion: want --version VERSION and the SBOM file")
		os.Exit(2)
	}
	path := flag.Arg(0)
	in, err := os.ReadFile(path)
	if err == nil {
		var out []byte
		if out, err = Stamp(in, *version); err == nil {
			err = os.WriteFile(path, out, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbomversion:", err)
		os.Exit(1)
	}
}

// Stamp replaces the main component's version, wherever the SBOM writes it
// (its version, purl and bom-ref, and the dependency graph's references to
// it), with version.
func Stamp(sbom []byte, version string) ([]byte, error) {
	var doc struct {
		Metadata struct {
			Component struct {
				Version string `json:"version"`
			} `json:"component"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		return nil, fmt.Errorf("not a CycloneDX JSON SBOM: %w", err)
	}
	old := doc.Metadata.Component.Version
	if old == "" {
		return nil, errors.New("the SBOM names no version of its main component (metadata.component.version)")
	}
	if old == version {
		return sbom, nil
	}
	// A pseudo-version or tag is specific enough to replace as text: its
	// other occurrences are the purl and bom-ref that name the same module.
	out := bytes.ReplaceAll(sbom, []byte(old), []byte(version))
	if !json.Valid(out) {
		return nil, fmt.Errorf("replacing %q with %q made the SBOM invalid JSON", old, version)
	}
	return out, nil
}
