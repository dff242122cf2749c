// Package httpjson is the upstream for HTTP JSON services: each call is a
// POST of the arguments to base URL + the tool's path, carrying the
// derived key in the Idempotency-Key header. The response's status decides
// the outcome:
//
//   - 2xx: succeeded; the JSON body is the result.
//   - 4xx other than 408, 425 and 429: a definitive failure (the service
//     refused the request; it did not happen).
//   - 408, 425, 429, 5xx, a timeout or a broken connection after the
//     request was written: outcome unknown.
//   - a connection that could not be made, or a request that was never
//     written: not sent.
package httpjson

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/airlockhq/airlock"
	"github.com/airlockhq/airlock/upstream"
)

// Config configures a Client. A nil *Config means all defaults.
type Config struct {
	// HTTPClient sends the requests. Default: a client with its own
	// transport (keep-alives on, 64 idle connections per host).
	HTTPClient *http.Client
	// MaxResponse bounds a response body airlock reads and keeps (manifest
	// limits.upstream_answer_bytes). Default upstream.DefaultMaxAnswer, 4 MiB.
	MaxResponse int64
	// Header is added to every request (for example an API key).
	Header http.Header
}

// Client calls one HTTP JSON upstream.
type Client struct {
	base   string
	client *http.Client
	max    int64
	header http.Header
}

var _ upstream.Caller = (*Client)(nil)

// New returns a client for the service at base (http://host:port).
func New(base string, cfg *Config) *Client {
	if cfg == nil {
		cfg = &Config{}
	}
	c := &Client{base: strings.TrimSuffix(base, "/"), client: cfg.HTTPClient, max: cfg.MaxResponse, header: http.Header{}}
	for k, vs := range cfg.Header {
		for _, v := range vs {
			c.header.Add(k, v) // canonical names, as Call copies them
		}
	}
	if c.client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		t.MaxIdleConns = 256
		c.client = &http.Client{Transport: t}
	}
	if c.max <= 0 {
		c.max = upstream.DefaultMaxAnswer
	}
	return c
}

// Close releases idle connections.
func (c *Client) Close() error {
	c.client.CloseIdleConnections()
	return nil
}

// Call implements upstream.Caller.
func (c *Client) Call(ctx context.Context, req *upstream.Request) airlock.Outcome {
	path := ""
	if req.Tool.Upstream != nil {
		path = req.Tool.Upstream.Path
	}
	body := req.Args
	if len(body) == 0 {
		body = []byte("{}")
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) }}
	hreq, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: err}
	}
	// The header is built in place, its constant values shared (clipped,
	// so that an append never writes into them): one map, no
	// canonicalizing, for every call.
	h := make(http.Header, len(c.header)+5)
	for k, vs := range c.header {
		h[k] = slices.Clip(vs)
	}
	h["Content-Type"], h["Accept"] = jsonOnly, jsonOnly
	if req.Key != "" {
		h["Idempotency-Key"] = []string{req.Key}
	}
	if req.TraceParent != "" {
		h["Traceparent"] = []string{req.TraceParent}
		if req.TraceState != "" {
			h["Tracestate"] = []string{req.TraceState}
		}
	}
	hreq.Header = h
	// No body to send again: net/http resends a request that carries an
	// Idempotency-Key when a reused connection fails after sending it,
	// which runs the work twice at a service that does not honour keys.
	// airlock alone decides whether a call is sent again (the guard's
	// retries, for services that honour keys).
	hreq.GetBody = nil
	resp, err := c.client.Do(hreq)
	if err != nil {
		if !wrote.Load() && neverSent(err) {
			return airlock.Outcome{Kind: airlock.OutcomeNotSent, Err: err}
		}
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: err}
	}
	defer resp.Body.Close()
	raw, err := readBody(resp, c.max)
	if err != nil {
		// The service answered but the body broke off: it may have acted.
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("reading the response: %w", err)}
	}
	if int64(len(raw)) > c.max {
		// The status says what happened; only the answer is too large to
		// keep. A 2xx is a success whose result says so, an error status
		// is classified as any other with the start of its body.
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: upstream.OmittedAnswer(c.max, int64(len(raw)))}
		}
		raw = raw[:min(len(raw), 1024)]
	}
	return classify(resp.StatusCode, raw)
}

// jsonOnly is the value of Content-Type and Accept.
var jsonOnly = []string{"application/json"}[:1:1]

// readBody reads at most max+1 bytes of a response's body: into a buffer
// of its length when it says one, else growing as it comes.
func readBody(resp *http.Response, max int64) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= max {
		raw := make([]byte, n+1) // one more, to see the body end where it said
		got, err := io.ReadFull(resp.Body, raw)
		switch {
		case err == nil:
			// Longer than it said; read on, up to the limit.
			rest, err := io.ReadAll(io.LimitReader(resp.Body, max-n))
			return append(raw, rest...), err
		case (err == io.EOF || err == io.ErrUnexpectedEOF) && int64(got) == n:
			return raw[:n], nil
		case err == io.EOF:
			return raw[:got], io.ErrUnexpectedEOF // shorter than it said
		default:
			return raw[:got], err
		}
	}
	return io.ReadAll(io.LimitReader(resp.Body, max+1))
}

func classify(status int, raw []byte) airlock.Outcome {
	switch {
	case status >= 200 && status < 300:
		return airlock.Outcome{Kind: airlock.OutcomeSucceeded, Result: asJSON(raw)}
	case status == http.StatusRequestTimeout, status == http.StatusTooEarly, status == http.StatusTooManyRequests, status >= 500:
		return airlock.Outcome{Kind: airlock.OutcomeUnknown, Err: fmt.Errorf("upstream answered %d: %s", status, snippet(raw))}
	default:
		res, _ := json.Marshal(map[string]any{"status": status, "error": asJSON(raw)})
		return airlock.Outcome{Kind: airlock.OutcomeFailed, Result: res}
	}
}

// asJSON returns the body if it is JSON, else the body as a JSON string.
func asJSON(raw []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(raw)
	if len(trimmed) == 0 {
		return json.RawMessage(`null`)
	}
	if json.Valid(trimmed) {
		return json.RawMessage(trimmed)
	}
	s, _ := json.Marshal(string(raw))
	return s
}

func snippet(raw []byte) string {
	return airlock.Shorten(strings.TrimSpace(string(raw)), 200)
}

// neverSent reports whether an error means the request cannot have reached
// the service: the connection was never made.
func neverSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		return true
	}
	var tlsErr *tls.CertificateVerificationError
	return errors.As(err, &tlsErr)
}
