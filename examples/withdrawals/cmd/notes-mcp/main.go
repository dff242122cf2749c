// Command notes-mcp is a small MCP server for the example and the tests: a
// notes service with add_note (a write) and list_notes (a read). It serves
// stdio by default, or streamable HTTP with --http ADDR. It counts every
// add_note it executes and remembers the idempotency key airlock sent.
package main

import (
	"context"
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
