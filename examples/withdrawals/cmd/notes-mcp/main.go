// Command notes-mcp is a small MCP server for the example and the tests: a
// notes service with add_note (a write) and list_notes (a read), the
// resource notes://all (every note, as JSON) and the prompt
// summarize_notes (record_id). It serves stdio by default, or streamable
// HTTP with --http ADDR (with sessions, as most MCP servers serve today).
// It counts every add_note it executes and remembers the idempotency key
// airlock sent.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type note struct {
	RecordID string `json:"record_id"`
	Text     string `json:"text"`
	Key      string `json:"key,omitempty"`
}

type addArgs struct {
	RecordID string `json:"record_id" jsonschema:"the withdrawal's id"`
	Text     string `json:"text" jsonschema:"the note"`
}

type listArgs struct {
	RecordID string `json:"record_id,omitempty" jsonschema:"only this record's notes"`
}

type listResult struct {
	Notes []note `json:"notes"`
	Count int    `json:"count"`
}

func main() {
	httpAddr := flag.String("http", "", "serve streamable HTTP on this address instead of stdio")
	latency := flag.Duration("latency", 0, "latency of add_note")
	flag.Parse()

	var mu sync.Mutex
	var notes []note
	s := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "add_note", Description: "Add a note to a record."},
		func(ctx context.Context, req *mcp.CallToolRequest, in addArgs) (*mcp.CallToolResult, note, error) {
			if in.Text == "" {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "text is required"}}}, note{}, nil
			}
			time.Sleep(*latency)
			key, _ := req.Params.Meta["io.airlock/idempotency-key"].(string)
			n := note{RecordID: in.RecordID, Text: in.Text, Key: key}
			mu.Lock()
			notes = append(notes, n)
			mu.Unlock()
			return nil, n, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "list_notes", Description: "List the notes."},
		func(ctx context.Context, req *mcp.CallToolRequest, in listArgs) (*mcp.CallToolResult, listResult, error) {
			mu.Lock()
			defer mu.Unlock()
			out := listResult{Notes: []note{}}
			for _, n := range notes {
				if in.RecordID == "" || n.RecordID == in.RecordID {
					out.Notes = append(out.Notes, n)
				}
			}
			out.Count = len(out.Notes)
			return nil, out, nil
		})

	s.AddResource(&mcp.Resource{URI: "notes://all", Name: "notes", Description: "Every note, as JSON.", MIMEType: "application/json"},
		func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			mu.Lock()
			out := listResult{Notes: append([]note{}, notes...), Count: len(notes)}
			mu.Unlock()
			b, err := json.Marshal(out)
			if err != nil {
				return nil, err
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, MIMEType: "application/json", Text: string(b)}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "summarize_notes", Description: "Ask for a summary of a record's notes.",
		Arguments: []*mcp.PromptArgument{{Name: "record_id", Description: "the withdrawal's id", Required: true}}},
		func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Description: "A summary of a record's notes", Messages: []*mcp.PromptMessage{{Role: "user",
				Content: &mcp.TextContent{Text: fmt.Sprintf("Summarize the notes of record %s.", req.Params.Arguments["record_id"])}}}}, nil
		})

	if *httpAddr == "" {
		if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, "notes-mcp:", err)
			os.Exit(1)
		}
		return
	}
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "notes-mcp:", err)
		os.Exit(1)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	_ = srv.Serve(ln)
}
