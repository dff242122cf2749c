package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

const instructions = `Tools that change something are protected by airlock: calling one again with the same arguments returns the first call's result (marked "repeat": true) instead of doing the work twice. If an answer says the work is in progress or in doubt, do not redo it and do not look for another way to do it.`

// MCPServer is the MCP server, for stdio (`airlock mcp`).
func (g *Gateway) MCPServer() *mcp.Server { return g.mcp }

func ptr[T any](v T) *T { return &v }

func (g *Gateway) newMCPServer(version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "airlock", Version: version}, &mcp.ServerOptions{
		Instructions: instructions,
		Logger:       g.log,
	})
	for _, t := range g.m.Tools {
		if t.Kind == airlock.KindIrreversible {
			continue // proposed as plans, never called as themselves
		}
		if _, ok := g.callers[t.Name]; !ok {
			continue
		}
		s.AddTool(&mcp.Tool{
			Name:        t.Name,
			Description: describeForModel(t),
			InputSchema: g.schemas[t.Name].jsonSchemaJSON(),
			Annotations: annotations(t),
		}, g.mcpHandler(t))
	}
	return s
}

// annotations follow the manifest: reads are read-only; writes change
// something but are idempotent under airlock (a repeat returns the first
// result); every tool with an upstream reaches outside.
func annotations(t *airlock.Tool) *mcp.ToolAnnotations {
	a := &mcp.ToolAnnotations{Title: t.Name, OpenWorldHint: ptr(t.Upstream != nil)}
	switch t.Kind {
	case airlock.KindRead:
		a.ReadOnlyHint, a.IdempotentHint, a.DestructiveHint = true, true, ptr(false)
	case airlock.KindWrite:
		a.IdempotentHint = true
		a.DestructiveHint = ptr(!strings.HasPrefix(strings.ToLower(strings.TrimSpace(t.Answers.Undo)), "yes"))
	}
	return a
}

func describeForModel(t *airlock.Tool) string {
	d := t.Description
	if t.Kind == airlock.KindWrite {
		d += " Calling it again with the same arguments returns the first result; it is never done twice."
	}
	return strings.TrimSpace(d)
}

func (g *Gateway) mcpHandler(t *airlock.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		run := runFromMeta(req.Params.Meta)
		if run == "" && req.Extra != nil && req.Extra.Header != nil {
			run = req.Extra.Header.Get(RunHeader)
		}
		if run == "" && req.Session != nil {
			run = req.Session.ID()
		}
		if run == "" {
			run = g.run
		}
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage(`{}`)
		}
		a, err := g.Call(ctx, &CallRequest{Tool: t.Name, Args: args, RunID: run})
		if err != nil {
			e := asError(err)
			if e.Code == airlock.CodeInternal || e.Code == airlock.CodeStoreUnavailable {
				g.log.Error("airlock: MCP call failed", "tool", t.Name, "err", err)
			}
			return &mcp.CallToolResult{
				IsError:           true,
				Content:           []mcp.Content{&mcp.TextContent{Text: e.Message}},
				StructuredContent: errorBody{e},
			}, nil
		}
		res := &mcp.CallToolResult{
			IsError:           a.Status == airlock.StatusFailed,
			Content:           []mcp.Content{&mcp.TextContent{Text: renderText(t, a)}},
			StructuredContent: AnswerObject(a),
		}
		if a.Repeat {
			res.Meta = mcp.Meta{MetaRepeat: true}
		}
		return res, nil
	}
}

func runFromMeta(m mcp.Meta) string {
	if m == nil {
		return ""
	}
	s, _ := m[MetaRun].(string)
	return s
}

// renderText is the answer in words for the model, with the result.
func renderText(t *airlock.Tool, a *airlock.Answer) string {
	var b strings.Builder
	switch a.Status {
	case airlock.StatusSucceeded:
		if a.Repeat {
			b.WriteString("This was already done by an earlier identical call; this is that call's result. It has not been done again, and must not be.")
		} else {
			b.WriteString("Done.")
		}
	case airlock.StatusFailed:
		if a.Repeat {
			b.WriteString("An earlier identical call was refused by the service; this is that refusal. It was not tried again.")
		} else {
			b.WriteString("The service refused the request; nothing was done.")
		}
	case airlock.StatusInProgress, airlock.StatusInDoubt:
		b.WriteString(a.Message)
	}
	if a.Conflict != nil {
		b.WriteString(" ")
		b.WriteString(a.Conflict.Message)
		b.WriteString(".")
	}
	if a.Result != nil {
		fmt.Fprintf(&b, "\nResult: %s", a.Result)
	}
	return b.String()
}
