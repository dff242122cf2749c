package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/manifest"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessioner is an MCP upstream whose session the gateway can use for
// resources and prompts (upstream/mcp's Client).
type sessioner interface {
	Session(ctx context.Context) (*mcp.ClientSession, error)
	// OnResourceUpdated sets what is told of the server's
	// notifications/resources/updated (URIs airlock subscribed to).
	OnResourceUpdated(func(uri string))
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

	// subs are the agents' resource subscriptions, by URI: the upstream
	// that took the subscription and the sessions that asked for it. The
	// upstream is unsubscribed when the last session unsubscribes or ends.
	subsMu  sync.Mutex
	subs    map[string]*subscription
	watched map[*mcp.ServerSession]bool
}

type subscription struct {
	source   *passSource
	sessions map[*mcp.ServerSession]bool
}

func newPassThrough(m *manifest.Manifest, ups map[string]any, log func(string, ...any)) *passThrough {
	p := &passThrough{log: log, byURI: map[string]*passSource{}, subs: map[string]*subscription{}, watched: map[*mcp.ServerSession]bool{}}
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
	default: // subscribe and unsubscribe: the SDK keeps the sessions' subscriptions and calls subscribe
		return nil, false, nil
	}
	if err == nil {
		cacheHints(res)
		ss, _ := req.GetSession().(*mcp.ServerSession)
		res = ownResult(res, newRevision(ss))
	}
	return res, true, err
}

// ownResult is an upstream's result as airlock answers it, in the agent's
// revision whatever the upstream's: without the upstream's serverInfo
// (the server the agent talks to is airlock; on 2026-07-28 the SDK names
// it in its place) and, on 2026-07-28, with a resultType, which an
// upstream on a session revision never sends and the SDK sets only on
// its own handlers' reads and prompts (clients refuse a result without
// it).
func ownResult(res mcp.Result, modern bool) mcp.Result {
	switch r := res.(type) {
	case *mcp.ReadResourceResult:
		r.Meta = dropServerInfo(r.Meta)
		if modern && !r.NeedsInput() {
			return withResultType(r, "complete")
		}
	case *mcp.GetPromptResult:
		r.Meta = dropServerInfo(r.Meta)
		if modern && !r.NeedsInput() {
			return withResultType(r, "complete")
		}
	case *mcp.CompleteResult:
		r.Meta = dropServerInfo(r.Meta)
	}
	return res
}

// dropServerInfo is an upstream's _meta without the upstream's name for
// itself.
func dropServerInfo(m mcp.Meta) mcp.Meta {
	if _, ok := m[mcp.MetaKeyServerInfo]; !ok {
		return m
	}
	out := maps.Clone(m)
	delete(out, mcp.MetaKeyServerInfo)
	if len(out) == 0 {
		return nil
	}
	return out
}

// withResultType is res saying resultType rt. The SDK keeps the field
// unexported and reads it from JSON, so it is set through JSON (only
// reads and prompts passed through pay for it); res as it is if that
// fails, which a result the SDK decoded cannot.
func withResultType[T any, P interface {
	*T
	mcp.Result
}](res P, rt string) mcp.Result {
	b, err := json.Marshal(res)
	if err != nil {
		return res
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return res
	}
	fields["resultType"], _ = json.Marshal(rt)
	if b, err = json.Marshal(fields); err != nil {
		return res
	}
	out := P(new(T))
	if err := json.Unmarshal(b, out); err != nil {
		return res
	}
	return out
}

// forwardMeta is the agent's _meta as it may go on to an upstream: without
// the io.modelcontextprotocol/ fields, which describe the agent's own
// request (a 2026-07-28 revision, its capabilities) and not the upstream
// session's, where the SDK would send them as that session's revision.
func forwardMeta(m mcp.Meta) mcp.Meta {
	var out mcp.Meta
	for k, v := range m {
		if strings.HasPrefix(k, "io.modelcontextprotocol/") {
			continue
		}
		if out == nil {
			out = mcp.Meta{}
		}
		out[k] = v
	}
	return out
}

// cacheHints fills what 2026-07-28 asks of a result that may be cached
// and that airlock made itself (the SDK fills its own handlers'): lists
// gathered from several upstreams, and reads whose upstream said nothing,
// are the requesting agent's to keep and stale at once.
func cacheHints(res mcp.Result) {
	var c *mcp.Cacheable
	switch r := res.(type) {
	case *mcp.ListResourcesResult:
		c = &r.Cacheable
	case *mcp.ListResourceTemplatesResult:
		c = &r.Cacheable
	case *mcp.ListPromptsResult:
		c = &r.Cacheable
	case *mcp.ReadResourceResult:
		c = &r.Cacheable
	default:
		return
	}
	if c.CacheScope == "" {
		c.CacheScope = "private"
	}
}

// rpcRefusal is an upstream's JSON-RPC error as it came (its code and
// data, such as the uri of a resource not found), else err.
func rpcRefusal(err error) error {
	var refusal *jsonrpc.Error
	if errors.As(err, &refusal) {
		return refusal
	}
	return err
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
	var lastErr error
	for _, s := range p.resourceOrder(params.URI) {
		cs, err := s.up.Session(ctx)
		if err != nil {
			lastErr = fmt.Errorf("upstream %s: %w", s.name, err)
			continue
		}
		up := *params
		up.Meta = forwardMeta(params.Meta)
		res, err := cs.ReadResource(ctx, &up)
		if err == nil {
			return res, nil
		}
		lastErr = rpcRefusal(err)
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

// promptOrder is the prompt sources that may have a prompt of this name:
// those whose prefix it carries, then those without a prefix, in order.
func (p *passThrough) promptOrder(name string) []*passSource {
	var order []*passSource
	for _, s := range p.sources {
		if s.prompts && s.prefix != "" && strings.HasPrefix(name, s.prefix+"_") {
			order = append(order, s)
		}
	}
	for _, s := range p.sources {
		if s.prompts && s.prefix == "" {
			order = append(order, s)
		}
	}
	return order
}

// getPrompt finds the upstream by the name's prefix (prefixed upstreams
// first, then those without one, in order).
func (p *passThrough) getPrompt(ctx context.Context, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	order := p.promptOrder(params.Name)
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
		up.Meta = forwardMeta(params.Meta)
		if s.prefix != "" {
			up.Name = strings.TrimPrefix(params.Name, s.prefix+"_")
		}
		res, err := cs.GetPrompt(ctx, &up)
		if err == nil {
			return res, nil
		}
		lastErr = rpcRefusal(err)
	}
	return nil, lastErr
}

// notifyUpdates makes every resource source tell updated of the URIs its
// server reports changed (the SDK passes them to the subscribed sessions).
func (p *passThrough) notifyUpdates(updated func(uri string)) {
	for _, s := range p.sources {
		if s.resources {
			s.up.OnResourceUpdated(updated)
		}
	}
}

// resourceOrder is the resource sources to ask about uri: the one that
// listed it first, then the others in order.
func (p *passThrough) resourceOrder(uri string) []*passSource {
	p.mu.Lock()
	known := p.byURI[uri]
	p.mu.Unlock()
	var order []*passSource
	if known != nil && known.resources {
		order = append(order, known)
	}
	for _, s := range p.sources {
		if s.resources && s != known {
			order = append(order, s)
		}
	}
	return order
}

// subscribe passes an agent's resources/subscribe to the upstream that has
// the URI (the first that takes it), once per URI however many agents
// subscribe.
func (p *passThrough) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	if req.Params == nil || req.Params.URI == "" {
		return invalidParams("params.uri: required: the resource's URI, as resources/list gave it")
	}
	uri := req.Params.URI
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	sub := p.subs[uri]
	if sub == nil {
		var lastErr error
		for _, s := range p.resourceOrder(uri) {
			cs, err := s.up.Session(ctx)
			if err == nil {
				err = cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
			}
			if err == nil {
				sub = &subscription{source: s, sessions: map[*mcp.ServerSession]bool{}}
				break
			}
			lastErr = fmt.Errorf("upstream %s: %w", s.name, err)
		}
		if sub == nil {
			return fmt.Errorf("no upstream took the subscription to %s: %w", uri, lastErr)
		}
		p.subs[uri] = sub
	}
	sub.sessions[req.Session] = true
	if !p.watched[req.Session] {
		p.watched[req.Session] = true
		go func(ss *mcp.ServerSession) {
			_ = ss.Wait()
			p.sessionEnded(ss)
		}(req.Session)
	}
	return nil
}

func (p *passThrough) unsubscribe(ctx context.Context, req *mcp.UnsubscribeRequest) error {
	if req.Params == nil || req.Params.URI == "" {
		return invalidParams("params.uri: required: the resource's URI")
	}
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	p.dropLocked(ctx, req.Params.URI, req.Session)
	return nil
}

// sessionEnded drops every subscription of a session that ended.
func (p *passThrough) sessionEnded(ss *mcp.ServerSession) {
	p.subsMu.Lock()
	defer p.subsMu.Unlock()
	delete(p.watched, ss)
	for uri := range p.subs {
		p.dropLocked(context.Background(), uri, ss)
	}
}

// dropLocked removes ss from uri's subscribers and unsubscribes the
// upstream when none is left.
func (p *passThrough) dropLocked(ctx context.Context, uri string, ss *mcp.ServerSession) {
	sub := p.subs[uri]
	if sub == nil || !sub.sessions[ss] {
		return
	}
	delete(sub.sessions, ss)
	if len(sub.sessions) > 0 {
		return
	}
	delete(p.subs, uri)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if cs, err := sub.source.up.Session(ctx); err == nil {
		if err := cs.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
			p.log("airlock: MCP upstream refused an unsubscribe", "upstream", sub.source.name, "uri", uri, "err", err)
		}
	}
}

// complete answers completion/complete from the upstream that the
// reference names: a prompt by its (prefixed) name, a resource template by
// asking each resource source in turn. No upstream able to complete it
// gives no suggestions, not an error: completion only helps a person type.
func (p *passThrough) complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	empty := &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: []string{}}}
	if req.Params == nil || req.Params.Ref == nil {
		return nil, invalidParams("params.ref: required: {type: ref/prompt, name} or {type: ref/resource, uri}")
	}
	params := *req.Params
	var order []*passSource
	switch params.Ref.Type {
	case "ref/prompt":
		order = p.promptOrder(params.Ref.Name)
	case "ref/resource":
		order = p.resourceOrder(params.Ref.URI)
	default:
		return nil, invalidParams(fmt.Sprintf("params.ref.type: %q: want ref/prompt or ref/resource", params.Ref.Type))
	}
	for _, s := range order {
		cs, err := s.up.Session(ctx)
		if err != nil {
			continue
		}
		up := params
		up.Meta = forwardMeta(params.Meta)
		if params.Ref.Type == "ref/prompt" && s.prefix != "" {
			ref := *params.Ref
			ref.Name = strings.TrimPrefix(ref.Name, s.prefix+"_")
			up.Ref = &ref
		}
		if res, err := cs.Complete(ctx, &up); err == nil {
			if res.Completion.Values == nil {
				res.Completion.Values = []string{}
			}
			return res, nil
		}
	}
	return empty, nil
}
