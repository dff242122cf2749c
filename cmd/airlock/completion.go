package main

import (
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
)

// cmdCompletion writes a completion script for bash, zsh or fish: the
// commands, their subcommands and each one's flags, read from the same
// tree and flag sets the help is.
func cmdCompletion(e *env, args []string) int {
	fs := newFlags(e, "completion")
	if err := fs.Parse(args); err != nil {
		return map[bool]int{true: 0, false: 2}[e.helpOnly]
	}
	if fs.NArg() != 1 {
		return usageError(e, "completion", "want one shell: bash, zsh or fish")
	}
	words := completionWords(e)
	switch fs.Arg(0) {
	case "bash":
		writeBash(e.stdout, words)
	case "zsh":
		fmt.Fprintln(e.stdout, "#compdef airlock")
		fmt.Fprintln(e.stdout, "autoload -U +X bashcompinit && bashcompinit")
		writeBash(e.stdout, words)
	case "fish":
		writeFish(e.stdout, words)
	default:
		return usageError(e, "completion", "%q is not a shell: want bash, zsh or fish", fs.Arg(0))
	}
	return 0
}

// completionWords maps "", "CMD" and "CMD SUB" to what may follow: the
// commands, a group's subcommands, a command's flags.
func completionWords(e *env) map[string][]string {
	words := map[string][]string{}
	for _, c := range commands() {
		words[""] = append(words[""], c.name)
		if len(c.subs) > 0 {
			words[c.name] = c.subNames()
			for _, s := range c.subs {
				words[c.name+" "+s.name] = flagNames(e, c, s.name)
			}
			continue
		}
		words[c.name] = flagNames(e, c, "")
	}
	words[""] = append(words[""], "help")
	// What follows "completion" and "help": the shells, the commands.
	words["completion"] = append([]string{"bash", "zsh", "fish"}, words["completion"]...)
	for _, c := range commands() {
		words["help"] = append(words["help"], c.name)
		if len(c.subs) > 0 {
			words["help "+c.name] = c.subNames()
		}
	}
	return words
}

// flagNames runs a command for its help, silently, and reads the flags of
// the flag sets it made.
func flagNames(e *env, c command, sub string) []string {
	var sets []*flag.FlagSet
	quiet := &env{ctx: e.ctx, stdin: e.stdin, stdout: io.Discard, stderr: io.Discard, helpOnly: true, flagSets: &sets}
	args := []string{"--help"}
	if sub != "" {
		args = []string{sub, "--help"}
	}
	_ = c.run(quiet, args)
	seen := map[string]bool{}
	var out []string
	for _, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if !seen[f.Name] {
				seen[f.Name] = true
				out = append(out, "--"+f.Name)
			}
		})
	}
	sort.Strings(out)
	return append(out, "--help")
}

func writeBash(w io.Writer, words map[string][]string) {
	fmt.Fprintln(w, "# airlock completion for bash: source <(airlock completion bash)")
	fmt.Fprintln(w, "_airlock() {")
	keys := make([]string, 0, len(words))
	for k := range words {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// A word extends the path only where the longer path is a command: a
	// flag's value or a plan id is not.
	fmt.Fprintf(w, "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" path=\"\" i next known=%q\n", "|"+strings.Join(keys, "|")+"|")
	fmt.Fprintln(w, `  for ((i = 1; i < COMP_CWORD; i++)); do`)
	fmt.Fprintln(w, `    next="${path:+$path }${COMP_WORDS[i]}"`)
	fmt.Fprintln(w, `    [[ "$known" == *"|$next|"* ]] && path=$next`)
	fmt.Fprintln(w, `  done`)
	fmt.Fprintln(w, `  local words`)
	fmt.Fprintln(w, `  case "$path" in`)
	for _, k := range keys {
		fmt.Fprintf(w, "    %q) words=%q ;;\n", k, strings.Join(words[k], " "))
	}
	fmt.Fprintln(w, `    *) words="" ;;`)
	fmt.Fprintln(w, `  esac`)
	fmt.Fprintln(w, `  COMPREPLY=($(compgen -W "$words" -- "$cur"))`)
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -F _airlock airlock")
}

func writeFish(w io.Writer, words map[string][]string) {
	fmt.Fprintln(w, "# airlock completion for fish: airlock completion fish | source")
	fmt.Fprintf(w, "complete -c airlock -f -n __fish_use_subcommand -a %q\n", strings.Join(words[""], " "))
	keys := make([]string, 0, len(words))
	for k := range words {
		if k != "" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts := strings.Fields(k)
		cond := "__fish_seen_subcommand_from " + parts[0]
		if len(parts) == 2 {
			cond += "; and __fish_seen_subcommand_from " + parts[1]
		}
		var subs, flags []string
		for _, w := range words[k] {
			if name, ok := strings.CutPrefix(w, "--"); ok {
				flags = append(flags, name)
			} else {
				subs = append(subs, w)
			}
		}
		if len(subs) > 0 {
			fmt.Fprintf(w, "complete -c airlock -f -n %q -a %q\n", cond, strings.Join(subs, " "))
		}
		for _, f := range flags {
			fmt.Fprintf(w, "complete -c airlock -n %q -l %s\n", cond, f)
		}
	}
}
