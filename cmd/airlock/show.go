package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockhq/airlock"
)

// maxShownValue bounds one value in `plans show` and `records show` text:
// the whole is in --format json.
const maxShownValue = 1000

// printPlan writes a plan as labelled fields, its arguments and facts one
// field a line, every agent-made value with its invisible characters
// revealed (docs/hardening.md, "text that cannot disguise itself"); with
// its tool, money formatted beside the raw value and the agent's note.
func printPlan(w io.Writer, p *airlock.Plan, tool *airlock.Tool) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	field := func(label, value string) {
		if value != "" {
			fmt.Fprintf(tw, "%s\t%s\n", label, value)
		}
	}
	field("plan", p.ID)
	field("tool", p.Tool)
	field("status", string(p.Status))
	field("rule", strings.TrimSpace(p.Rule+" ("+p.Decision+")"))
	field("proposed", strings.TrimSpace("by "+shownValue(orUnknown(p.ProposedBy))+" at "+p.CreatedAt.Format(time.RFC3339)))
	field("run", shownValue(p.RunID))
	field("approvals", fmt.Sprintf("%d of %d", len(p.Approvals), p.ApprovalsRequiredOr()))
	for _, a := range p.Approvals {
		field("  approved", fmt.Sprintf("by %s at %s: %s", shownValue(a.By), a.At.Format(time.RFC3339), shownValue(a.Reason)))
	}
	if p.Status == airlock.PlanAwaitingApproval { // a decided plan no longer expires
		field("expires", p.ExpiresAt.Format(time.RFC3339))
	}
	if p.DecidedBy != "" {
		field("decided", fmt.Sprintf("by %s at %s: %s", shownValue(p.DecidedBy), p.DecidedAt.Format(time.RFC3339), shownValue(p.DecisionReason)))
	}
	field("agent's note", shownValue(tool.AgentNote(p.Args)))
	money := tool.Money(p.Args, p.Facts)
	jsonFields(tw, "args", p.Args, money)
	jsonFields(tw, "facts", p.Facts, money)
	field("facts error", shownValue(p.FactsError))
	jsonFields(tw, "result", p.Result, nil)
	field("error", shownValue(p.Error))
	tw.Flush()
}

// printRecord writes a record as labelled fields.
func printRecord(w io.Writer, r *airlock.Record) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key\t%s\ntool\t%s\nstate\t%s\nwindow\t%s\nattempts\t%d\ncreated\t%s\nupdated\t%s\n",
		r.Key, r.Tool, r.State, r.WindowID, r.Attempts, r.CreatedAt.Format(time.RFC3339), r.UpdatedAt.Format(time.RFC3339))
	if r.RunID != "" {
		fmt.Fprintf(tw, "run\t%s\n", shownValue(r.RunID))
	}
	if r.Note != "" {
		fmt.Fprintf(tw, "note\t%s\n", shownValue(r.Note))
	}
	jsonFields(tw, "args", r.Args, nil)
	jsonFields(tw, "result", r.Result, nil)
	tw.Flush()
}

// shownValue is agent-made text in a labelled field: invisible characters
// as [U+XXXX], cut at maxShownValue bytes with its length said.
func shownValue(s string) string { return airlock.RevealShortened(s, maxShownValue) }

// jsonFields writes a JSON value one leaf a line under label: "args.record_id
// WD-24817", nested objects and arrays by path; strings unquoted; money
// (airlock.Tool.Money: "facts.amount_minor" → "2,500.00 USD") beside its
// raw value.
func jsonFields(tw io.Writer, label string, raw json.RawMessage, money map[string]string) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // 2^53 and more as sent
	if err := dec.Decode(&v); err != nil {
		fmt.Fprintf(tw, "%s\t%s\n", label, shownValue(string(raw)))
		return
	}
	var walk func(path, ref string, v any)
	walk = func(path, ref string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				fmt.Fprintf(tw, "%s\t{}\n", path)
			}
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				kref := ref + "." + k
				if strings.Contains(k, ".") {
					kref = "\x00" // a member named "obj.a" is not obj's a: no money for it
				}
				walk(path+"."+shownValue(k), kref, x[k])
			}
		case []any:
			if len(x) == 0 {
				fmt.Fprintf(tw, "%s\t[]\n", path)
			}
			for i, item := range x {
				walk(path+"["+strconv.Itoa(i)+"]", ref+"."+strconv.Itoa(i), item)
			}
		case string:
			fmt.Fprintf(tw, "%s\t%s\n", path, shownValue(x))
		default:
			b, _ := json.Marshal(x)
			if m := money[ref]; m != "" {
				fmt.Fprintf(tw, "%s\t%s (%s)\n", path, m, b)
				return
			}
			fmt.Fprintf(tw, "%s\t%s\n", path, b)
		}
	}
	walk(label, label, v)
}
