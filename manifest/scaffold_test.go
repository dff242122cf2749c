package manifest_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
)

var serverTools = []manifest.ServerTool{
	{Name: "get_item", Description: "Read an item.", ReadOnly: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}},"required":["id"]}`)},
	{Name: "add_tag", Description: "Tag an item.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"tag":{"type":"string","description":"two\nlines"}}}`)},
	{Name: "delete_item", Description: "Delete an item.", Destructive: true,
		InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)},
	{Name: "ping"}, // no schema, no hints
}

var stdioServer = manifest.MCPUpstream{Command: []string{"items-server", "--root", "/srv/with space"}}

func problemsOf(t *testing.T, data []byte) []string {
	t.Helper()
	_, err := manifest.Parse(data, "airlock.yaml")
	if err == nil {
		return nil
	}
	var ve *airlock.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("not a validation error: %v\n%s", err, data)
	}
	var out []string
	for _, p := range ve.Problems {
		out = append(out, p.Path)
	}
	slices.Sort(out)
	return out
}

// answer fills the places airlock init leaves, as a person would.
func answer(s string) string {
	s = strings.ReplaceAll(s, `natural_key: []`, `natural_key: [{field: id}]`)
	s = strings.ReplaceAll(s, "window: #", "window: 24h #")
	s = strings.ReplaceAll(s, `undo: ""`, `undo: "Yes, by hand."`)
	s = strings.ReplaceAll(s, `approver: ""`, `approver: "No one."`)
	s = strings.ReplaceAll(s, `on_repeat: ""`, `on_repeat: "Done once per id a day."`)
	return s
}

func TestScaffold(t *testing.T) {
	t.Parallel()

	t.Run("a new manifest is refused until a person answers", func(t *testing.T) {
		t.Parallel()
		data, rep, err := manifest.Scaffold(nil, "items", stdioServer, serverTools)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"get_item", "add_tag", "delete_item", "ping"}; !slices.Equal(rep.Added, want) {
			t.Fatalf("added %v, want %v", rep.Added, want)
		}
		want := []string{}
		for _, i := range []string{"1", "2", "3"} {
			for _, f := range []string{"answers.approver", "answers.on_repeat", "answers.undo", "natural_key", "window"} {
				want = append(want, "tools["+i+"]."+f)
			}
		}
		slices.Sort(want)
		if got := problemsOf(t, data); !slices.Equal(got, want) {
			t.Fatalf("problems %v\nwant %v\n%s", got, want, data)
		}
		if !strings.Contains(string(data), manifest.UnansweredNote) {
			t.Fatalf("the places to answer are not marked:\n%s", data)
		}
		// ping has no id: its key must name one of its own fields.
		if got := problemsOf(t, []byte(answer(string(data)))); len(got) != 1 || got[0] != "tools[3].natural_key[0].field" {
			t.Fatalf("after answering: %v", got)
		}
	})

	t.Run("kinds, schema and upstream come from the server", func(t *testing.T) {
		t.Parallel()
		data, _, err := manifest.Scaffold(nil, "items", stdioServer, serverTools[:3])
		if err != nil {
			t.Fatal(err)
		}
		m, err := manifest.Parse([]byte(answer(string(data))), "airlock.yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		kinds := map[string]airlock.ToolKind{}
		for _, tool := range m.Tools {
			kinds[tool.Name] = tool.Kind
			if tool.Upstream == nil || tool.Upstream.Name != "items" || tool.Upstream.Tool != tool.Name {
				t.Errorf("%s: upstream %+v", tool.Name, tool.Upstream)
			}
		}
		if kinds["get_item"] != airlock.KindRead || kinds["add_tag"] != airlock.KindWrite || kinds["delete_item"] != airlock.KindIrreversible {
			t.Fatalf("kinds %v", kinds)
		}
		if got := m.Upstreams["items"].MCP.Command; !slices.Equal(got, stdioServer.Command) {
			t.Fatalf("command %q", got)
		}
		tag := m.Tool("add_tag").InputSchema["properties"].(map[string]any)["tag"].(map[string]any)["description"]
		if tag != "two\nlines" {
			t.Fatalf("schema not copied: %q", tag)
		}
		// Irreversible tools start with every plan going to a person.
		if a := m.Tool("delete_item").Approval; a == nil || len(a.Rules) != 1 || a.Rules[0].Decide != "human" {
			t.Fatalf("approval %+v", a)
		}
	})

	t.Run("a second run changes nothing a person wrote", func(t *testing.T) {
		t.Parallel()
		first, _, err := manifest.Scaffold(nil, "items", stdioServer, serverTools[:3])
		if err != nil {
			t.Fatal(err)
		}
		mine := answer(string(first))
		mine = strings.Replace(mine, "description: Tag an item.", "description: Tag an item (my words).", 1)
		again, rep, err := manifest.Scaffold([]byte(mine), "items", stdioServer, serverTools[:3])
		if err != nil {
			t.Fatal(err)
		}
		if rep.String() != "no change (3 tools)" || string(again) != mine {
			t.Fatalf("report %q; file changed:\n%s\nwas\n%s", rep, again, mine)
		}

		// The server changes: add_tag's schema, delete_item gone, rename_item new.
		changed := []manifest.ServerTool{serverTools[0],
			{Name: "add_tag", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"},"tags":{"type":"array"}}}`)},
			{Name: "rename_item", InputSchema: json.RawMessage(`{"type":"object","properties":{"id":{"type":"string"}}}`)},
		}
		updated, rep, err := manifest.Scaffold([]byte(mine), "items", stdioServer, changed)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Added, []string{"rename_item"}) || !slices.Equal(rep.Removed, []string{"delete_item"}) ||
			!slices.Equal(rep.SchemaChanged, []string{"add_tag"}) || rep.Unchanged != 1 {
			t.Fatalf("report %+v", rep)
		}
		if want := "added: rename_item; schema changed: add_tag; no longer offered: delete_item"; rep.String() != want {
			t.Fatalf("report %q, want %q", rep, want)
		}
		for _, kept := range []string{"Tag an item (my words).", "Yes, by hand.", "Done once per id a day.", "window: 24h", "airlock init: the server no longer offers this tool"} {
			if !strings.Contains(string(updated), kept) {
				t.Errorf("%q is gone:\n%s", kept, updated)
			}
		}
		m, err := manifest.Parse([]byte(answer(string(updated))), "airlock.yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, updated)
		}
		if _, ok := m.Tool("add_tag").InputSchema["properties"].(map[string]any)["tags"]; !ok {
			t.Fatalf("add_tag's schema was not replaced:\n%s", updated)
		}
		if m.Tool("delete_item") == nil {
			t.Fatal("a tool the server dropped was deleted; it must stay for a person to remove")
		}
	})

	t.Run("names the manifest cannot hold are mapped", func(t *testing.T) {
		t.Parallel()
		existing := "version: 1\nupstreams:\n  other: {http: \"http://127.0.0.1:1\"}\ntools:\n  - {name: get_item, kind: read, upstream: {name: other, path: /x}}\n"
		data, rep, err := manifest.Scaffold([]byte(existing), "items", manifest.MCPUpstream{URL: "http://127.0.0.1:9/mcp"}, []manifest.ServerTool{
			{Name: "get_item", ReadOnly: true}, {Name: "files/list", ReadOnly: true}, {Name: "9lives", ReadOnly: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"get_item_2", "files_list", "t_9lives"}; !slices.Equal(rep.Added, want) {
			t.Fatalf("added %v, want %v", rep.Added, want)
		}
		m, err := manifest.Parse(data, "airlock.yaml")
		if err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		if u := m.Tool("files_list").Upstream; u.Tool != "files/list" || u.Name != "items" {
			t.Fatalf("files_list maps to %+v", u)
		}
		if m.Upstreams["items"].MCP.URL != "http://127.0.0.1:9/mcp" || m.Upstreams["other"].HTTP == "" {
			t.Fatalf("upstreams %+v", m.Upstreams)
		}
	})

	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			name, existing, upstream string
			tools                    []manifest.ServerTool
			want                     string
		}{
			{"upstream name", "", "my server", serverTools, `upstream name "my server"`},
			{"not YAML", "tools: [", "items", serverTools, "reading the manifest"},
			{"not a mapping", "- a\n- b\n", "items", serverTools, "top level is not a mapping"},
			{"tools not a list", "version: 1\ntools: {a: 1}\n", "items", serverTools, "tools is not a list"},
			{"schema not an object", "", "items", []manifest.ServerTool{{Name: "x", InputSchema: json.RawMessage(`[1]`)}}, "tool x: the input schema is not a JSON object"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				_, _, err := manifest.Scaffold([]byte(tc.existing), tc.upstream, stdioServer, tc.tools)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want %q", err, tc.want)
				}
			})
		}
	})
}
