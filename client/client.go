// Package client is a Go client of airlock's claims API (docs/gateway.md,
// "The claims API"), for Go programs that share one airlock server rather
// than embedding the guard: Do runs a function once per piece of work,
// however often it is asked, and answers as the gateway does.
//
// The tool must be marked upstream: {caller: true} in airlock's manifest.
// The key is never sent: airlock derives it from the tool's natural key.
package client

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/airlockhq/airlock"
)

// Config configures a Client. A nil *Config means all defaults.
type Config struct {
	// URL of the airlock server. Default: AIRLOCK_URL, else
	// http://127.0.0.1:8420.
	URL string
	// Token is an agent's bearer token. Default: AIRLOCK_TOKEN.
	Token string
	// HTTPClient. Default: a client with a 60s timeout.
	HTTPClient *http.Client
}

// Client talks to one airlock server.
type Client struct {
	url   string
	token string
	http  *http.Client
}

// New makes a client.
func New(cfg *Config) *Client {
	if cfg == nil {
		cfg = &Config{}
	}
	c := &Client{
		url:   strings.TrimRight(cmp.Or(cfg.URL, os.Getenv("AIRLOCK_URL"), "http://127.0.0.1:8420"), "/"),
		token: cmp.Or(cfg.Token, os.Getenv("AIRLOCK_TOKEN")),
		http:  cfg.HTTPClient,
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: time.Minute}
	}
	return c
}

// Held is a claim this caller holds: it runs the work, renews the lease
// while it runs and completes the claim.
type Held struct {
	Claim        string    `json:"claim"`
	LeaseUntil   time.Time `json:"lease_until"`
	LeaseSeconds float64   `json:"lease_seconds"`
	// IdempotencyKey, for a tool that honours keys: pass it to the service.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Plan, for a plan's commit (NextCommit): the plan whose work this is.
	Plan *CommitPlan `json:"plan,omitempty"`
}

// CommitPlan is the plan a worker commits.
type CommitPlan struct {
	ID    string          `json:"id"`
	Tool  string          `json:"tool"`
	Args  json.RawMessage `json:"args"`
	RunID string          `json:"run_id,omitempty"`
}

type keyCtx struct{}

// IdempotencyKey is, inside a Func or a Handler of a tool that honours keys
// (honors_idempotency_key), airlock's key for the work, to pass to the
// service; work taken over after its first holder vanished then runs once
// there. Empty otherwise.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(keyCtx{}).(string)
	return k
}

// Outcome is what a holder reports.
type Outcome struct {
	// Kind is succeeded, failed, unknown or not_started.
	Kind string `json:"outcome"`
	// Result is the work's result (succeeded or failed).
	Result json.RawMessage `json:"result,omitempty"`
	// Error says what went wrong (failed, unknown, not_started).
	Error string `json:"error,omitempty"`
}

// Outcome kinds, by their wire names (the root package's vocabulary, which
// the server reads).
const (
	Succeeded  = airlock.ClaimOutcomeSucceeded
	Failed     = airlock.ClaimOutcomeFailed
	Unknown    = airlock.ClaimOutcomeUnknown
	NotStarted = airlock.ClaimOutcomeNotStarted
)

// ErrFailed marks an error of the work that means it definitively did not
// happen: wrap it (fmt.Errorf("card declined: %w", client.ErrFailed)) and
// the record is failed; a repeat gets the same failure. Any other error
// leaves the work in doubt.
var ErrFailed = errors.New("the work definitively did not happen")

// Claim asks for the work of tool with args: a Held claim when this caller
// must run it, else the answer (nothing to run). Errors are airlock's
// refusals (*airlock.Error: bad input, a tool not run by its caller, a run
// over its budget, airlock unreachable as store_unavailable).
func (c *Client) Claim(ctx context.Context, tool string, args any, runID string) (*Held, *airlock.Answer, error) {
	body := map[string]any{"tool": tool, "args": args}
	if runID != "" {
		body["run_id"] = runID
	}
	var raw json.RawMessage
	if err := c.post(ctx, "/v1/claims", body, &raw); err != nil {
		return nil, nil, err
	}
	var status struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &status); err != nil {
		return nil, nil, &airlock.Error{Code: airlock.CodeInternal, Err: err, Message: "airlock's answer is not what was expected: " + err.Error()}
	}
	if status.Status == "execute" {
		var h Held
		err := json.Unmarshal(raw, &h)
		return &h, nil, err
	}
	var a airlock.Answer
	err := json.Unmarshal(raw, &a)
	return nil, &a, err
}

// Renew extends a held claim's lease.
func (c *Client) Renew(ctx context.Context, claim string) (time.Time, error) {
	var out Held
	err := c.post(ctx, "/v1/claims/"+url.PathEscape(claim)+"/renew", nil, &out)
	return out.LeaseUntil, err
}

// Complete reports a held claim's outcome and returns the first call's
// answer. It is retried while airlock cannot be reached, for up to 30s: a
// completion retried after a lost reply gets the same answer.
func (c *Client) Complete(ctx context.Context, claim string, o Outcome) (*airlock.Answer, error) {
	var a airlock.Answer
	wait, deadline := 100*time.Millisecond, time.Now().Add(30*time.Second)
	for {
		err := c.post(ctx, "/v1/claims/"+url.PathEscape(claim)+"/complete", o, &a)
		if err == nil || airlock.ErrorCode(err) != airlock.CodeStoreUnavailable || time.Now().Add(wait).After(deadline) {
			return &a, err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, err
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// Func is work its caller runs: its result (any JSON value) or an error.
type Func func(ctx context.Context) (any, error)

// Do runs fn only when this caller holds the claim of tool's work with
// args, and answers as the gateway does: the first result, or for a repeat
// the first result with Repeat set — never an error. fn's error wrapping
// ErrFailed records a failure; any other leaves the work in doubt (never
// run again by airlock). The lease is renewed while fn runs. fn's context
// is not cancelled when the lease is lost: the completion is then refused,
// and the answer is in doubt.
func (c *Client) Do(ctx context.Context, tool string, args any, runID string, fn Func) (*airlock.Answer, error) {
	held, a, err := c.Claim(ctx, tool, args, runID)
	if err != nil || held == nil {
		return a, err
	}
	return c.execute(ctx, held, fn)
}

// execute runs a held claim's work, renewing its lease, and completes it.
func (c *Client) execute(ctx context.Context, held *Held, fn Func) (*airlock.Answer, error) {
	// The lease is renewed until the outcome is recorded: a completion
	// that is refused (too large) and sent again must still hold it.
	stop := c.renewing(held)
	defer stop()
	value, ferr := fn(context.WithValue(ctx, keyCtx{}, held.IdempotencyKey))
	var o Outcome
	var err error
	switch {
	case ferr == nil:
		o.Kind = Succeeded
		if o.Result, err = json.Marshal(value); err != nil {
			o.Result, _ = json.Marshal(map[string]string{"unserializable_result": fmt.Sprintf("%.1000v", value), "reason": err.Error()})
		}
	case errors.Is(ferr, ErrFailed):
		o.Kind, o.Error = Failed, ferr.Error()
	default:
		o.Kind, o.Error = Unknown, ferr.Error()
	}
	a, err := c.Complete(context.WithoutCancel(ctx), held.Claim, o)
	if airlock.ErrorCode(err) == airlock.CodeTooLarge && o.Result != nil {
		// The work ran; its result is too large to keep: keep the outcome.
		o.Result, _ = json.Marshal(map[string]any{"result_omitted": true, "reason": err.Error()})
		a, err = c.Complete(context.WithoutCancel(ctx), held.Claim, o)
	}
	var e *airlock.Error
	if errors.As(err, &e) && e.Code == airlock.CodeLeaseLost {
		// The lease ended before the outcome came: the record is in doubt.
		return &airlock.Answer{Status: airlock.StatusInDoubt, Message: e.Message}, nil
	}
	return a, err
}

// Plan proposes irreversible work (plan_TOOL): the answer carries the plan
// (its id and status). Rules, or a person, approve it; a Worker serving the
// tool then runs it once. Proposing the same work again answers with the
// same plan.
func (c *Client) Plan(ctx context.Context, tool string, args any, runID string) (*airlock.Answer, error) {
	body := map[string]any{"tool": "plan_" + tool, "args": args}
	if runID != "" {
		body["run_id"] = runID
	}
	var a airlock.Answer
	if err := c.post(ctx, "/v1/calls", body, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// NextCommit asks for the next approved plan of tools (irreversible tools
// run by their caller), waiting up to wait (at most 30s): the held claim of
// its work, with its Plan, or nil when there is none.
func (c *Client) NextCommit(ctx context.Context, tools []string, wait time.Duration) (*Held, error) {
	var out struct {
		Held
		Status string `json:"status"`
	}
	if err := c.post(ctx, "/v1/commits/next", map[string]any{"tools": tools, "wait_seconds": wait.Seconds()}, &out); err != nil {
		return nil, err
	}
	if out.Status != "execute" || out.Plan == nil {
		return nil, nil
	}
	return &out.Held, nil
}

// Handler runs an approved plan's work: args are the plan's arguments.
// Its error wrapping ErrFailed records a failure; any other leaves the plan
// in doubt. IdempotencyKey(ctx) is the key, for a tool that honours keys.
type Handler func(ctx context.Context, args json.RawMessage) (any, error)

// Worker runs the approved plans of irreversible tools run by their caller,
// in this process: each plan's work once, only after approval.
type Worker struct {
	c        *Client
	handlers map[string]Handler
	tools    []string
	// Wait is how long each poll for a commit waits. Default 20s.
	Wait time.Duration
}

// Worker makes a worker for handlers, by tool name.
func (c *Client) Worker(handlers map[string]Handler) *Worker {
	w := &Worker{c: c, handlers: handlers, Wait: 20 * time.Second}
	for name := range handlers {
		w.tools = append(w.tools, name)
	}
	return w
}

// RunOnce runs the next approved plan's work, waiting up to wait for one:
// its answer, or nil when there was none.
func (w *Worker) RunOnce(ctx context.Context, wait time.Duration) (*airlock.Answer, error) {
	held, err := w.c.NextCommit(ctx, w.tools, wait)
	if err != nil || held == nil {
		return nil, err
	}
	h := w.handlers[held.Plan.Tool]
	return w.c.execute(ctx, held, func(ctx context.Context) (any, error) { return h(ctx, held.Plan.Args) })
}

// Run runs plans until ctx ends; while airlock cannot be reached it waits
// and asks again.
func (w *Worker) Run(ctx context.Context) error {
	wait := 500 * time.Millisecond
	for ctx.Err() == nil {
		_, err := w.RunOnce(ctx, w.Wait)
		switch {
		case err == nil:
			wait = 500 * time.Millisecond
			continue
		case ctx.Err() != nil:
		case airlock.ErrorCode(err) != airlock.CodeStoreUnavailable:
			return err
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		wait = min(wait*2, 10*time.Second)
	}
	return nil
}

// renewing renews the claim about every third of its lease until stopped.
func (c *Client) renewing(h *Held) (stop func()) {
	every := max(time.Duration(h.LeaseSeconds*float64(time.Second))/3, 50*time.Millisecond)
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// lease_lost: the completion is told; unreachable: next time.
				_, _ = c.Renew(context.Background(), h.Claim)
			}
		}
	}()
	return func() { close(done); <-finished }
}

// post sends body as JSON and decodes a 200 answer into out; any other
// status is airlock's error, as an *airlock.Error.
func (c *Client) post(ctx context.Context, path string, body, out any) error {
	var buf []byte
	if body != nil {
		var err error
		if buf, err = json.Marshal(body); err != nil {
			return airlock.FieldErrorf(airlock.CodeInvalidArgument, "args", "not JSON: %v", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+path, bytes.NewReader(buf))
	if err != nil {
		return &airlock.Error{Code: airlock.CodeInvalidArgument, Message: err.Error(), Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return &airlock.Error{Code: airlock.CodeStoreUnavailable, Err: err,
			Message: fmt.Sprintf("airlock at %s could not be reached: %v; nothing was run", c.url, err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return &airlock.Error{Code: airlock.CodeStoreUnavailable, Err: err, Message: "reading airlock's answer: " + err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error *airlock.Error `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != nil && e.Error.Code != "" {
			return e.Error
		}
		return &airlock.Error{Code: airlock.CodeInternal, Message: fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, raw)}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &airlock.Error{Code: airlock.CodeInternal, Err: err, Message: "airlock's answer is not what was expected: " + err.Error()}
	}
	return nil
}
