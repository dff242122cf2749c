package mcp

// SessionEnded reports whether the client has seen its session end (the
// process exit), for tests that wait for it.
func (c *Client) SessionEnded() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil {
		return true
	}
	select {
	case <-c.ended:
		return true
	default:
		return false
	}
}
