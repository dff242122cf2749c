package gateway

// DisableFastPath sends every /mcp request of g to the SDK (mcpfast.go),
// for a test that compares the fast path's answers with the SDK's.
func DisableFastPath(g *Gateway) { g.fastOff = true }

// MCPSessionsHeld is how many MCP sessions principal holds open on g.
func MCPSessionsHeld(g *Gateway, principal string) int { return g.sessions.held(principal) }
