package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/manifest"
	upmcp "github.com/airlockhq/airlock/upstream/mcp"
)

// cmdInit writes (or brings up to date) a manifest from an MCP server's
// tools: airlock init --from-mcp --command "…" | --url URL.
func cmdInit(e *env, args []string) int {
	fl := newFlags(e, "init")
	fromMCP := fl.Bool("from-mcp", false, "read the tools of an MCP server (required; the only source today)")
	command := fl.String("command", "", `the MCP server to start over stdio, as one string ("npx -y @modelcontextprotocol/server-filesystem /srv"); quotes group words`)
	url := fl.String("url", "", "the MCP server's streamable HTTP endpoint (https://…/mcp)")
	name := fl.String("upstream", "", "the upstream's name in the manifest (default: the server's own name, cleaned)")
	out := fl.String("out", "airlock.yaml", "the manifest to write; when it exists, it is brought up to date and nothing a person wrote is changed")
	timeout := fl.Duration("timeout", 30*time.Second, "how long to wait for the server to list its tools")
	if code, ok := parse(fl, args); !ok {
		return code
	}
	if !*fromMCP {
		return usageError(e, "init", "--from-mcp is required: airlock init reads the tools of an MCP server (--command or --url)")
	}
	var up manifest.MCPUpstream
	switch {
	case *command != "" && *url != "":
		return usageError(e, "init", "give --command or --url, not both")
	case *command != "":
		argv, err := splitCommand(*command)
		if err != nil {
			return usageError(e, "init", "--command: %v", err)
		}
		up.Command = argv
	case *url != "":
		up.URL = *url
	default:
		return usageError(e, "init", "--command (an MCP server over stdio) or --url (streamable HTTP) is required")
	}
	existing, err := os.ReadFile(*out)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fail(e, "%v", err)
	}

	var c *upmcp.Client
	if up.URL != "" {
		c = upmcp.NewHTTP(up.URL, nil)
	} else {
		c = upmcp.NewCommand(up.Command, nil)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, *timeout)
	defer cancel()
	srv, err := c.Describe(ctx)
	if err != nil {
		return fail(e, "%v", err)
	}
	upstream := *name
	if upstream == "" {
		upstream = upstreamNameFor(srv.Name)
	}
	tools := make([]manifest.ServerTool, 0, len(srv.Tools))
	for _, t := range srv.Tools {
		st := manifest.ServerTool{Name: t.Name, Description: t.Description}
		if t.InputSchema != nil {
			if st.InputSchema, err = json.Marshal(t.InputSchema); err != nil {
				return fail(e, "tool %s: the input schema: %v", t.Name, err)
			}
		}
		if a := t.Annotations; a != nil {
			st.ReadOnly = a.ReadOnlyHint
			st.Destructive = a.DestructiveHint != nil && *a.DestructiveHint
		}
		tools = append(tools, st)
	}
	data, rep, err := manifest.Scaffold(existing, upstream, up, tools)
	if err != nil {
		return fail(e, "%s: %v", *out, err)
	}
	if err := os.WriteFile(*out, data, 0o644); err != nil {
		return fail(e, "%v", err)
	}
	verb := "wrote"
	if len(existing) > 0 {
		verb = "updated"
	}
	fmt.Fprintf(e.stdout, "%s %s: %d tools from %s (upstream %q): %s\n", verb, *out, len(tools), serverLabel(up), upstream, rep)
	// What is left for a person: the manifest's own problems.
	if _, err := manifest.Parse(data, *out); err != nil {
		var ve *airlock.ValidationError
		if errors.As(err, &ve) {
			fmt.Fprintf(e.stdout, "%d place(s) to answer before the tools can be served; `airlock tools check --config %s` lists them\n", len(ve.Problems), *out)
			return 0
		}
		return fail(e, "%v", err)
	}
	fmt.Fprintf(e.stdout, "ok: `airlock serve --config %s` serves them\n", *out)
	return 0
}

func serverLabel(up manifest.MCPUpstream) string {
	if up.URL != "" {
		return up.URL
	}
	return strings.Join(up.Command, " ")
}

// upstreamNameFor makes a manifest upstream name of a server's name.
func upstreamNameFor(server string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(server) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9' && b.Len() > 0:
			b.WriteRune(r)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "_"):
			b.WriteByte('_')
		}
	}
	name := strings.Trim(b.String(), "_")
	if name == "" {
		return "mcp"
	}
	return name[:min(len(name), 40)]
}

// splitCommand splits a command line into words: spaces separate, single
// or double quotes group, a backslash escapes the next character.
func splitCommand(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(r)
		case r == '"' || r == '\'':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	switch {
	case quote != 0:
		return nil, fmt.Errorf("an unclosed %c quote", quote)
	case escaped:
		return nil, fmt.Errorf("a trailing backslash")
	}
	if inWord {
		words = append(words, cur.String())
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("empty: want the server's command and its arguments")
	}
	return words, nil
}
