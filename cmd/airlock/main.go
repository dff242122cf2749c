// Command airlock stands between AI agents and their tools so that a
// repeated call never does the work twice. See README.md; `airlock help`
// lists the commands. This package only wires the library together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	_ "time/tzdata" // business_day windows need zone data on machines without it

	"github.com/airlockhq/airlock/examples/withdrawals"
	"github.com/airlockhq/airlock/internal/app"
	"github.com/airlockhq/airlock/manifest"
	"github.com/airlockhq/airlock/store"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// env is what a command sees of the world.
type env struct {
	ctx    context.Context
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) int
}

func commands() []command {
	return []command{
		{"serve", "serve MCP (/mcp) and the HTTP API; no flags: the bundled example on embedded SQLite", cmdServe},
		{"mcp", "serve the tools over stdio for desktop agents", cmdMCP},
		{"migrate", "apply the database migrations (--db DSN)", cmdMigrate},
		{"key", "print the key of a call and every part that went into it", cmdKey},
		{"init", "init --from-mcp --command … | --url …: write a manifest from an MCP server's tools", cmdInit},
		{"tools", "tools check (the CI lint) | tools list --format md|json", cmdTools},
		{"plans", "plans list|show|approve|reject, against --url (a server) or --db", cmdPlans},
		{"records", "records show KEY | records settle KEY --happened=true|false --note …", cmdRecords},
		{"audit", "audit verify|export|purge: check the hash chain (or an export), write the log as JSON lines, purge a prefix", cmdAudit},
		{"report", "the figures that show the protection works (--since 24h, --format text|json)", cmdReport},
		{"policy", "policy test: run the approval rules' test files", cmdPolicy},
		{"demo", "replay the overnight withdrawals incident, without and with airlock", cmdDemo},
		{"bench", "measure new calls, repeats and races against a plain baseline", cmdBench},
	}
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(e, args[1:])
		}
	}
	fmt.Fprintf(stderr, "airlock: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "airlock: exactly-once tool calls for AI agents.")
	fmt.Fprintln(w, "\nUsage: airlock COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun airlock COMMAND -h for a command's flags.")
}

// newFlags makes a flag set that reports errors to stderr and never exits.
func newFlags(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("airlock "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	return fs
}

// parse parses flags; ok false means exit with code.
func parse(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, false
		}
		return 2, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "%s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, false
	}
	return 0, true
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("AIRLOCK_CONFIG"), "the manifest (airlock.yaml); env AIRLOCK_CONFIG; default: the bundled withdrawals example")
}

func dbFlag(fs *flag.FlagSet) *string {
	return fs.String("db", envOr("AIRLOCK_DB", store.DefaultDSN), "the database: sqlite:PATH or postgres://…; env AIRLOCK_DB")
}

// loadManifest loads the manifest at path, or the bundled example when path is empty.
func loadManifest(path string) (*manifest.Manifest, error) {
	if path == "" {
		return withdrawals.Manifest()
	}
	return manifest.Load(path)
}

// durationRange is the values a duration flag may take when given.
type durationRange struct{ min, max time.Duration }

// Ranges of the server's duration flags: outside them the server would not
// do what its operator meant (a lease shorter than a call turns every slow
// success into in_doubt; a negative timeout ends the shutdown at once).
var durationRanges = map[string]durationRange{
	"lease":               {time.Second, time.Hour},
	"commit-rescue-after": {time.Second, 24 * time.Hour},
	"expire-every":        {100 * time.Millisecond, time.Hour},
	"shutdown-timeout":    {time.Second, time.Hour},
}

// checkDurations refuses a duration flag given outside its range, naming
// the flag and the range (exit 2).
func checkDurations(e *env, fs *flag.FlagSet) (code int, ok bool) {
	code, ok = 0, true
	fs.Visit(func(f *flag.Flag) {
		r, has := durationRanges[f.Name]
		if !has || !ok {
			return
		}
		d := f.Value.(flag.Getter).Get().(time.Duration)
		if d < r.min || d > r.max {
			code, ok = usageError(e, fs.Name(), "--%s %s is out of range: want from %s to %s", f.Name, d, r.min, r.max), false
		}
	})
	return code, ok
}

// usageError prints what is wrong with a command's flags and returns exit
// code 2.
func usageError(e *env, name, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "airlock "+name+": "+format+"\n", args...)
	return 2
}

// fail prints an error for the operator and returns exit code 1.
func fail(e *env, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "airlock: "+format+"\n", args...)
	return 1
}

func cmdMigrate(e *env, args []string) int {
	fs := newFlags(e, "migrate")
	db := dbFlag(fs)
	if code, ok := parse(fs, args); !ok {
		return code
	}
	m, err := withdrawals.Manifest() // migrating needs no tools; any manifest will do
	if err != nil {
		return fail(e, "%v", err)
	}
	// The store's tables and River's (the commit queue).
	a, err := app.New(e.ctx, &app.Config{Manifest: m, DSN: *db, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fail(e, "%v", err)
	}
	if err := a.Close(context.Background()); err != nil {
		return fail(e, "%v", err)
	}
	fmt.Fprintf(e.stdout, "migrated %s\n", redactDSN(*db))
	return 0
}
