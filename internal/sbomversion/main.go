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
	"io"
	"os"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
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

// Stamp names the main component by version: its version, and its purl
// and bom-ref (wherever the dependency graph refers to that bom-ref),
// with the old version replaced after their "@". Nothing else changes, a
// dependency that happens to share the old version least of all, and the
// members keep their order and indentation.
func Stamp(sbom []byte, version string) ([]byte, error) {
	var doc struct {
		Metadata struct {
			Component struct {
				Version string `json:"version"`
				BOMRef  string `json:"bom-ref"`
				PURL    string `json:"purl"`
			} `json:"component"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(sbom, &doc); err != nil {
		return nil, fmt.Errorf("not a CycloneDX JSON SBOM: %w", err)
	}
	c := doc.Metadata.Component
	if c.Version == "" {
		return nil, errors.New("the SBOM names no version of its main component (metadata.component.version)")
	}
	if c.Version == version {
		return sbom, nil
	}
	at := func(s string) string { return strings.Replace(s, "@"+c.Version, "@"+version, 1) }
	replace := map[string]string{c.BOMRef: at(c.BOMRef), c.PURL: at(c.PURL)}
	delete(replace, "")

	dec := jsontext.NewDecoder(bytes.NewReader(sbom))
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out, jsontext.WithIndent("  "), jsontext.EscapeForHTML(true))
	// path holds, for each open object, the member being read ("" in an
	// array); named reports whether that member's name has been read.
	var path []string
	var named []bool
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		inObject := len(named) > 0 && path[len(path)-1] != "[]"
		switch kind := tok.Kind(); {
		case kind == '{' || kind == '[':
			if inObject {
				named[len(named)-1] = false
			}
			seg := ""
			if kind == '[' {
				seg = "[]"
			}
			path, named = append(path, seg), append(named, false)
		case kind == '}' || kind == ']':
			path, named = path[:len(path)-1], named[:len(named)-1]
			if len(named) > 0 && path[len(path)-1] != "[]" {
				named[len(named)-1] = false
			}
		case inObject && !named[len(named)-1]:
			path[len(path)-1], named[len(named)-1] = tok.String(), true // a member's name
		default:
			if kind == '"' {
				if strings.Join(path, ".") == "metadata.component.version" {
					tok = jsontext.String(version)
				} else if to, ok := replace[tok.String()]; ok {
					tok = jsontext.String(to)
				}
			}
			if inObject {
				named[len(named)-1] = false
			}
		}
		if err := enc.WriteToken(tok); err != nil {
			return nil, err
		}
	}
	return out.Bytes(), nil
}
