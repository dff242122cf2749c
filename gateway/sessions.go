package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of the MCP session limits (Config.MCPSessionIdle,
// Config.MCPSessionsPerToken; the manifest's limits).
const (
	DefaultMCPSessionIdle      = 30 * time.Minute
	DefaultMCPSessionsPerToken = 100
)

// mcpSessions binds each MCP session to the token that opened it — a
// session id is a capability, and another token must not use it — caps
// the sessions one token holds open, so that clients that never close
// theirs cannot exhaust the server, and closes the ones idle for longer
// than idle. airlock times them, not the SDK: the fast path
// (mcpfast.go) answers requests the SDK never sees. A token at its cap
// that opens another session closes its least recently used idle one to
// make room (decision 77): many clients never say goodbye, and must not
// lock their token out for the idle time.
type mcpSessions struct {
	max   int
	idle  time.Duration
	clock clockwork.Clock

	mu       sync.Mutex
	sessions map[string]*mcpSession            // session id → what airlock knows of it
	open     map[string]int                    // principal → sessions open
	owned    map[string]map[string]*mcpSession // principal → its sessions, by id
	// evicted are sessions closed to make room, by when: their ids are
	// refused here (404) for the idle time, since the SDK forgets a closed
	// session a moment after it is closed and would serve it meanwhile,
	// to any token (airlock no longer knows its owner). Ids are random and
	// never reused; entries older than idle are dropped at each eviction.
	evicted map[string]time.Time
	// ticks orders the sessions' last use: least recently used is
	// smallest, whatever the clock's resolution.
	ticks uint64
}

// mcpSession is a session airlock saw opened: its principal, its requests
// being answered, and its idle timer, which closes it once no request has
// been answered for idle (as the SDK's did). The timer is not stopped and
// started again for each request: when it fires it looks at the session,
// and sets itself for when the session could next be idle.
type mcpSession struct {
	owner string
	busy  int
	// lastEnd is when its last request ended (or it was watched), used
	// the tick of its last use: when it was opened or its last request
	// began, in the order the client made them (when a request ends is
	// the server's timing, which the client may not see before its next
	// request).
	lastEnd time.Time
	used    uint64
	timer   clockwork.Timer // nil until watched
	close   func()          // ends it (set when watched)
	// inflight are its requests being answered, by JSON id, so that a
	// notifications/cancelled can silence the answer.
	inflight map[string]*dropWriter
}

func newMCPSessions(max int, idle time.Duration, clock clockwork.Clock) *mcpSessions {
	return &mcpSessions{max: max, idle: idle, clock: clock, sessions: map[string]*mcpSession{}, open: map[string]int{},
		owned: map[string]map[string]*mcpSession{}, evicted: map[string]time.Time{}}
}

// touchLocked marks s used now.
func (m *mcpSessions) touchLocked(s *mcpSession) {
	m.ticks++
	s.used = m.ticks
}

// watch starts timing session id, which close ends.
func (m *mcpSessions) watch(id string, close func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil {
		return // already ended
	}
	s.lastEnd = m.clock.Now()
	s.close = close
	s.timer = m.clock.AfterFunc(m.idle, func() { m.expire(id, s, close) })
}

// expire closes session s if it is idle: no request being answered, and
// none answered within idle. Otherwise its timer is set for when it could
// next be.
func (m *mcpSessions) expire(id string, s *mcpSession, close func()) {
	m.mu.Lock()
	if m.sessions[id] != s {
		m.mu.Unlock()
		return // ended meanwhile
	}
	wait := m.idle
	if s.busy == 0 {
		wait -= m.clock.Since(s.lastEnd)
	}
	if wait > 0 {
		s.timer.Reset(wait)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	close()
}

// begin marks a request of session id begun, if principal opened it (nil
// otherwise); d, where the request may be cancelled, is the writer of its
// answer under its JSON id reqID. end marks it answered.
func (m *mcpSessions) begin(id, principal, reqID string, d *dropWriter) *mcpSession {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil || s.owner != principal {
		return nil
	}
	s.busy++
	m.touchLocked(s)
	if d != nil {
		if s.inflight == nil {
			s.inflight = map[string]*dropWriter{}
		}
		s.inflight[reqID] = d
	}
	return s
}

func (m *mcpSessions) end(s *mcpSession, reqID string, d *dropWriter) {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	s.busy--
	s.lastEnd = now
	if d != nil && s.inflight[reqID] == d {
		delete(s.inflight, reqID)
	}
}

// cancel silences the answer of request reqID of session id, where
// principal opened it, and ends the request's wait (notifications/
// cancelled).
func (m *mcpSessions) cancel(id, principal, reqID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[id]; s != nil && s.owner == principal {
		if d := s.inflight[reqID]; d != nil {
			d.giveUp()
		}
	}
}

// ownedBy reports whether a session id may be used by principal: an id
// airlock did not see opened is the SDK's to refuse.
func (m *mcpSessions) ownedBy(id, principal string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	return s == nil || s.owner == principal
}

// wasEvicted reports whether session id was closed to make room within
// the idle time.
func (m *mcpSessions) wasEvicted(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.evicted[id]
	return ok && m.clock.Since(at) <= m.idle
}

// busy is how many requests of principal's sessions are being answered.
func (m *mcpSessions) busy(principal string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, s := range m.owned[principal] {
		n += s.busy
	}
	return n
}

// ownerOf is the principal that opened session id ("" when airlock did
// not see it opened: stdio, a sessionless revision).
func (m *mcpSessions) ownerOf(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions[id]; s != nil {
		return s.owner
	}
	return ""
}

// reserve takes a place for a new session of principal. At its cap, the
// place of its least recently used idle session is taken — that session
// is forgotten here and evicted names it, for the caller to close; ok
// false: every one of its sessions is answering a request (or still
// opening), and none may be closed.
func (m *mcpSessions) reserve(principal string) (ok bool, evicted string, close func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open[principal] < m.max {
		m.open[principal]++
		return true, "", nil
	}
	var victim *mcpSession
	for id, s := range m.owned[principal] {
		// Not one being opened (no timer yet: its client has not had its
		// id), nor one answering a request.
		if s.timer == nil || s.busy > 0 {
			continue
		}
		if victim == nil || s.used < victim.used {
			victim, evicted = s, id
		}
	}
	if victim == nil {
		return false, "", nil
	}
	// Its place passes to the new session: open stays as it is.
	victim.timer.Stop()
	delete(m.sessions, evicted)
	delete(m.owned[principal], evicted)
	now := m.clock.Now()
	for id, at := range m.evicted {
		if now.Sub(at) > m.idle {
			delete(m.evicted, id)
		}
	}
	m.evicted[evicted] = now
	return true, evicted, victim.close
}

// opened binds a new session to the principal whose place it took; an
// empty id (the initialize failed) gives the place back.
func (m *mcpSessions) opened(id, principal string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" {
		if m.open[principal]--; m.open[principal] <= 0 {
			delete(m.open, principal)
		}
		return
	}
	s := &mcpSession{owner: principal}
	m.touchLocked(s)
	m.sessions[id] = s
	if m.owned[principal] == nil {
		m.owned[principal] = map[string]*mcpSession{}
	}
	m.owned[principal][id] = s
}

func (m *mcpSessions) ended(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[id]
	if s == nil {
		return // an evicted session's place was already taken
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	delete(m.sessions, id)
	if delete(m.owned[s.owner], id); len(m.owned[s.owner]) == 0 {
		delete(m.owned, s.owner)
	}
	if m.open[s.owner]--; m.open[s.owner] <= 0 {
		delete(m.open, s.owner)
	}
}

// held is how many sessions principal holds open.
func (m *mcpSessions) held(principal string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.open[principal]
}

// guardSession applies the binding and the cap to one /mcp request of
// principal: it answers a refusal itself, or lets serve answer.
func (g *Gateway) guardSession(w http.ResponseWriter, r *http.Request, principal, method string, reqID json.RawMessage, serve func(http.ResponseWriter)) {
	if id := r.Header.Get("Mcp-Session-Id"); id != "" {
		if g.sessions.wasEvicted(id) {
			writeRPCError(w, http.StatusNotFound, rpcInvalidRequest,
				"this MCP session was closed to make room for a newer one of its token (limits.mcp_sessions_per_token); open another (initialize)", nil, reqID)
			return
		}
		if !g.sessions.ownedBy(id, principal) {
			writeRPCError(w, http.StatusForbidden, rpcInvalidRequest,
				"this MCP session was opened with another token; open your own (initialize)", nil, reqID)
			return
		}
		serve(w)
		return
	}
	if r.Method != http.MethodPost || method != "initialize" {
		serve(w)
		return
	}
	ok, evicted, closeEvicted := g.sessions.reserve(principal)
	if !ok {
		w.Header().Set("Retry-After", "60")
		writeRPCError(w, http.StatusTooManyRequests, rpcInvalidRequest, fmt.Sprintf(
			"this token holds %d open MCP sessions, the most it may (limits.mcp_sessions_per_token), and each is answering a request; end one (DELETE /mcp) or wait for one to finish",
			g.sessions.max), nil, reqID)
		return
	}
	if closeEvicted != nil {
		// Closed before the new one opens: the token never holds more
		// than its cap.
		g.log.Debug("airlock: MCP session closed to make room for the same token's new one (limits.mcp_sessions_per_token)",
			"principal", principal, "session", evicted)
		closeEvicted()
	}
	// Bound as the answer's header is written, before the client can use
	// the id.
	cw := &sessionCapture{ResponseWriter: w, onHeader: func(id string, status int) {
		if status >= 300 {
			id = ""
		}
		g.sessions.opened(id, principal)
	}}
	serve(cw)
	if !cw.bound {
		g.sessions.opened("", principal) // no answer at all: the place is free
		return
	}
	if cw.id != "" && cw.status < 300 {
		g.watchSession(cw.id)
	}
}

// watchSession closes a session once it is idle, and frees its place when
// it ends (DELETE, idle, shutdown).
func (g *Gateway) watchSession(id string) {
	for s := range g.mcp.Sessions() {
		if s.ID() == id {
			g.sessions.watch(id, func() { _ = s.Close() })
			go func(s *mcp.ServerSession) {
				_ = s.Wait()
				g.sessions.ended(id)
			}(s)
			return
		}
	}
	g.sessions.ended(id) // already gone
}

// sessionCapture reads the session id the SDK gives a new session.
type sessionCapture struct {
	http.ResponseWriter
	onHeader func(id string, status int)
	id       string
	status   int
	bound    bool
}

func (c *sessionCapture) WriteHeader(code int) {
	if c.status == 0 {
		c.status, c.id = code, c.Header().Get("Mcp-Session-Id")
		c.bound = true
		c.onHeader(c.id, code)
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *sessionCapture) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.WriteHeader(http.StatusOK)
	}
	return c.ResponseWriter.Write(p)
}

func (c *sessionCapture) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *sessionCapture) Unwrap() http.ResponseWriter { return c.ResponseWriter }
