package guard

// Waiters is how many waits for records' changes g has registered.
func Waiters(g *Guard) int {
	g.hub.mu.Lock()
	defer g.hub.mu.Unlock()
	n := 0
	for _, set := range g.hub.waiters {
		n += len(set)
	}
	return n
}
