package gateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlockhq/airlock"
)

// sessioner is an MCP upstream whose session the gateway can use for
// resources and prompts (upstream/mcp's Client).
type sessioner interface {
	Session(ctx context.Context) (*mcp.ClientSession, error)
}

// maxListed bounds what one upstream's list may add to airlock's answer
// (all its pages are read; the agent gets one page).
const maxListed = 10_000

// passSource is one MCP upstream whose resources or prompts the manifest
// offers to agents.
type passSource struct {
	name      string // the manifest's upstream name
	prefix    string // "" or the manifest's prefix, without the "_"
	resources bool
	prompts   bool
	up        sessioner
}

// rename is a name as agents see it.
func (s *passSource) rename(name string) string {
	if s.prefix == "" {
		return name
	}
	return s.prefix + "_" + name
}

// passThrough serves resources/* and prompts/* from the opted-in upstreams:
// read-only by nature, so no key, no record, no audit event.
type passThrough struct {
	sources []*passSource // in the order of the upstreams' names
	log     func(msg string, args ...any)

	mu    sync.Mutex
	byURI map[string]*passSource // the upstream that listed a resource, by the latest list
}

func newPassThrough(m *airlock.Manifest, ups map[string]any, log func(string, ...any)) *passThrough {
	p := &passThrough{log: log, byURI: map[string]*passSource{}}
	names := make([]string, 0, len(m.Upstreams))
	for n := range m.Upstreams {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		u := m.Upstreams[n]
		if u.MCP == nil || (!u.MCP.Resources && !u.MCP.Prompts) {
			continue
		}
		s, ok := ups[n].(sessioner)
		if !ok {
			continue
		}
		p.sources = append(p.sources, &passSource{name: n, prefix: u.MCP.Prefix, resources: u.MCP.Resources, prompts: u.MCP.Prompts, up: s})
	}
	return p
}

func (p *passThrough) hasResources() bool {
	return slices.ContainsFunc(p.sources, func(s *passSource) bool { return s.resources })
}

func (p *passThrough) hasPrompts() bool {
	return slices.ContainsFunc(p.sources, func(s *passSource) bool { return s.prompts })
}

// handle answers the methods it serves; ok false: not one of them (or
// no upstream offers that kind), so the SDK answers as it would.
func (p *passThrough) handle(ctx context.Context, method string, req mcp.Request) (res mcp.Result, ok bool, err error) {
	switch {
	case strings.HasPrefix(method, "resources/") && p.hasResources():
	case strings.HasPrefix(method, "prompts/") && p.hasPrompts():
	default:
		return nil, false, nil
	}
	switch method {
	case "resources/list":
		res, err = p.listResources(ctx)
	case "resources/templates/list":
		res, err = p.listTemplates(ctx)
	case "resources/read":
		r, _ := req.(*mcp.ReadResourceRequest)
		if r == nil || r.Params == nil || r.Params.URI == "" {
			return nil, true, invalidParams("params.uri: required: the resource's URI, as resources/list gave it")
		}
		res, err = p.read(ctx, r.Params)
	case "prompts/list":
		res, err = p.listPrompts(ctx)
	case "prompts/get":
		r, _ := req.(*mcp.GetPromptRequest)
		if r == nil || r.Params == nil || r.Params.Name == "" {
			return nil, true, invalidParams("params.name: required: the prompt's name, as prompts/list gave it")
		}
		res, err = p.getPrompt(ctx, r.Params)
	default: // subscribe, unsubscribe: not passed through
		return nil, false, nil
	}
	return res, true, err
}

func invalidParams(msg string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: msg}
}

// each runs f on every source that offers what want says, in order; an
// upstream that cannot be reached is logged and left out of the list, so
// one broken upstream does not hide the others.
func (p *passThrough) each(ctx context.Context, want func(*passSource) bool, f func(*passSource, *mcp.ClientSession) error) error {
	var firstErr error
	reached := 0
	for _, s := range p.sources {
		if !want(s) {
			continue
		}
		cs, err := s.up.Session(ctx)
		if err == nil {
			err = f(s, cs)
		}
		if err != nil {
			p.log("airlock: MCP upstream could not be listed", "upstream", s.name, "err", err)
			if firstErr == nil {
				firstErr = fmt.Errorf("upstream %s: %w", s.name, err)
			}
			continue
		}
		reached++
	}
	if reached == 0 && firstErr != nil {
		return firstErr
	}
	return nil
}

func isResources(s *passSource) bool { return s.resources }
func isPrompts(s *passSource) bool   { return s.prompts }

func (p *passThrough) listResources(ctx context.Context) (*mcp.ListResourcesResult, error) {
	out := &mcp.ListResourcesResult{Resources: []*mcp.Resource{}}
	seen := map[string]string{} // URI → upstream
	byURI := map[string]*passSource{}
	err := p.each(ctx, isResources, func(s *passSource, cs *mcp.ClientSession) error {
		n := 0
		for r, err := range cs.Resources(ctx, nil) {
			if err != nil {
				return err
			}
			if n++; n > maxListed {
				break
			}
			if first, dup := seen[r.URI]; dup {
				p.log("airlock: resource offered by two upstreams; the first is kept", "uri", r.URI, "kept", first, "hidden", s.name)
				continue
			}
			seen[r.URI] = s.name
			byURI[r.URI] = s
			c := *r
			c.Name = s.rename(r.Name)
			out.Resources = append(out.Resources, &c)
		}
		return nil
	})
	// The latest list says where each URI lives; older entries go with it.
	p.mu.Lock()
	p.byURI = byURI
	p.mu.Unlock()
	return out, err
}

func (p *passThrough) listTemplates(ctx context.Context) (*mcp.ListResourceTemplatesResult, error) {
	out := &mcp.ListResourceTemplatesResult{ResourceTemplates: []*mcp.ResourceTemplate{}}
	err := p.each(ctx, isResources, func(s *passSource, cs *mcp.ClientSession) error {
		n := 0
		for r, err := range cs.ResourceTemplates(ctx, nil) {
			if err != nil {
				return err
			}
			if n++; n > maxListed {
				break
			}
			c := *r
			c.Name = s.rename(r.Name)
			out.ResourceTemplates = append(out.ResourceTemplates, &c)
		}
		return nil
	})
	return out, err
}

// read asks the upstream that listed the URI, else each in turn (a URI
// from a template, or read before any list) until one has it.
func (p *passThrough) read(ctx context.Context, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	p.mu.Lock()
	known := p.byURI[params.URI]
	p.mu.Unlock()
	order := p.sources
	if known != nil {
		order = append([]*passSource{known}, slices.DeleteFunc(slices.Clone(p.sources), func(s *passSource) bool { return s == known })...)
	}
	var lastErr error
	for _, s := range order {
		if !s.resources {
			continue
		}
		cs, err := s.up.Session(ctx)
		if err != nil {
			lastErr = fmt.Errorf("upstream %s: %w", s.name, err)
			continue
		}
		res, err := cs.ReadResource(ctx, params)
		if err == nil {
			return res, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func (p *passThrough) listPrompts(ctx context.Context) (*mcp.ListPromptsResult, error) {
	out := &mcp.ListPromptsResult{Prompts: []*mcp.Prompt{}}
	seen := map[string]string{}
	err := p.each(ctx, isPrompts, func(s *passSource, cs *mcp.ClientSession) error {
		n := 0
		for pr, err := range cs.Prompts(ctx, nil) {
			if err != nil {
				return err
			}
			if n++; n > maxListed {
				break
			}
			name := s.rename(pr.Name)
			if first, dup := seen[name]; dup {
				p.log("airlock: prompt name offered by two upstreams; the first is kept (give the other a prefix)", "prompt", name, "kept", first, "hidden", s.name)
				continue
			}
			seen[name] = s.name
			c := *pr
			c.Name = name
			out.Prompts = append(out.Prompts, &c)
		}
		return nil
	})
	return out, err
}

// getPrompt finds the upstream by the name's prefix (prefixed upstreams
// first, then those without one, in order).
func (p *passThrough) getPrompt(ctx context.Context, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	var order []*passSource
	for _, s := range p.sources {
		if s.prompts && s.prefix != "" && strings.HasPrefix(params.Name, s.prefix+"_") {
			order = append(order, s)
		}
	}
	for _, s := range p.sources {
		if s.prompts && s.prefix == "" {
			order = append(order, s)
		}
	}
	if len(order) == 0 {
		return nil, invalidParams(fmt.Sprintf("params.name: no prompt named %q; prompts/list gives the names", params.Name))
	}
	var lastErr error
	for _, s := range order {
		cs, err := s.up.Session(ctx)
		if err != nil {
			lastErr = fmt.Errorf("upstream %s: %w", s.name, err)
			continue
		}
		up := *params
		if s.prefix != "" {
			up.Name = strings.TrimPrefix(params.Name, s.prefix+"_")
		}
		res, err := cs.GetPrompt(ctx, &up)
		if err == nil {
			return res, nil
		}
		lastErr = err
	}
	return nil, lastErr
}
