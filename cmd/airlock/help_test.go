package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHelpOfEveryCommand walks the command tree: every command and
// subcommand answers help CMD [SUB], -h and --help with its own usage on
// standard output and exit 0, writes its flags --flag, and an unknown flag
// exits 2 with the usage.
func TestHelpOfEveryCommand(t *testing.T) {
	t.Parallel()
	for _, c := range commands() {
		paths := [][]string{{c.name}}
		for _, s := range c.subs {
			paths = append(paths, []string{c.name, s.name})
		}
		for _, path := range paths {
			want := "Usage: airlock " + strings.Join(path, " ")
			if len(c.subs) > 0 && len(path) == 1 {
				want = "Usage: airlock " + c.name + " SUBCOMMAND"
			}
			for _, args := range [][]string{
				append([]string{"help"}, path...),
				append(append([]string(nil), path...), "-h"),
				append(append([]string(nil), path...), "--help"),
			} {
				r := runCLI(t, args...)
				if r.code != 0 || !strings.Contains(r.stdout, want) {
					t.Errorf("airlock %s: exit %d, stdout lacks %q:\n%s%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
					continue
				}
				for _, line := range strings.Split(r.stdout, "\n") {
					if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") && !strings.HasPrefix(line, "  -h, --help") {
						t.Errorf("airlock %s: a flag written with one dash: %q", strings.Join(args, " "), line)
					}
				}
			}
			if len(c.subs) > 0 && len(path) == 1 {
				continue
			}
			r := runCLI(t, append(append([]string(nil), path...), "--no-such-flag")...)
			if r.code != 2 || !strings.Contains(r.stderr, "no-such-flag") || !strings.Contains(r.stderr, want) {
				t.Errorf("airlock %s --no-such-flag: exit %d, want 2 with the usage:\n%s", strings.Join(path, " "), r.code, r.stderr)
			}
		}
	}
}

// TestExamplesOfEveryCommand: every command and subcommand's help ends
// with examples; each example is a line of that command and names only
// flags it has, so an example cannot drift from the flags.
func TestExamplesOfEveryCommand(t *testing.T) {
	t.Parallel()
	e := &env{ctx: context.Background(), stdin: strings.NewReader("")}
	flagRE := regexp.MustCompile(`(?:^|\s)(--[a-z][a-z0-9-]*)`)
	for _, c := range commands() {
		type leaf struct {
			path     string
			examples []string
			flags    []string
		}
		var leaves []leaf
		if len(c.subs) == 0 {
			leaves = append(leaves, leaf{c.name, c.examples, flagNames(e, c, "")})
		}
		for _, s := range c.subs {
			leaves = append(leaves, leaf{c.name + " " + s.name, s.examples, flagNames(e, c, s.name)})
		}
		for _, l := range leaves {
			if len(l.examples) == 0 {
				t.Errorf("airlock %s has no example", l.path)
			}
			r := runCLI(t, append(strings.Fields(l.path), "--help")...)
			if !strings.Contains(r.stdout, "\nExamples:\n") {
				t.Errorf("airlock %s --help shows no examples:\n%s", l.path, r.stdout)
			}
			for _, x := range l.examples {
				if !strings.Contains(x, "airlock "+l.path) {
					t.Errorf("airlock %s: the example %q is not of this command", l.path, x)
				}
				if !strings.Contains(r.stdout, "  "+x+"\n") {
					t.Errorf("airlock %s --help does not show the example %q", l.path, x)
				}
				for _, m := range flagRE.FindAllStringSubmatch(x, -1) {
					if !slices.Contains(l.flags, m[1]) {
						t.Errorf("airlock %s: the example %q names %s, which the command does not take (%v)", l.path, x, m[1], l.flags)
					}
				}
			}
		}
	}
}

// A subcommand's help lists its own flags only, not its siblings'.
func TestSubcommandsHaveTheirOwnFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path       []string
		has, lacks []string
	}{
		{[]string{"plans", "show"}, []string{"--format", "--url"}, []string{"--reason", "--status", "--as"}},
		{[]string{"plans", "list"}, []string{"--status", "--tool", "--run", "--format"}, []string{"--reason", "--as"}},
		{[]string{"plans", "approve"}, []string{"--reason", "--as"}, []string{"--status", "--format"}},
		{[]string{"records", "show"}, []string{"--format"}, []string{"--note", "--happened", "--result", "--as"}},
		{[]string{"records", "settle"}, []string{"--note", "--happened", "--result", "--as"}, []string{"--format"}},
		{[]string{"audit", "verify"}, []string{"--expect-head", "--seal"}, []string{"--before", "--out"}},
	} {
		out := runCLI(t, append(tc.path, "--help")...).stdout
		for _, f := range tc.has {
			if !strings.Contains(out, "  "+f+" ") && !strings.Contains(out, "  "+f+"\n") {
				t.Errorf("airlock %s --help lacks %s:\n%s", strings.Join(tc.path, " "), f, out)
			}
		}
		for _, f := range tc.lacks {
			if strings.Contains(out, "  "+f+" ") || strings.Contains(out, "  "+f+"\n") {
				t.Errorf("airlock %s --help lists its sibling's %s:\n%s", strings.Join(tc.path, " "), f, out)
			}
		}
	}
}

// Exit codes, for every command: asking for nothing (bare airlock, a group
// without its subcommand) and every usage error exit 2 with the usage on
// standard error; help exits 0 on standard output.
func TestExitCodesOfEveryCommand(t *testing.T) {
	t.Parallel()
	r := runCLI(t)
	if r.code != 2 || r.stdout != "" || !strings.Contains(r.stderr, "Usage: airlock COMMAND") {
		t.Errorf("bare airlock: exit %d, stdout %q, stderr %q; want 2 with the usage on stderr", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		if r := runCLI(t, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage: airlock COMMAND") {
			t.Errorf("airlock %s: exit %d; want 0 with the usage on stdout", args[0], r.code)
		}
	}
	for _, c := range commands() {
		if len(c.subs) > 0 {
			if r := runCLI(t, c.name); r.code != 2 || !strings.Contains(r.stderr, "Usage: airlock "+c.name+" SUBCOMMAND") {
				t.Errorf("bare airlock %s: exit %d, stderr %q; want 2 with its usage", c.name, r.code, r.stderr)
			}
		}
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		in   string
	}{
		{[]string{"no-such-command"}, 2, `unknown command "no-such-command"`},
		{[]string{"tools"}, 2, "want a subcommand: check, list"},
		{[]string{"plans", "frobnicate"}, 2, `unknown subcommand "frobnicate"`},
		{[]string{"help", "no-such-command"}, 2, "unknown command"},
		{[]string{"help", "plans", "frobnicate"}, 2, "unknown subcommand"},
		{[]string{"records", "show"}, 2, "Usage: airlock records show KEY"},
		{[]string{"completion", "tcsh"}, 2, "want bash, zsh or fish"},
		{[]string{"version", "--format", "xml"}, 2, "want text or json"},
		// A missing or wrong flag is a usage error, as a missing argument is.
		{[]string{"plans", "approve", "pl_1"}, 2, "give --url and --token"},
		{[]string{"plans", "show", "pl_1", "--url", "http://127.0.0.1:1"}, 2, "--url needs --token"},
		{[]string{"plans", "show"}, 2, "want one plan id"},
		{[]string{"plans", "show", "pl_1", "--format", "yaml"}, 2, `--format "yaml": want text or json`},
		{[]string{"records", "settle", "k1", "--db", "sqlite:x.db", "--happened=maybe"}, 2, "--happened must be true or false"},
		{[]string{"key", "--args", "{}"}, 2, "--tool is required"},
		{[]string{"plans", "reject", "pl_1", "--db", "sqlite:x.db", "--as", "mallory\x1b[2J", "--reason", "x"}, 2, "--as mallory[U+001B][2J: a name"},
		{[]string{"audit", "purge", "--db", "sqlite:x.db"}, 2, "--before is required"},
		{[]string{"report", "--since", "-1h"}, 2, "--since"},
		// Every flag checked before anything runs or is written.
		{[]string{"bench", "--calls", "-5"}, 2, "--calls -5: want a positive number"},
		{[]string{"bench", "--through", "nope"}, 2, `--through "nope": want one of direct`},
		{[]string{"serve", "--db", "foo"}, 2, `--db: "foo" is not a DSN`},
		{[]string{"serve", "--listen", "nope"}, 2, `--listen "nope": want HOST:PORT`},
		{[]string{"serve", "--example-payments", "bogus"}, 2, `--example-payments "bogus": want auto, on or off`},
		{[]string{"example", "payments", "--listen", ""}, 2, `--listen "": want HOST:PORT`},
		{[]string{"plans", "list", "--status", "bogus"}, 2, `--status "bogus": want one of awaiting_approval`},
		{[]string{"records", "show"}, 2, "want one record key"},
		{[]string{"audit", "verify", "--format", "xml"}, 2, `--format "xml": want text or json`},
		{[]string{"audit", "purge", "--before", "90d", "--format", "xml"}, 2, `--format "xml": want text or json`},
		{[]string{"audit", "verify", "--db", "foo"}, 2, `"foo" is not a DSN`},
		{[]string{"help", "serve", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-h", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--version", "extra"}, 2, `unexpected argument "extra"`},
		// A manifest that is not there: its whole path named.
		{[]string{"tools", "check", "--config", "/nonexistent/dir/airlock.yaml"}, 2, "no manifest at /nonexistent/dir/airlock.yaml"},
		{[]string{"key", "--config", "/nonexistent/dir/airlock.yaml", "--tool", "add_note", "--args", "{}"}, 2, "no manifest at /nonexistent/dir/airlock.yaml"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.in) {
			t.Errorf("airlock %s: exit %d, stderr %q; want %d containing %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.code, tc.in)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := runCLI(t, args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "airlock ") || !strings.Contains(r.stdout, "schema:   16 (sqlite), 16 (postgres)") || !strings.Contains(r.stdout, "go:") {
			t.Fatalf("airlock %s: exit %d\n%s%s", args[0], r.code, r.stdout, r.stderr)
		}
	}
	// With --db: the database's own schema version; a missing file is an
	// error, not a new database.
	dir := t.TempDir()
	db := "sqlite:" + filepath.Join(dir, "a.db")
	if r := runCLI(t, "migrate", "--db", db); r.code != 0 {
		t.Fatalf("migrate: %s", r.stderr)
	}
	if r := runCLI(t, "version", "--db", db, "--format", "json"); r.code != 0 || !strings.Contains(r.stdout, `"database_schema": 16`) {
		t.Fatalf("version --db: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	missing := filepath.Join(dir, "none.db")
	if r := runCLI(t, "version", "--db", "sqlite:"+missing); r.code != 2 || !strings.Contains(r.stderr, "no database at "+missing) {
		t.Fatalf("version --db of a missing file: exit %d", r.code)
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("version --db created the database it was asked about")
	}
}

// TestCompletion: each shell's script names the commands, the subcommands
// and the flags; bash (and zsh, where installed) parse it.
func TestCompletion(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := runCLI(t, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "plans") || !strings.Contains(r.stdout, "approve") || !strings.Contains(r.stdout, "reason") {
			t.Fatalf("completion %s: exit %d\n%s", shell, r.code, r.stderr)
		}
		sh, err := exec.LookPath(shell)
		if err != nil || shell == "fish" {
			continue // fish is not checked: -n would need a fish here
		}
		path := filepath.Join(t.TempDir(), "completion."+shell)
		if err := os.WriteFile(path, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
			t.Fatalf("%s -n: %v\n%s", shell, err, out)
		}
	}
	// In bash, completing "airlock plans " offers the subcommands.
	if _, err := exec.LookPath("bash"); err != nil {
		return
	}
	script := runCLI(t, "completion", "bash").stdout + `
COMP_WORDS=(airlock plans ""); COMP_CWORD=2; _airlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(airlock plans approve --rea); COMP_CWORD=3; _airlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(airlock completion ""); COMP_CWORD=2; _airlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(airlock help pl); COMP_CWORD=2; _airlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(airlock audit verify --db x --expect-c); COMP_CWORD=5; _airlock; echo "${COMPREPLY[*]}"
COMP_WORDS=(airlock plans show pl_1 --form); COMP_CWORD=4; _airlock; echo "${COMPREPLY[*]}"
`
	out, err := exec.Command("bash", "-c", script).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "list show approve reject") || !strings.Contains(string(out), "--reason") ||
		!strings.Contains(string(out), "bash zsh fish") || !strings.Contains(string(out), "\nplans\n") ||
		!strings.Contains(string(out), "\n--expect-count\n") || !strings.Contains(string(out), "\n--format\n") {
		t.Fatalf("bash completion: %v\n%s", err, out)
	}
}

// lockedBuffer is a buffer a running command writes while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeSaysTheExamplePortIsTaken: with the bundled example and its
// payments port taken, serve says so instead of silently calling whatever
// listens there. Not parallel: it holds the example's port, which parallel
// tests that serve the example would otherwise want.
func TestServeSaysTheExamplePortIsTaken(t *testing.T) {
	m, err := loadManifest("")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(m.Upstreams["payments"].HTTP)
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := net.Listen("tcp", u.Host); err == nil {
		defer ln.Close()
	} // else something already holds it: taken either way
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut lockedBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--db", "sqlite:" + filepath.Join(t.TempDir(), "a.db")}, strings.NewReader(""), &out, &errOut)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "listening on") {
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s%s", out.String(), errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(out.String(), "example payments service not started: "+m.Upstreams["payments"].HTTP+" is taken") {
		t.Fatalf("serve did not say the port is taken:\n%s", out.String())
	}
}
