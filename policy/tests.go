package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock"
)

// Case is one rule test (docs/configuration.md, "The manifest"): arguments and facts in, the rule and
// decision expected out.
type Case struct {
	Name  string         `yaml:"name"`
	Args  map[string]any `yaml:"args"`
	Facts map[string]any `yaml:"facts"`
	Run   string         `yaml:"run"`
	Want  struct {
		Rule     string `yaml:"rule"`
		Decision string `yaml:"decision"`
	} `yaml:"want"`
}

// CaseResult is a case's outcome.
type CaseResult struct {
	Tool    string   `json:"tool"`
	File    string   `json:"file"`
	Name    string   `json:"name"`
	Pass    bool     `json:"pass"`
	Got     Decision `json:"got"`
	Message string   `json:"message,omitempty"`
}

// CompileAll compiles the rules of every irreversible tool. Problems carry
// the rule's path in the manifest.
func CompileAll(m *airlock.Catalog) (map[string]*Policy, []airlock.Problem) {
	out := map[string]*Policy{}
	var problems []airlock.Problem
	for i, t := range m.Tools {
		if t == nil || t.Approval == nil {
			continue
		}
		p, errs := Compile(t, i)
		for _, e := range errs {
			problems = append(problems, airlock.Problem{Path: e.Path, Message: e.Error()})
		}
		out[t.Name] = p
	}
	return out, problems
}

// LoadCases reads a rule test file.
func LoadCases(fsys fs.FS, name string) ([]Case, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return nil, err
	}
	return parseCases(b, name)
}

// readCases reads a tool's rule test file: an absolute path from the file
// system (io/fs refuses rooted names), a relative one from beside the
// manifest.
func readCases(m *airlock.Catalog, name string) (string, []Case, error) {
	if filepath.IsAbs(name) {
		file := filepath.Clean(name)
		b, err := os.ReadFile(file)
		if err != nil {
			return file, nil, err
		}
		cases, err := parseCases(b, file)
		return file, cases, err
	}
	if m.Files == nil {
		return name, nil, errors.New("policy: the manifest was not loaded from a file; cannot read rule tests")
	}
	file := path.Clean(filepath.ToSlash(name))
	cases, err := LoadCases(m.Files, file)
	return file, cases, err
}

func parseCases(b []byte, name string) ([]Case, error) {
	var cases []Case
	dec := yaml.NewDecoder(bytesReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&cases); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	for i, c := range cases {
		if c.Name == "" {
			return nil, fmt.Errorf("%s: case %d has no name", name, i+1)
		}
		if c.Want.Decision != Auto && c.Want.Decision != Human {
			return nil, fmt.Errorf("%s: case %q: want.decision must be auto or human", name, c.Name)
		}
	}
	return cases, nil
}

// RunTests runs every tool's rule test file. A tool with rules and no test
// file is reported as a failing result: rules without tests are not allowed
// to approve money.
func RunTests(m *airlock.Catalog) ([]CaseResult, error) {
	policies, problems := CompileAll(m)
	if len(problems) > 0 {
		return nil, &airlock.ValidationError{Problems: problems}
	}
	var results []CaseResult
	for _, t := range m.Tools {
		if t.Approval == nil {
			continue
		}
		if t.Approval.Tests == "" {
			results = append(results, CaseResult{Tool: t.Name, Name: "(no tests)", Message: "the tool's rules have no test file (approval.tests)"})
			continue
		}
		file, cases, err := readCases(m, t.Approval.Tests)
		if err != nil {
			return nil, fmt.Errorf("tool %s: %w", t.Name, err)
		}
		for _, c := range cases {
			got := policies[t.Name].Decide(Input{Args: c.Args, Facts: c.Facts, Tool: t.Name, Run: c.Run})
			r := CaseResult{Tool: t.Name, File: file, Name: c.Name, Got: got}
			r.Pass = got.Decision == c.Want.Decision && (c.Want.Rule == "" || got.Rule == c.Want.Rule)
			if !r.Pass {
				r.Message = fmt.Sprintf("want rule %q decision %s, got rule %q decision %s", c.Want.Rule, c.Want.Decision, got.Rule, got.Decision)
			}
			results = append(results, r)
		}
	}
	return results, nil
}
