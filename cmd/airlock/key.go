package main

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockhq/airlock"
)

func cmdKey(e *env, args []string) int {
	fs := newFlags(e, "key")
	config := configFlag(fs)
	tool := fs.String("tool", "", "the tool's name (required)")
	argsJSON := fs.String("args", "", `the call's arguments as a JSON object, such as '{"record_id":"WD-24817"}' (required)`)
	at := fs.String("at", "", "the time of the call, RFC 3339 (default: now)")
	runID := fs.String("run", "", "the run id (for run windows and boundary grace)")
	format := fs.String("format", "json", "json or text")
	if code, ok := parse(fs, args); !ok {
		return code
	}
	if *format != "json" && *format != "text" {
		return usageError(e, "key", "--format %q: want json or text", *format)
	}
	if *tool == "" {
		return usageError(e, "key", "--tool is required: the tool's name")
	}
	if *argsJSON == "" {
		return usageError(e, "key", "--args is required: the call's arguments as a JSON object")
	}
	m, err := loadManifest(*config)
	if err != nil {
		return failCode(e, err)
	}
	t := m.Tool(*tool)
	if t == nil {
		return usageError(e, "key", "--tool: no tool named %q (have: %v)", *tool, m.ToolNames())
	}
	if !t.Kind.SideEffecting() {
		return usageError(e, "key", "--tool: %s is a read tool; read tools have no key", *tool)
	}
	when := time.Now()
	if *at != "" {
		when, err = time.Parse(time.RFC3339, *at)
		if err != nil {
			return usageError(e, "key", "--at %q: want an RFC 3339 time such as 2026-09-18T16:30:00-04:00", *at)
		}
	}
	parsed, err := airlock.ParseArgs([]byte(*argsJSON))
	if err != nil {
		return usageError(e, "key", "--args: %v", err)
	}
	d, err := airlock.DeriveKey(airlock.KeyInput{Tool: t, Calendar: &m.Calendar, Args: parsed, At: when, RunID: *runID})
	if err != nil {
		return fail(e, "%v", err)
	}
	if *format == "text" {
		fmt.Fprintf(e.stdout, "key:       %s\n", d.Key)
		fmt.Fprintf(e.stdout, "tool:      %s\n", d.Parts.Tool)
		for _, f := range d.Parts.Fields {
			fmt.Fprintf(e.stdout, "field:     %s = %q (sent %q)\n", f.Field, f.Value, f.Input)
		}
		fmt.Fprintf(e.stdout, "window:    %s (%s)\n", d.Parts.WindowID, d.Parts.Window)
		if !d.Parts.WindowStart.IsZero() {
			fmt.Fprintf(e.stdout, "from:      %s\nuntil:     %s\n", d.Parts.WindowStart.Format(time.RFC3339), d.Parts.WindowEnd.Format(time.RFC3339))
		}
		if d.Previous != "" {
			fmt.Fprintf(e.stdout, "previous:  %s (within grace; a repeat from the same run matches it)\n", d.Previous)
		}
		fmt.Fprintf(e.stdout, "canonical: %s\n", airlock.RevealInvisible(d.Parts.Canonical))
		return 0
	}
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return fail(e, "%v", err)
	}
	return 0
}
