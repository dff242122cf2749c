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

// Outcome kinds.
const (
	Succeeded  = "succeeded"
	Failed     = "failed"
	Unknown    = "unknown"
	NotStarted = "not_started"
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
	var out struct {
		Held
		airlock.Answer
		Status string `json:"status"`
	}
	if err := c.post(ctx, "/v1/claims", body, &out); err != nil {
		return nil, nil, err
	}
	if out.Status == "execute" {
		return &out.Held, nil, nil
	}
	out.Answer.Status = airlock.Status(out.Status)
	return nil, &out.Answer, nil
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
	stop := c.renewing(held)
	value, ferr := fn(ctx)
	stop()
	var o Outcome
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
	a, err = c.Complete(context.WithoutCancel(ctx), held.Claim, o)
	var e *airlock.Error
	if errors.As(err, &e) && e.Code == airlock.CodeLeaseLost {
		// The lease ended before the outcome came: the record is in doubt.
		return &airlock.Answer{Status: airlock.StatusInDoubt, Message: e.Message}, nil
	}
	return a, err
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
