// Command mcpgo drives airlock with mark3labs/mcp-go as its users would,
// on its defaults — it lists the tools, calls a write twice, proposes a
// plan, reads the resource notes://all and gets the prompt summarize_notes
// — and prints what it saw as one JSON object for the interop test
// (cmd/airlock, TestE2EInteropClients). It is built against
// two releases: go.mod (the latest) and go.v1.2.1.mod (`go build
// -modfile=go.v1.2.1.mod`).
//
//	mcpgo http URL TOKEN RECORD
//	mcpgo stdio RECORD COMMAND [ARG...]   (the token comes from the environment)
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/client/transport"
	"github.com/mark3labs/mcp-go/mcp"
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
		if t, ok := content.(mcp.TextContent); ok {
			c.Text += t.Text
		}
	}
	return c
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
		return fmt.Errorf("usage: mcpgo http URL TOKEN RECORD | mcpgo stdio RECORD COMMAND [ARG...]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var c *client.Client
	var record string
	var err error
	switch os.Args[1] {
	case "http":
		if len(os.Args) != 5 {
			return fmt.Errorf("usage: mcpgo http URL TOKEN RECORD")
		}
		record = os.Args[4]
		c, err = client.NewStreamableHttpClient(os.Args[2], transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + os.Args[3]}))
		if err == nil {
			err = c.Start(ctx)
		}
	case "stdio":
		if len(os.Args) < 4 {
			return fmt.Errorf("usage: mcpgo stdio RECORD COMMAND [ARG...]")
		}
		record = os.Args[2]
		c, err = client.NewStdioMCPClient(os.Args[3], os.Environ(), os.Args[4:]...)
	default:
		return fmt.Errorf("unknown transport %q", os.Args[1])
	}
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer c.Close()
	// As the library's own examples initialize.
	init, err := c.Initialize(ctx, mcp.InitializeRequest{Params: mcp.InitializeParams{
		ProtocolVersion: mcp.LATEST_PROTOCOL_VERSION,
		ClientInfo:      mcp.Implementation{Name: "interop-mcp-go", Version: "1"},
	}})
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	r.Protocol = init.ProtocolVersion
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		return fmt.Errorf("tools/list: %w", err)
	}
	for _, t := range tools.Tools {
		b, _ := json.Marshal(t)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		r.Tools = append(r.Tools, map[string]any{"name": t.Name, "annotations": m["annotations"]})
	}
	for range 2 {
		res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "add_note",
			Arguments: map[string]any{"record_id": record, "text": "checked by mcp-go"}}})
		if err != nil {
			return fmt.Errorf("tools/call add_note: %w", err)
		}
		r.Calls = append(r.Calls, callOf(res))
	}
	res, err := c.CallTool(ctx, mcp.CallToolRequest{Params: mcp.CallToolParams{Name: "plan_approve_withdrawal",
		Arguments: map[string]any{"record_id": record}}})
	if err != nil {
		return fmt.Errorf("tools/call plan_approve_withdrawal: %w", err)
	}
	plan := callOf(res)
	r.Plan = &plan
	read, err := c.ReadResource(ctx, mcp.ReadResourceRequest{Params: mcp.ReadResourceParams{URI: "notes://all"}})
	if err != nil {
		return fmt.Errorf("resources/read: %w", err)
	}
	for _, content := range read.Contents {
		if t, ok := content.(mcp.TextResourceContents); ok {
			r.Resource += t.Text
		}
	}
	prompt, err := c.GetPrompt(ctx, mcp.GetPromptRequest{Params: mcp.GetPromptParams{Name: "summarize_notes", Arguments: map[string]string{"record_id": record}}})
	if err != nil {
		return fmt.Errorf("prompts/get: %w", err)
	}
	for _, m := range prompt.Messages {
		if t, ok := m.Content.(mcp.TextContent); ok {
			r.Prompt += t.Text
		}
	}
	return nil
}
