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
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "time/tzdata" // business_day windows need zone data on machines without it

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/examples/withdrawals"
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
	// helpOnly: the command runs only to print its usage (leafHelp).
	helpOnly bool
	// flagSets records the flag sets the command made, for completion.
	flagSets *[]*flag.FlagSet
}

type command struct {
	name    string
	summary string
	// args is what follows the name in the synopsis, for a command
	// without subcommands ("--tool T --args JSON").
	args string
	// examples are whole command lines its help shows (at least one; a
	// test checks each names only flags the command has).
	examples []string
	// subs are the subcommands, for a command that is a group.
	subs []subcommand
	run  func(e *env, args []string) int
}

// subcommand is one of a group's subcommands: its positional arguments,
// what it does and examples of it; the group's run receives its name first.
type subcommand struct {
	name, args, summary string
	examples            []string
}

func commands() []command {
	return []command{
		{name: "serve", summary: "serve MCP (/mcp) and the HTTP API; no flags: the bundled example on embedded SQLite", run: cmdServe, examples: []string{
			"airlock serve",
			"airlock serve --config airlock.yaml --db postgres://airlock@db/airlock --listen 0.0.0.0:8420",
		}},
		{name: "mcp", summary: "serve the tools over stdio for desktop agents", run: cmdMCP, examples: []string{
			"airlock mcp --config airlock.yaml --db sqlite:airlock.db",
		}},
		{name: "migrate", summary: "apply the database migrations (--db DSN; --status, --dry-run)", run: cmdMigrate, examples: []string{
			"airlock migrate --db postgres://airlock@db/airlock",
			"airlock migrate --status --db sqlite:airlock-data/airlock.db",
		}},
		{name: "key", summary: "print the key of a call and every part that went into it", args: "--tool T --args JSON [--at TIME]", run: cmdKey, examples: []string{
			`airlock key --tool approve_withdrawal --args '{"record_id":" wd-24817 "}'`,
			`airlock key --config airlock.yaml --tool add_note --args '{"record_id":"WD-1","text":"checked"}' --at 2026-12-07T16:59:00-05:00 --format json`,
		}},
		{name: "init", summary: "write a manifest from an MCP server's tools", args: "--from-mcp (--command … | --url …)", run: cmdInit, examples: []string{
			`airlock init --from-mcp --command "npx -y @modelcontextprotocol/server-filesystem /srv/files" --out airlock.yaml`,
			"airlock init --from-mcp --url http://127.0.0.1:3001/mcp --out airlock.yaml",
		}},
		{name: "tools", summary: "check the manifest (the CI lint) or list its tools", run: cmdTools, subs: []subcommand{
			{"check", "", "every problem of the manifest, one line each (exit 1 when any)", []string{"airlock tools check --config airlock.yaml"}},
			{"list", "", "the page \"Things you cannot undo\" (--format md) or every tool (--format json)", []string{
				"airlock tools list --config airlock.yaml > docs/irreversible.md",
				"airlock tools list --config airlock.yaml --format json",
			}},
		}},
		{name: "plans", summary: "list, show and decide plans, against --url (a server) or --db", run: cmdPlans, subs: []subcommand{
			{"list", "", "plans, filtered by --status, --tool, --run", []string{
				"airlock plans list --url http://127.0.0.1:8420 --token $AIRLOCK_TOKEN --status awaiting_approval",
				"airlock plans list --db sqlite:airlock-data/airlock.db --tool approve_withdrawal --format json",
			}},
			{"show", "ID", "one plan", []string{
				"airlock plans show pl_01JF3Z --url http://127.0.0.1:8420 --token $AIRLOCK_TOKEN",
				"airlock plans show pl_01JF3Z --db sqlite:airlock-data/airlock.db --format json",
			}},
			{"approve", "ID", "approve a plan (--reason required)", []string{
				`airlock plans approve pl_01JF3Z --url http://127.0.0.1:8420 --token $AIRLOCK_TOKEN --reason "KYC checked by phone"`,
			}},
			{"reject", "ID", "reject a plan (--reason required)", []string{
				`airlock plans reject pl_01JF3Z --db sqlite:airlock-data/airlock.db --as alice --reason "duplicate of WD-24811"`,
			}},
		}},
		{name: "records", summary: "show or settle a record, against --url (a server) or --db", run: cmdRecords, subs: []subcommand{
			{"show", "KEY", "one record", []string{"airlock records show 3f9a…e1 --url http://127.0.0.1:8420 --token $AIRLOCK_TOKEN"}},
			{"settle", "KEY", "settle an in-doubt record: --happened=true|false --note …", []string{
				`airlock records settle 3f9a…e1 --db sqlite:airlock-data/airlock.db --happened=true --result '{"status":"approved"}' --note "in the ledger as TX-88"`,
				`airlock records settle 3f9a…e1 --url http://127.0.0.1:8420 --token $AIRLOCK_TOKEN --happened=false --note "not in the ledger"`,
			}},
		}},
		{name: "audit", summary: "check, export and purge the audit log", run: cmdAudit, subs: []subcommand{
			{"verify", "", "check the hash chain (of the database, or of an export with --file)", []string{
				"airlock audit verify --db sqlite:backup.db --expect-head 9c1e0f2a77b4",
				"airlock audit verify --file audit-2026-12-06.jsonl",
			}},
			{"export", "", "write the log as JSON lines", []string{
				"airlock audit export --db $AIRLOCK_DB --since 2026-12-06 --until 2026-12-07 --out audit-2026-12-06.jsonl",
			}},
			{"purge", "", "delete a sealed prefix of the log (--before)", []string{"airlock audit purge --db $AIRLOCK_DB --before 90d"}},
		}},
		{name: "backup", summary: "copy an embedded (SQLite) database while it serves", args: "--db sqlite:PATH --out FILE", run: cmdBackup, examples: []string{
			"airlock backup --db sqlite:/var/lib/airlock/airlock.db --out /backups/airlock-2026-12-07.db",
		}},
		{name: "report", summary: "the figures that show the protection works (--since 24h, --format text|json)", run: cmdReport, examples: []string{
			"airlock report --db sqlite:airlock-data/airlock.db",
			"airlock report --url http://127.0.0.1:8420 --token $AIRLOCK_ADMIN_TOKEN --since 168h --format json",
		}},
		{name: "policy", summary: "the approval rules' tests", run: cmdPolicy, subs: []subcommand{
			{"test", "", "run the approval rules' test files", []string{"airlock policy test --config airlock.yaml"}},
		}},
		{name: "example", summary: "run a service of the bundled example on its own", run: cmdExample, subs: []subcommand{
			{"payments", "", "the example's fake payments service, which its tools call (the deploy files' payments:9000)", []string{
				"airlock example payments --listen 0.0.0.0:9000 --db /data/payments.db",
			}},
		}},
		{name: "demo", summary: "replay the overnight withdrawals incident, without and with airlock", run: cmdDemo, examples: []string{"airlock demo"}},
		{name: "bench", summary: "measure new calls, repeats and races against a plain baseline", run: cmdBench, examples: []string{
			"airlock bench --mode new --calls 3000 --concurrency 1",
			"airlock bench --mode race --concurrency 16 --db postgres://postgres@127.0.0.1/test --through http",
		}},
		{name: "version", summary: "the version, commit, build date, Go version and schema version (of --db too)", run: cmdVersion, examples: []string{
			"airlock version",
			"airlock version --db sqlite:airlock-data/airlock.db --format json",
		}},
		{name: "completion", summary: "a shell completion script", args: "bash|zsh|fish", run: cmdCompletion, examples: []string{
			"source <(airlock completion bash)",
			"airlock completion fish > ~/.config/fish/completions/airlock.fish",
		}},
	}
}

func findCommand(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func (c command) sub(name string) (subcommand, bool) {
	for _, s := range c.subs {
		if s.name == name {
			return s, true
		}
	}
	return subcommand{}, false
}

func (c command) subNames() []string {
	names := make([]string, len(c.subs))
	for i, s := range c.subs {
		names[i] = s.name
	}
	return names
}

// run dispatches as gh and kubectl do: -h, --help and help CMD [SUB] print
// the usage of what they name on standard output and exit 0; an unknown
// command, subcommand or flag prints the usage on standard error and exits
// 2; so do bare airlock and a group without its subcommand. A command that
// fails otherwise exits 1.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}
	if len(args) == 0 {
		// Nothing asked is a usage error, as a group without its
		// subcommand is (docs/DECISIONS.md, "The CLI's exit codes").
		usage(stderr)
		return 2
	}
	if isHelp(args[0]) {
		if len(args) > 1 {
			fmt.Fprintf(stderr, "airlock: unexpected argument %q after %s\n\n", args[1], args[0])
			usage(stderr)
			return 2
		}
		usage(stdout)
		return 0
	}
	if args[0] == "help" {
		return help(e, args[1:])
	}
	if args[0] == "--version" || args[0] == "-version" {
		return cmdVersion(e, args[1:])
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(stderr, "airlock: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	rest := args[1:]
	if len(c.subs) > 0 {
		switch {
		case len(rest) == 0:
			fmt.Fprintf(stderr, "airlock %s: want a subcommand: %s\n\n", c.name, strings.Join(c.subNames(), ", "))
			groupUsage(stderr, c)
			return 2
		case isHelp(rest[0]):
			groupUsage(stdout, c)
			return 0
		}
		if _, ok := c.sub(rest[0]); !ok {
			fmt.Fprintf(stderr, "airlock %s: unknown subcommand %q: want %s\n\n", c.name, rest[0], strings.Join(c.subNames(), ", "))
			groupUsage(stderr, c)
			return 2
		}
		if wantsHelp(rest[1:]) {
			return leafHelp(e, c, rest[0])
		}
		return c.run(e, rest)
	}
	if wantsHelp(rest) {
		return leafHelp(e, c, "")
	}
	return c.run(e, rest)
}

func isHelp(a string) bool { return a == "-h" || a == "--help" || a == "-help" }

// wantsHelp reports whether a command's arguments ask for its help (before
// a "--", which ends the flags).
func wantsHelp(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) {
			return true
		}
	}
	return false
}

// help is "airlock help [CMD [SUB]]".
func help(e *env, args []string) int {
	if len(args) == 0 {
		usage(e.stdout)
		return 0
	}
	if args[0] == "help" && len(args) == 1 {
		fmt.Fprintln(e.stdout, "airlock help [COMMAND [SUBCOMMAND]]: a command's usage, flags and examples; airlock help alone lists the commands.")
		return 0
	}
	c, ok := findCommand(args[0])
	if !ok {
		fmt.Fprintf(e.stderr, "airlock help: unknown command %q\n\n", args[0])
		usage(e.stderr)
		return 2
	}
	if len(args) > 2 || (len(c.subs) == 0 && len(args) > 1) {
		fmt.Fprintf(e.stderr, "airlock help: unexpected argument %q\n", args[len(args)-1])
		return 2
	}
	if len(c.subs) == 0 {
		return leafHelp(e, c, "")
	}
	if len(args) == 1 {
		groupUsage(e.stdout, c)
		return 0
	}
	if _, ok := c.sub(args[1]); !ok {
		fmt.Fprintf(e.stderr, "airlock help %s: unknown subcommand %q: want %s\n", c.name, args[1], strings.Join(c.subNames(), ", "))
		return 2
	}
	return leafHelp(e, c, args[1])
}

// leafHelp prints a command's (or subcommand's) usage and flags on
// standard output: the command is run with --help, which its flag set
// answers before it does anything.
func leafHelp(e *env, c command, sub string) int {
	he := *e
	he.stderr = e.stdout
	he.helpOnly = true
	args := []string{"--help"}
	if sub != "" {
		args = []string{sub, "--help"}
	}
	_ = c.run(&he, args)
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "airlock: exactly-once tool calls for AI agents.")
	fmt.Fprintln(w, "\nUsage: airlock COMMAND [SUBCOMMAND] [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun airlock help COMMAND (or airlock COMMAND --help) for a command's usage and flags.")
}

func groupUsage(w io.Writer, c command) {
	fmt.Fprintf(w, "airlock %s: %s.\n\nUsage: airlock %s SUBCOMMAND [flags]\n\nSubcommands:\n", c.name, c.summary, c.name)
	for _, s := range c.subs {
		fmt.Fprintf(w, "  %-12s %s\n", strings.TrimSpace(s.name+" "+s.args), s.summary)
	}
	fmt.Fprintln(w, "\nExamples:")
	for _, s := range c.subs {
		fmt.Fprintf(w, "  %s\n", s.examples[0])
	}
	fmt.Fprintf(w, "\nRun airlock help %s SUBCOMMAND for its flags and more examples.\n", c.name)
}

// examplesOf are the examples of the command a flag set belongs to
// ("plans show").
func examplesOf(name string) []string {
	parts := strings.Fields(name)
	c, ok := findCommand(parts[0])
	if !ok {
		return nil
	}
	if len(parts) > 1 {
		if s, ok := c.sub(parts[1]); ok {
			return s.examples
		}
	}
	return c.examples
}

// synopsis is the usage line of the command a flag set belongs to
// ("airlock plans show").
func synopsis(name string) (line, summary string) {
	parts := strings.Fields(name)
	c, ok := findCommand(parts[0])
	if !ok {
		return "airlock " + name + " [flags]", ""
	}
	if len(parts) > 1 {
		if s, ok := c.sub(parts[1]); ok {
			return strings.TrimSpace("airlock "+c.name+" "+s.name+" "+s.args) + " [flags]", s.summary
		}
	}
	return strings.TrimSpace("airlock "+c.name+" "+c.args) + " [flags]", c.summary
}

// newFlags makes a flag set that reports errors to stderr and never exits;
// its usage is the command's synopsis and its flags written --flag, as the
// docs write them.
func newFlags(e *env, name string) *flag.FlagSet {
	fs := flag.NewFlagSet("airlock "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() { flagUsage(fs.Output(), fs, name) }
	if e.flagSets != nil {
		*e.flagSets = append(*e.flagSets, fs)
	}
	return fs
}

func flagUsage(w io.Writer, fs *flag.FlagSet, name string) {
	line, summary := synopsis(name)
	if summary != "" {
		fmt.Fprintf(w, "%s.\n\n", strings.ToUpper(summary[:1])+summary[1:])
	}
	fmt.Fprintf(w, "Usage: %s\n\nFlags:\n", line)
	fs.VisitAll(func(f *flag.Flag) {
		kind, text := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if kind != "" {
			head += " " + kind
		}
		fmt.Fprintf(w, "%s\n      %s", head, text)
		// A default read from the environment may be a secret: never shown.
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && f.Name != "token" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
	fmt.Fprintln(w, "  -h, --help\n      this help")
	if ex := examplesOf(name); len(ex) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, x := range ex {
			fmt.Fprintf(w, "  %s\n", x)
		}
	}
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

// loadManifest loads the manifest at path, or the bundled example when path
// is empty. A path with no file is a usage error (exit 2).
func loadManifest(path string) (*manifest.Manifest, error) {
	if path == "" {
		return withdrawals.Manifest()
	}
	m, err := manifest.Load(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &usageErr{fmt.Sprintf("--config: no manifest at %s", path)}
	}
	return m, err
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
	// A server's message can quote what an agent sent: nothing in it may
	// act on the terminal.
	fmt.Fprintf(e.stderr, "airlock: %s\n", airlock.RevealInvisibleLines(fmt.Sprintf(format, args...)))
	return 1
}
