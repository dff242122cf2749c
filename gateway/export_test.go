package gateway

// DisableFastPath sends every /mcp request of g to the SDK (mcpfast.go),
// for a test that compares the fast path's answers with the SDK's.
func DisableFastPath(g *Gateway) { g.fastOff = true }
