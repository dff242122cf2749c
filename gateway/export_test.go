package gateway

// DisableFastPath sends every /mcp request of g to the SDK (mcpfast.go),
// for a test that compares the fast path's answers with the SDK's.
func DisableFastPath(g *Gateway) { g.fastOff = true }

// MCPSessionsHeld is how many MCP sessions principal holds open on g.
func MCPSessionsHeld(g *Gateway, principal string) int { return g.sessions.held(principal) }

// MCPSessionsBusy is how many requests of principal's MCP sessions g is
// answering: a client has its answer a moment before the server is done
// with the request, so a test that needs them idle waits for 0.
func MCPSessionsBusy(g *Gateway, principal string) int { return g.sessions.busy(principal) }
