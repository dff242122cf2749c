package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockhq/airlock"
)

// ServerTool is one tool an MCP server lists (tools/list), as airlock init
// --from-mcp reads it.
type ServerTool struct {
	Name        string
	Description string
	// InputSchema is the tool's input schema as the server sent it (JSON).
	InputSchema json.RawMessage
	// ReadOnly and Destructive are the annotations readOnlyHint and
	// destructiveHint, true only when the server says so.
	ReadOnly, Destructive bool
}

// Kind is the kind airlock init gives the tool: read when the server says
// it is read-only, irreversible when it says it is destructive, otherwise
// write. The annotations are hints; the person who answers the three
// questions decides.
func (t ServerTool) Kind() airlock.ToolKind {
	switch {
	case t.ReadOnly:
		return airlock.KindRead
	case t.Destructive:
		return airlock.KindIrreversible
	default:
		return airlock.KindWrite
	}
}

// ScaffoldReport says what Scaffold changed in a manifest.
type ScaffoldReport struct {
	Added         []string // tools the server offers that the manifest lacked
	Removed       []string // tools of the upstream the server no longer offers (left in the file, marked)
	SchemaChanged []string // tools whose input schema the server changed (the schema is replaced)
	Unchanged     int
}

// UnansweredNote heads the places a person must fill in. airlock tools
// check refuses the tool until they are: empty answers, an empty natural
// key and no window are errors of the manifest.
const UnansweredNote = "airlock init: answer these before `airlock tools check` accepts this tool"

// Scaffold writes a manifest for the tools of one MCP upstream, or brings
// an existing one (existing, the file's bytes; nil for a new file) up to
// date with what the server offers now: new tools are appended with places
// for their natural key, window and three answers; tools whose schema
// changed get the server's schema, and nothing a person wrote (answers,
// keys, windows, descriptions, rules) is touched; tools the server no
// longer offers are reported and marked, not deleted.
func Scaffold(existing []byte, upstream string, up MCPUpstream, tools []ServerTool) ([]byte, *ScaffoldReport, error) {
	if !upstreamNameRE.MatchString(upstream) {
		return nil, nil, fmt.Errorf("upstream name %q: want a letter, then letters, digits, _ or -", upstream)
	}
	doc := &yaml.Node{Kind: yaml.DocumentNode}
	if len(bytes.TrimSpace(existing)) > 0 {
		if err := yaml.Unmarshal(existing, doc); err != nil {
			return nil, nil, fmt.Errorf("reading the manifest: %w", err)
		}
	}
	if len(doc.Content) == 0 {
		root := &yaml.Node{Kind: yaml.MappingNode}
		root.HeadComment = "Written by airlock init --from-mcp. Every write and irreversible tool needs\n" +
			"its natural key, window and three answers before airlock tools check accepts it."
		setKey(root, "version", scalar("1", "!!int"))
		doc.Content = []*yaml.Node{root}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, nil, fmt.Errorf("reading the manifest: the top level is not a mapping")
	}
	ups := getKey(root, "upstreams")
	if ups == nil {
		ups = &yaml.Node{Kind: yaml.MappingNode}
		setKey(root, "upstreams", ups)
	}
	if getKey(ups, upstream) == nil {
		u := &yaml.Node{Kind: yaml.MappingNode}
		mcp := &yaml.Node{Kind: yaml.MappingNode}
		if len(up.Command) > 0 {
			cmd := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
			for _, a := range up.Command {
				cmd.Content = append(cmd.Content, scalar(a, "!!str"))
			}
			setKey(mcp, "command", cmd)
		} else {
			setKey(mcp, "url", scalar(up.URL, "!!str"))
		}
		setKey(u, "mcp", mcp)
		setKey(ups, upstream, u)
	}
	list := getKey(root, "tools")
	if list == nil {
		list = &yaml.Node{Kind: yaml.SequenceNode}
		setKey(root, "tools", list)
	}
	if list.Kind != yaml.SequenceNode {
		return nil, nil, fmt.Errorf("reading the manifest: tools is not a list")
	}

	offered := map[string]ServerTool{}
	for _, t := range tools {
		offered[t.Name] = t
	}
	rep := &ScaffoldReport{}
	known := map[string]bool{} // server tool names the manifest has
	names := map[string]bool{} // manifest tool names in use
	for _, item := range list.Content {
		name := scalarOf(getKey(item, "name"))
		names[name] = true
		serverName, ofUpstream := upstreamToolOf(item, name, upstream)
		if !ofUpstream {
			continue
		}
		known[serverName] = true
		st, ok := offered[serverName]
		if !ok {
			rep.Removed = append(rep.Removed, name)
			if n := getKey(item, "name"); n != nil {
				n.LineComment = "airlock init: the server no longer offers this tool"
			}
			continue
		}
		schema, err := schemaNode(st.InputSchema)
		if err != nil {
			return nil, nil, fmt.Errorf("tool %s: %w", st.Name, err)
		}
		if cur := getKey(item, "input_schema"); cur == nil || !sameJSON(cur, schema) {
			setKey(item, "input_schema", schema)
			rep.SchemaChanged = append(rep.SchemaChanged, name)
			continue
		}
		rep.Unchanged++
	}
	for _, st := range tools {
		if known[st.Name] {
			continue
		}
		item, err := scaffoldTool(st, upstream, names)
		if err != nil {
			return nil, nil, err
		}
		list.Content = append(list.Content, item)
		rep.Added = append(rep.Added, scalarOf(getKey(item, "name")))
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	return out.Bytes(), rep, nil
}

var upstreamNameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,63}$`)

// scaffoldTool is a new tool's entry, with the places a person must fill
// in for write and irreversible tools.
func scaffoldTool(st ServerTool, upstream string, names map[string]bool) (*yaml.Node, error) {
	name := toolNameFor(st.Name, names)
	names[name] = true
	kind := st.Kind()
	item := &yaml.Node{Kind: yaml.MappingNode}
	setKey(item, "name", scalar(name, "!!str"))
	k := scalar(string(kind), "!!str")
	switch {
	case st.ReadOnly:
		k.LineComment = "the server says readOnlyHint"
	case st.Destructive:
		k.LineComment = "the server says destructiveHint"
	default:
		k.LineComment = "the server gives no hint; irreversible if it cannot be undone"
	}
	setKey(item, "kind", k)
	if d := strings.TrimSpace(st.Description); d != "" {
		setKey(item, "description", scalar(d, "!!str"))
	}
	schema, err := schemaNode(st.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: %w", st.Name, err)
	}
	setKey(item, "input_schema", schema)
	ref := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	setKey(ref, "name", scalar(upstream, "!!str"))
	setKey(ref, "tool", scalar(st.Name, "!!str"))
	setKey(item, "upstream", ref)
	if kind == airlock.KindRead {
		return item, nil
	}
	nk := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	nk.LineComment = "the argument fields that make one piece of work unique, e.g. [{field: id}]"
	setKey(item, "natural_key", nk)
	item.Content[len(item.Content)-2].HeadComment = UnansweredNote
	w := scalar("", "!!null")
	w.LineComment = "business_day, run, forever, or a duration such as 24h"
	setKey(item, "window", w)
	answers := &yaml.Node{Kind: yaml.MappingNode}
	for _, q := range [][2]string{{"undo", "can it be undone?"}, {"approver", "who approves it?"}, {"on_repeat", "what happens if it repeats?"}} {
		v := scalar("", "!!str")
		v.Style = yaml.DoubleQuotedStyle
		v.LineComment = q[1]
		setKey(answers, q[0], v)
	}
	setKey(item, "answers", answers)
	if kind == airlock.KindIrreversible {
		// A safe start: every plan waits for a person until rules say
		// otherwise (docs/plans.md).
		approval := &yaml.Node{Kind: yaml.MappingNode}
		rules := &yaml.Node{Kind: yaml.SequenceNode}
		rule := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		setKey(rule, "name", scalar("a_person_decides", "!!str"))
		when := scalar("true", "!!str")
		when.Style = yaml.DoubleQuotedStyle
		setKey(rule, "when", when)
		setKey(rule, "decide", scalar("human", "!!str"))
		rules.Content = append(rules.Content, rule)
		setKey(approval, "rules", rules)
		setKey(item, "approval", approval)
		item.Content[len(item.Content)-2].HeadComment = "every plan waits for a person until rules in code say otherwise"
	}
	return item, nil
}

// toolNameFor is a manifest name for a server's tool: the same name when
// it is a valid one not yet used, else a cleaned one (the entry then maps
// it with upstream.tool).
func toolNameFor(server string, used map[string]bool) string {
	if airlock.ValidToolName(server) && !used[server] {
		return server
	}
	var b strings.Builder
	for _, r := range server {
		switch {
		case r < 128 && (r == '_' || r == '.' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'):
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if name == "" || (name[0] < 'a' || name[0] > 'z') && (name[0] < 'A' || name[0] > 'Z') {
		name = "t_" + name
	}
	if len(name) > 60 {
		name = name[:60]
	}
	base := name
	for i := 2; used[name]; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	return name
}

// upstreamToolOf is the server's name of a manifest tool and whether the
// tool is one of upstream's.
func upstreamToolOf(item *yaml.Node, name, upstream string) (string, bool) {
	ref := getKey(item, "upstream")
	if ref == nil || scalarOf(getKey(ref, "name")) != upstream {
		return "", false
	}
	if t := scalarOf(getKey(ref, "tool")); t != "" {
		return t, true
	}
	return name, true
}

// schemaNode is the server's schema as YAML in block style, keys in the
// server's order. A tool without one gets {type: object}.
func schemaNode(raw json.RawMessage) (*yaml.Node, error) {
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil || len(doc.Content) == 0 {
		return nil, fmt.Errorf("the input schema is not JSON: %w", err)
	}
	n := doc.Content[0]
	if n.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the input schema is not a JSON object")
	}
	var plain func(*yaml.Node)
	plain = func(n *yaml.Node) {
		n.Style = 0
		if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && strings.ContainsAny(n.Value, "\n") {
			n.Style = yaml.LiteralStyle
		}
		for _, c := range n.Content {
			plain(c)
		}
	}
	plain(n)
	return n, nil
}

// sameJSON reports whether two YAML nodes hold the same JSON value.
func sameJSON(a, b *yaml.Node) bool {
	var va, vb any
	if a.Decode(&va) != nil || b.Decode(&vb) != nil {
		return false
	}
	ja, err1 := json.Marshal(va)
	jb, err2 := json.Marshal(vb)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func scalar(v, tag string) *yaml.Node {
	if tag == "!!null" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: ""}
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
}

func scalarOf(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

func getKey(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// setKey sets key in mapping m, replacing its value (and keeping the
// key's comments) or appending it.
func setKey(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			old := m.Content[i+1]
			if v.LineComment == "" {
				v.LineComment = old.LineComment
			}
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, scalar(key, "!!str"), v)
}

// Names of the tools in a report, for messages.
func (r *ScaffoldReport) String() string {
	var parts []string
	add := func(what string, names []string) {
		if len(names) > 0 {
			s := slices.Clone(names)
			slices.Sort(s)
			parts = append(parts, fmt.Sprintf("%s: %s", what, strings.Join(s, ", ")))
		}
	}
	add("added", r.Added)
	add("schema changed", r.SchemaChanged)
	add("no longer offered", r.Removed)
	if len(parts) == 0 {
		return fmt.Sprintf("no change (%d tools)", r.Unchanged)
	}
	return strings.Join(parts, "; ")
}
