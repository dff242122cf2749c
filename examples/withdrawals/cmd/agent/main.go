// Command agent simulates a model's MCP client working a queue of
// withdrawals the way models do: each call has a timeout, and a call that
// gets no answer in time is tried again. It prints one JSON line per
// attempt and a summary, so the incident can be replayed against a naive
// service or through airlock.
//
//	go run ./examples/withdrawals/cmd/agent --url http://127.0.0.1:8420/mcp --token $TOKEN \
//	    --tool add_note --records WD-24811,WD-24812 --timeout 2s --retries 3
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

type attempt struct {
	Record  string          `json:"record"`
	Attempt int             `json:"attempt"`
	Outcome string          `json:"outcome"` // answered | timeout | error
	Status  string          `json:"status,omitempty"`
	Repeat  bool            `json:"repeat,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   string          `json:"error,omitempty"`
	Millis  int64           `json:"ms"`
}

func main() {
	url := flag.String("url", "http://127.0.0.1:8420/mcp", "airlock's MCP endpoint")
	token := flag.String("token", os.Getenv("AIRLOCK_TOKEN"), "agent token; env AIRLOCK_TOKEN")
	tool := flag.String("tool", "add_note", "the tool to call for each record")
	records := flag.String("records", "WD-24811,WD-24812,WD-24813,WD-24814,WD-24815,WD-24817", "comma-separated record ids")
	text := flag.String("text", "reviewed by the overnight agent", "the note text (for add_note)")
	timeout := flag.Duration("timeout", 2*time.Second, "the client's timeout per call")
	retries := flag.Int("retries", 3, "tries after a timeout")
	flag.Parse()

	c := mcp.NewClient(&mcp.Implementation{Name: "agent-simulator", Version: "v1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{
		Endpoint: *url, HTTPClient: &http.Client{Transport: bearer{*token, http.DefaultTransport}}, MaxRetries: -1,
	}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
	defer s.Close()
	enc := json.NewEncoder(os.Stdout)
	answered := 0
	for _, rec := range strings.Split(*records, ",") {
		args := map[string]any{"record_id": rec}
		if *tool == "add_note" {
			args["text"] = *text
		}
		for i := 0; i <= *retries; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), *timeout)
			start := time.Now()
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: *tool, Arguments: args})
			cancel()
			a := attempt{Record: rec, Attempt: i + 1, Millis: time.Since(start).Milliseconds()}
			switch {
			case err != nil && ctx.Err() != nil:
				a.Outcome = "timeout"
			case err != nil:
				a.Outcome, a.Error = "error", err.Error()
			default:
				a.Outcome = "answered"
				b, _ := json.Marshal(res.StructuredContent)
				var sc struct {
					Status string          `json:"status"`
					Repeat bool            `json:"repeat"`
					Result json.RawMessage `json:"result"`
				}
				_ = json.Unmarshal(b, &sc)
				a.Status, a.Repeat, a.Result = sc.Status, sc.Repeat, sc.Result
			}
			_ = enc.Encode(a)
			if a.Outcome == "answered" && a.Status != "in_progress" {
				answered++
				break
			}
		}
	}
	fmt.Fprintf(os.Stderr, "agent: %d records answered\n", answered)
}
