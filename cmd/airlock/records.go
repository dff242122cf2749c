package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/airlockhq/airlock"
)

// cmdRecords shows or settles a record, against a server (--url, --token)
// or the database (--db).
func cmdRecords(e *env, args []string) int {
	if len(args) < 2 || (args[0] != "show" && args[0] != "settle") {
		fmt.Fprintln(e.stderr, "airlock records: want show KEY or settle KEY --happened=true|false --note …")
		return 2
	}
	sub, key := args[0], args[1]
	fs := newFlags(e, "records "+sub)
	db, url, token, by, config := planFlags(fs)
	happened := fs.String("happened", "", "settle: true (it happened; give --result) or false (it did not; the key is freed)")
	result := fs.String("result", "", "settle: the result, as JSON, when it happened")
	note := fs.String("note", "", "settle: how you know (required)")
	if code, ok := parse(fs, args[2:]); !ok {
		return code
	}
	c, err := openPlanClient(e.ctx, *db, *url, *token, *by, *config)
	if err != nil {
		return fail(e, "%v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if sub == "show" {
		if c.app != nil {
			rec, err := c.app.Guard.Get(ctx, key)
			if err != nil {
				return fail(e, "no record with key %s", key)
			}
			return printJSON(e, rec)
		}
		var rec airlock.Record
		if err := c.do(ctx, "GET", "/v1/records/"+key, nil, &rec); err != nil {
			return fail(e, "%v", err)
		}
		return printJSON(e, &rec)
	}
	if *happened != "true" && *happened != "false" {
		return fail(e, "--happened must be true or false")
	}
	var res json.RawMessage
	if *result != "" {
		if !json.Valid([]byte(*result)) {
			return fail(e, "--result must be JSON")
		}
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
