package main

import (
	"errors"
	"fmt"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/policy"
)

// cmdPolicy runs the approval rules' test files: exit 1 on a failing case,
// naming it.
// run (main.go) has checked the subcommand.
func cmdPolicy(e *env, args []string) int {
	fs := newFlags(e, "policy test")
	config := configFlag(fs)
	if code, ok := parse(fs, args[1:]); !ok {
		return code
	}
	m, err := loadManifest(*config)
	if err != nil {
		var ve *airlock.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				fmt.Fprintln(e.stdout, p.String())
			}
			return 1
		}
		return failCode(e, err)
	}
	results, err := policy.RunTests(&m.Catalog)
	if err != nil {
		return fail(e, "%v", err)
	}
	failed := 0
	for _, r := range results {
		if r.Pass {
			fmt.Fprintf(e.stdout, "ok    %s: %s (rule %s → %s)\n", r.Tool, r.Name, r.Got.Rule, r.Got.Decision)
			continue
		}
		failed++
		fmt.Fprintf(e.stdout, "FAIL  %s: %s: %s\n", r.Tool, r.Name, r.Message)
	}
	fmt.Fprintf(e.stdout, "%d passed, %d failed\n", len(results)-failed, failed)
	if failed > 0 {
		return 1
	}
	return 0
}
