// Command gosdk drives airlock with the official Go SDK
// (github.com/modelcontextprotocol/go-sdk, the version airlock's go.mod
// pins) as its users would, on its defaults — over HTTP that is the SDK's
// newest revision, 2026-07-28, without a session: it lists the tools,
// calls a write twice, proposes a plan, reads the resource notes://all and
// gets the prompt summarize_notes — and prints what it saw as one JSON
// object for the interop test (cmd/airlock, TestE2EInteropClients).
//
//	gosdk http URL TOKEN RECORD
//	gosdk stdio RECORD COMMAND [ARG...]   (the token comes from the environment)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type report struct {
	Protocol string           `json:"protocol"`
	Tools    []map[string]any `json:"tools"`
	Calls    []call           `json:"calls"`
	Plan     *call            `json:"plan"`
	Resource string           `json:"resource"` // notes://all's text
	Prompt   string           `json:"prompt"`   // summarize_notes's text
	Error    string           `json:"error,omitempty"`
}

// call is a tool's result as the library hands it over.
type call struct {
	Structured any    `json:"structured"`
	Text       string `json:"text"`
}

func callOf(res *mcp.CallToolResult) call {
	c := call{Structured: res.StructuredContent}
	for _, content := range res.Content {
		if t, ok := content.(*mcp.TextContent); ok {
			c.Text += t.Text
		}
	}
	return c
}

// bearer adds the agent's token to every request.
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

func main() {
	var r report
	if err := run(&r); err != nil {
		r.Error = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func run(r *report) error {
	if len(os.Args) < 3 {
		return fmt.Errorf("usage: gosdk http URL TOKEN RECORD | gosdk stdio RECORD COMMAND [ARG...]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var transport mcp.Transport
	var record string
	switch os.Args[1] {
	case "http":
		if len(os.Args) != 5 {
			return fmt.Errorf("usage: gosdk http URL TOKEN RECORD")
		}
		record = os.Args[4]
		transport = &mcp.StreamableClientTransport{Endpoint: os.Args[2], HTTPClient: &http.Client{Transport: bearer(os.Args[3])}}
	case "stdio":
		if len(os.Args) < 4 {
			return fmt.Errorf("usage: gosdk stdio RECORD COMMAND [ARG...]")
		}
		record = os.Args[2]
		transport = &mcp.CommandTransport{Command: exec.Command(os.Args[3], os.Args[4:]...)}
	default:
		return fmt.Errorf("unknown transport %q", os.Args[1])
	}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "interop-go-sdk", Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer s.Close()
	if ip := s.InitializeResult(); ip != nil {
		r.Protocol = ip.ProtocolVersion
	}
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	for _, t := range tools.Tools {
		b, _ := json.Marshal(t.Annotations)
		var a map[string]any
		_ = json.Unmarshal(b, &a)
		r.Tools = append(r.Tools, map[string]any{"name": t.Name, "annotations": a})
	}
	for range 2 {
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"record_id": record, "text": "checked by the go-sdk"}})
		if err != nil {
			return fmt.Errorf("tools/call add_note: %w", err)
		}
		r.Calls = append(r.Calls, callOf(res))
	}
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "plan_approve_withdrawal", Arguments: map[string]any{"record_id": record}})
	if err != nil {
		return fmt.Errorf("tools/call plan_approve_withdrawal: %w", err)
	}
	plan := callOf(res)
	r.Plan = &plan
	read, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "notes://all"})
	if err != nil {
		return fmt.Errorf("resources/read: %w", err)
	}
	for _, c := range read.Contents {
		r.Resource += c.Text
	}
	prompt, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "summarize_notes", Arguments: map[string]string{"record_id": record}})
	if err != nil {
		return fmt.Errorf("prompts/get: %w", err)
	}
	for _, m := range prompt.Messages {
		if t, ok := m.Content.(*mcp.TextContent); ok {
			r.Prompt += t.Text
		}
	}
	return nil
}
