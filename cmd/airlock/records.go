package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// cmdRecords shows or settles a record, against a server (--url, --token)
// or the database (--db).
func cmdRecords(e *env, args []string) int {
	sub := args[0] // run (main.go) has checked it
	fs := newFlags(e, "records "+sub)
	db, url, token, by, config := planFlags(fs, sub == "settle")
	// Each subcommand's own flags, so its help lists only what it takes.
	happened, result, note, format := new(string), new(string), new(string), new(string)
	if sub == "settle" {
		happened = fs.String("happened", "", "true (it happened; give --result) or false (it did not; the key is freed)")
		result = fs.String("result", "", "the result, as JSON, when it happened")
		note = fs.String("note", "", "how you know (required)")
	} else {
		format = fs.String("format", "text", "text or json")
	}
	// The key before or after the flags.
	rest := args[1:]
	key := ""
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		key, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return map[bool]int{true: 0, false: 2}[errors.Is(err, flag.ErrHelp)]
	}
	if key == "" && fs.NArg() > 0 {
		key = fs.Arg(0)
	}
	if key == "" || fs.NArg() > 1 || (fs.NArg() == 1 && key != fs.Arg(0)) {
		fmt.Fprintf(e.stderr, "airlock records %s: want one record key\n\n", sub)
		fs.Usage()
		return 2
	}
	if *format != "" && *format != "text" && *format != "json" {
		return usageError(e, "records "+sub, "--format %q: want text or json", *format)
	}
	if sub == "settle" && *happened != "true" && *happened != "false" {
		return usageError(e, "records settle", "--happened must be true or false")
	}
	if sub == "settle" && *result != "" && !json.Valid([]byte(*result)) {
		return usageError(e, "records settle", "--result must be JSON")
	}
	c, err := openPlanClient(e.ctx, *db, *url, *token, *by, *config, sub == "show")
	if err != nil {
		return failCode(e, err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if sub == "show" {
		rec := &airlock.Record{}
		if c.app != nil {
			if rec, err = c.app.Guard.Get(ctx, key); err != nil {
				return fail(e, "no record with key %s", key)
			}
		} else if err := c.do(ctx, "GET", "/v1/records/"+key, nil, rec); err != nil {
			return fail(e, "%v", err)
		}
		if *format == "json" {
			return printJSON(e, rec)
		}
		printRecord(e.stdout, rec)
		return 0
	}
	var res json.RawMessage
	if *result != "" {
		res = json.RawMessage(*result)
	}
	if c.app != nil {
		rec, err := c.app.Guard.Settle(ctx, airlock.SettleRequest{Key: key, Happened: *happened == "true", Result: res, Note: *note, By: c.by, Role: airlock.RoleAdmin})
		if err != nil {
			return fail(e, "%v", flagError(err))
		}
		fmt.Fprintf(e.stdout, "record %s: %s\n", key, rec.State)
		return 0
	}
	body := map[string]any{"happened": *happened == "true", "note": *note}
	if res != nil {
		body["result"] = res
	}
	var rec airlock.Record
	if err := c.do(ctx, "POST", "/v1/records/"+key+"/settle", body, &rec); err != nil {
		return fail(e, "%v", flagError(err))
	}
	fmt.Fprintf(e.stdout, "record %s: %s\n", key, rec.State)
	return 0
}
