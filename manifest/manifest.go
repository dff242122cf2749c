// Package manifest is airlock.yaml (docs/configuration.md, "The manifest"):
// the server's configuration (auth, upstreams, limits, notify, retention)
// around the tools and calendar of the root package's Catalog. It loads the
// file and validates it, reporting each problem with its place in the file
// (file:line:col) so that `airlock tools check` reads like a compiler.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/policy"
)

// MaxSize bounds a manifest file; a bigger one is surely a mistake.
const MaxSize = 4 << 20

// Load reads, decodes, prepares and validates the manifest at path.
func Load(path string) (*Manifest, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	return LoadFS(os.DirFS(dir), base, path)
}

// LoadFS reads the manifest called name in fsys. display is the name used
// in error places (the path the user gave); files the manifest refers to
// (rule tests) are read from fsys relative to name's directory.
func LoadFS(fsys fs.FS, name, display string) (*Manifest, error) {
	f, err := fsys.Open(name)
	if err != nil {
		// The path the user gave, not the name inside fsys (which has lost
		// its directory).
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			pe.Path = display
		}
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("manifest: reading %s: %w", display, err)
	}
	if len(data) > MaxSize {
		return nil, airlock.Errorf(airlock.CodeInvalidManifest, "%s: larger than %d bytes", display, MaxSize)
	}
	m, err := Parse(data, display)
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(fsys, dirOf(name))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	m.Files = sub
	m.Source = display
	return m, nil
}

func dirOf(name string) string {
	d := filepath.ToSlash(filepath.Dir(name))
	if d == "" {
		return "."
	}
	return d
}

// Parse decodes and validates a manifest. display names the file in error
// places. The error, when the manifest is wrong, is an
// *airlock.ValidationError listing every problem found.
func Parse(data []byte, display string) (*Manifest, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &airlock.ValidationError{Problems: []airlock.Problem{syntaxProblem(err, display)}}
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &airlock.ValidationError{Problems: []airlock.Problem{{Place: display, Message: "the file is empty: want a manifest with version: 1 and tools"}}}
	}
	var m Manifest
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&m); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			ps := make([]airlock.Problem, 0, len(te.Errors))
			for _, msg := range te.Errors {
				ps = append(ps, typeProblem(msg, display, &doc))
			}
			return nil, &airlock.ValidationError{Problems: ps}
		}
		return nil, &airlock.ValidationError{Problems: []airlock.Problem{syntaxProblem(err, display)}}
	}
	err := m.Prepare()
	if err == nil {
		// Approval rules are type-checked at load: a rule that does not
		// compile is a load error naming the rule.
		_, problems := policy.CompileAll(&m.Catalog)
		_, more := policy.CompileAllReconcile(&m.Catalog)
		if problems = append(problems, more...); len(problems) > 0 {
			err = &airlock.ValidationError{Problems: problems}
		}
	}
	if err != nil {
		var ve *airlock.ValidationError
		if errors.As(err, &ve) {
			for i := range ve.Problems {
				if n := Locate(&doc, ve.Problems[i].Path); n != nil {
					ve.Problems[i].Place = fmt.Sprintf("%s:%d:%d", display, n.Line, n.Column)
				} else {
					ve.Problems[i].Place = display
				}
			}
		}
		return nil, err
	}
	return &m, nil
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

func syntaxProblem(err error, display string) airlock.Problem {
	msg := err.Error()
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		return airlock.Problem{Place: display + ":" + m[1], Message: "YAML syntax: " + m[2]}
	}
	return airlock.Problem{Place: display, Message: "YAML: " + strings.TrimPrefix(msg, "yaml: ")}
}

var (
	unknownFieldRE = regexp.MustCompile(`^field (\S+) not found in type (\S+)$`)
	cannotRE       = regexp.MustCompile("^cannot unmarshal !!(\\w+) `(.*)` into (\\S+)$")
)

// typeNames says in words what each Go type is in the file.
var typeNames = map[string]string{
	"manifest.Manifest":    "the manifest's top level (version, calendar, auth, upstreams, tools, notify, retention, limits)",
	"manifest.Retention":   "retention (records, audit, figures)",
	"manifest.Limits":      "limits (request_bytes, run_id_bytes, cache_bytes, mcp_session_idle, mcp_sessions_per_token, connections, body_timeout, upstream_answer_bytes)",
	"manifest.Notify":      "notify (webhook, secret_env)",
	"airlock.Calendar":     "calendar (timezone, cutoff, holidays)",
	"manifest.Auth":        "auth (tokens, trusted_proxies, oidc, resource, issuers)",
	"manifest.OIDCSpec":    "auth.oidc (issuer, client_id, client_secret_env, redirect_url, scopes, name_claim, roles_claim, roles, label, recheck)",
	"manifest.IssuerSpec":  "an issuer (issuer, jwks_url, audience, name_claim, roles_claim, roles, role, clock_skew)",
	"manifest.TokenSpec":   "a token (name, role, sha256, env)",
	"manifest.Upstream":    "an upstream (http, mcp, honors_idempotency_key)",
	"manifest.MCPUpstream": "mcp (command, url, resources, prompts, prefix, sessions)",
	"airlock.Tool": "a tool (name, kind, description, input_schema, natural_key, window, grace, timeout, " +
		"respond_within, repeat_wait, on_mismatch, max_calls_per_run, reconcile_with, reconcile, upstream, answers, approval, display)",
	"airlock.Reconcile":    "reconcile (happened_when, not_happened_when)",
	"airlock.KeyField":     "a natural-key entry (field, normalize)",
	"airlock.ToolUpstream": "a tool's upstream (name, path, tool, caller, honors_idempotency_key, workers)",
	"airlock.Answers":      "answers (undo, approver, on_repeat)",
	"airlock.Approval":     "approval (lookup, rules, approvers, allow_self_approval, expires_after, wait_for_commit, tests)",
	"airlock.Lookup":       "lookup (tool, args)",
	"airlock.Rule":         "a rule (name, when, decide, approvals)",
	"airlock.Display":      "display (money, note)",
	"airlock.MoneyField":   "a money field (amount, currency)",
}

var yamlKinds = map[string]string{"str": "text", "int": "a number", "float": "a number", "bool": "true/false", "map": "a mapping", "seq": "a list", "null": "nothing"}

func typeProblem(msg, display string, doc *yaml.Node) airlock.Problem {
	p := airlock.Problem{Place: display, Message: msg}
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return p
	}
	line, _ := strconv.Atoi(m[1])
	p.Place = fmt.Sprintf("%s:%d", display, line)
	rest := m[2]
	if u := unknownFieldRE.FindStringSubmatch(rest); u != nil {
		where := typeNames[u[2]]
		if where == "" {
			where = u[2]
		}
		p.Message = fmt.Sprintf("unknown field %q in %s", u[1], where)
		if n := findKey(doc, line, u[1]); n != nil {
			p.Place = fmt.Sprintf("%s:%d:%d", display, n.Line, n.Column)
		}
		return p
	}
	if c := cannotRE.FindStringSubmatch(rest); c != nil {
		got := yamlKinds[c[1]]
		if got == "" {
			got = c[1]
		}
		p.Message = fmt.Sprintf("wrong type: got %s %q, want %s", got, c[2], goTypeWords(c[3]))
		return p
	}
	p.Message = rest
	return p
}

func goTypeWords(t string) string {
	switch {
	case t == "int" || strings.HasPrefix(t, "int") || strings.HasPrefix(t, "uint"):
		return "a whole number"
	case t == "string":
		return "text"
	case t == "bool":
		return "true or false"
	case strings.HasPrefix(t, "[]"):
		return "a list"
	case strings.HasPrefix(t, "map["):
		return "a mapping"
	}
	if w, ok := typeNames[strings.TrimPrefix(t, "*")]; ok {
		return w
	}
	return t
}

// findKey finds the mapping key named name on line.
func findKey(n *yaml.Node, line int, name string) *yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Line == line && k.Value == name {
				return k
			}
		}
	}
	for _, c := range n.Content {
		if f := findKey(c, line, name); f != nil {
			return f
		}
	}
	return nil
}

// Locate finds the node at a problem path such as
// "tools[2].natural_key[0].normalize[1]" in a decoded document, or the
// nearest ancestor present in the file when the path names something
// missing. It returns nil only for an empty document.
func Locate(doc *yaml.Node, path string) *yaml.Node {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if path == "" {
		return n
	}
	for _, seg := range splitPath(path) {
		next := step(n, seg)
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

func step(n *yaml.Node, seg string) *yaml.Node {
	if idx, err := strconv.Atoi(seg); err == nil && n.Kind == yaml.SequenceNode {
		if idx >= 0 && idx < len(n.Content) {
			return n.Content[idx]
		}
		return nil
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				v := n.Content[i+1]
				// A scalar value is a better place than its key; a block
				// (mapping or list) is best pointed at by its key.
				if v.Kind == yaml.ScalarNode {
					return v
				}
				return v
			}
		}
	}
	return nil
}

// splitPath turns "tools[2].answers.undo" into ["tools","2","answers","undo"].
func splitPath(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				out = append(out, part)
				break
			}
			if i > 0 {
				out = append(out, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				out = append(out, part[i+1:])
				break
			}
			out = append(out, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return out
}
