package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/internal/app"
)

// planClient reaches plans and records either through a running server
// (--url, --token) or the database directly (--db): then through the same
// services a server runs (the plan service decides, the guard settles), so
// a decision made here is checked and audited exactly as one in the page.
type planClient struct {
	url, token string
	app        *app.App
	by         string
}

// planFlags are the flags that reach plans and records; acts: the
// subcommand decides or settles, and --as names who does.
func planFlags(fs *flag.FlagSet, acts bool) (db, url, token, by, config *string) {
	db = fs.String("db", os.Getenv("AIRLOCK_DB"), "the database (sqlite:PATH or postgres://…), instead of --url")
	url = fs.String("url", os.Getenv("AIRLOCK_URL"), "a running airlock server, such as http://127.0.0.1:8420; env AIRLOCK_URL")
	token = fs.String("token", os.Getenv("AIRLOCK_TOKEN"), "an approver or admin token for --url; env AIRLOCK_TOKEN")
	by = new(string)
	if acts {
		by = fs.String("as", os.Getenv("USER"), "with --db: the name recorded on the decision or settlement (with database access you act as an admin)")
	}
	config = fs.String("config", os.Getenv("AIRLOCK_CONFIG"), "the manifest (airlock.yaml); env AIRLOCK_CONFIG; with --db the one the database is served with (default: the bundled withdrawals example); with --url only plans show reads it, for the tool's money and note (none without it)")
	return
}

func openPlanClient(ctx context.Context, db, url, token, by, config string, readOnly bool) (*planClient, error) {
	switch {
	case url != "":
		if token == "" {
			return nil, &usageErr{"--url needs --token (an approver or admin token)"}
		}
		return &planClient{url: strings.TrimSuffix(url, "/"), token: token}, nil
	case db != "":
		// The name goes into the audit log and onto the page, as a person's.
		if airlock.HasInvisible(by) || len(by) > 200 {
			return nil, &usageErr{fmt.Sprintf("--as %s: a name of at most 200 bytes with no control or invisible characters", airlock.RevealShortened(by, 200))}
		}
		m, err := loadManifest(config)
		if err != nil {
			return nil, err // a missing file is a usageErr
		}
		if err := existingDatabase(ctx, db); err != nil {
			return nil, err // opening it would create it
		}
		// No migrations and no background loops: a running server owns them.
		// A command that only reads opens the file read-only.
		a, err := app.New(ctx, &app.Config{Manifest: m, ManifestDir: manifestDir(config), DSN: db, ReadOnly: readOnly, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, err
		}
		if err := a.Store.Ping(ctx); err != nil {
			_ = a.Close(context.Background())
			return nil, &usageErr{fmt.Sprintf("--db %s is not an airlock database at this version: %v (airlock migrate --db migrates it)", redactDSN(db), err)}
		}
		if strings.TrimSpace(by) == "" {
			by = "cli" // no --as and no $USER
		}
		return &planClient{app: a, by: by}, nil
	}
	return nil, &usageErr{"give --url and --token (a running server) or --db (the database)"}
}

// flagError names the flag that carries a field the services refused
// (--note, --reason, --result), so the operator knows what to fix.
func flagError(err error) error {
	var e *airlock.Error
	if errors.As(err, &e) {
		switch e.Field {
		case "note", "reason", "result":
			return fmt.Errorf("--%s: %s", e.Field, e.Message)
		}
	}
	return err
}

func (c *planClient) Close() {
	if c.app != nil {
		_ = c.app.Close(context.Background())
	}
}

func (c *planClient) do(ctx context.Context, method, path string, body any, out any) error {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *airlock.Error `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != nil {
			return e.Error
		}
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	return json.Unmarshal(raw, out)
}

func (c *planClient) list(ctx context.Context, f airlock.PlanFilter) ([]*airlock.Plan, error) {
	if c.app != nil {
		return c.app.Plans.List(ctx, f)
	}
	var out struct {
		Plans []*airlock.Plan `json:"plans"`
	}
	// Only the filters given, escaped: the server refuses an empty
	// parameter rather than read it as absent.
	q := url.Values{}
	for name, v := range map[string]string{"status": string(f.Status), "tool": f.Tool, "run": f.RunID} {
		if v != "" {
			q.Set(name, v)
		}
	}
	path := "/v1/plans"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return out.Plans, c.do(ctx, "GET", path, nil, &out)
}

func (c *planClient) get(ctx context.Context, id string) (*airlock.Plan, error) {
	if c.app != nil {
		return c.app.Plans.Get(ctx, id)
	}
	var p airlock.Plan
	return &p, c.do(ctx, "GET", "/v1/plans/"+id, nil, &p)
}

func (c *planClient) decide(ctx context.Context, id string, approve bool, reason string) (*airlock.Plan, error) {
	p, err := c.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if c.app != nil {
		// Directly on the database: the commit job goes into River's
		// table in the deciding transaction; a running server works it.
		return c.app.Plans.Decide(ctx, airlock.PlanDecision{
			ID: id, Approve: approve, By: c.by, Role: airlock.RoleAdmin, Reason: reason, DecisionHash: p.DecisionHash,
		})
	}
	verb := "reject"
	if approve {
		verb = "approve"
	}
	var out airlock.Plan
	return &out, c.do(ctx, "POST", "/v1/plans/"+id+"/"+verb, map[string]string{"reason": reason, "decision_hash": p.DecisionHash}, &out)
}

func cmdPlans(e *env, args []string) int {
	sub := args[0] // run (main.go) has checked it
	fs := newFlags(e, "plans "+sub)
	db, url, token, by, config := planFlags(fs, sub == "approve" || sub == "reject")
	// Each subcommand's own flags, so its help lists only what it takes.
	status, tool, run, reason, format := new(string), new(string), new(string), new(string), new(string)
	switch sub {
	case "list":
		status = fs.String("status", "", "only plans with this status (awaiting_approval, committed, …)")
		tool = fs.String("tool", "", "only this tool's plans")
		run = fs.String("run", "", "only this run's plans")
	case "approve", "reject":
		reason = fs.String("reason", "", "why (required)")
	}
	if sub == "list" || sub == "show" {
		format = fs.String("format", "text", "text or json")
	}
	var rest []string
	// Allow the plan id before or after the flags.
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		rest = append(rest, args[1])
		args = append(args[:1:1], args[2:]...)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return map[bool]int{true: 0, false: 2}[errors.Is(err, flag.ErrHelp)]
	}
	rest = append(rest, fs.Args()...)
	if *format != "" && *format != "text" && *format != "json" {
		return usageError(e, "plans "+sub, "--format %q: want text or json", *format)
	}
	if *status != "" && !slices.Contains(airlock.PlanStatuses, airlock.PlanStatus(*status)) {
		return usageError(e, "plans list", "--status %q: want one of %s", *status, joinStatuses())
	}
	if sub == "list" && len(rest) > 0 {
		return usageError(e, "plans list", "unexpected argument %q (filter with --status, --tool, --run)", rest[0])
	}
	if sub != "list" && len(rest) != 1 {
		return usageError(e, "plans "+sub, "want one plan id")
	}
	c, err := openPlanClient(e.ctx, *db, *url, *token, *by, *config, sub == "list" || sub == "show")
	if err != nil {
		return failCode(e, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	switch sub {
	case "list":
		plans, err := c.list(ctx, airlock.PlanFilter{Status: airlock.PlanStatus(*status), Tool: *tool, RunID: *run})
		if err != nil {
			return fail(e, "%v", err)
		}
		if *format == "json" {
			return printJSON(e, plans)
		}
		tw := tabwriter.NewWriter(e.stdout, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tRULE\tDECISION\tRUN\tCREATED\tARGS")
		for _, p := range plans {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Tool, p.Status, p.Rule, p.Decision, tableCell(p.RunID),
				p.CreatedAt.Format(time.RFC3339), tableCell(string(p.Args)))
		}
		tw.Flush()
		return 0
	case "show":
		p, err := c.get(ctx, rest[0])
		if err != nil {
			return fail(e, "%v", err)
		}
		if *format == "json" {
			return printJSON(e, p)
		}
		// The tool's display (money, the agent's note) from the manifest
		// the database is served with, or --config's against a server.
		var tool *airlock.Tool
		if c.app != nil {
			tool = c.app.Manifest.Tool(p.Tool)
		} else if *config != "" {
			if m, err := loadManifest(*config); err == nil {
				tool = m.Tool(p.Tool)
			}
		}
		printPlan(e.stdout, p, tool)
		return 0
	case "approve", "reject":
		p, err := c.decide(ctx, rest[0], sub == "approve", *reason)
		if err != nil {
			return fail(e, "%v", flagError(err))
		}
		fmt.Fprintf(e.stdout, "plan %s: %s by %s\n", p.ID, p.Status, p.DecidedBy)
		return 0
	}
	fmt.Fprintf(e.stderr, "airlock plans: unknown subcommand %q\n", sub)
	return 2
}

// printJSON writes v as indented JSON, its invisible characters as \u
// escapes: the same values, and nothing a terminal would act on or hide
// (docs/hardening.md, "text that cannot disguise itself").
func printJSON(e *env, v any) int {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // < stays <: a terminal is not a page
	if err := enc.Encode(v); err != nil {
		return fail(e, "%v", err)
	}
	_, _ = e.stdout.Write(airlock.EscapeInvisibleJSON(buf.Bytes()))
	return 0
}

// maxTableCell bounds a value in a CLI table: the whole is in `show`.
const maxTableCell = 200

// tableCell is agent-made text as a CLI table shows it: its invisible
// characters (an escape, a carriage return, a bidi override, a tab that
// would shift the columns) as [U+XXXX], cut at maxTableCell bytes with its
// length said.
func tableCell(s string) string { return airlock.RevealShortened(s, maxTableCell) }

func joinStatuses() string {
	names := make([]string, len(airlock.PlanStatuses))
	for i, st := range airlock.PlanStatuses {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}
