package amqpwire

// FoldedDispositions is how many disposition frames c's writer has folded
// into the one before (dispmerge.go), for the live tests.
func FoldedDispositions(c *Conn) uint64 {
	cc := c.guard.Conn.(*coalescingConn)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.folded
}

// ExpiredHolds is how many times c's writer wrote the dispositions it held
// back because their hold ran out (dispmerge.go), for the live tests.
func ExpiredHolds(c *Conn) uint64 {
	cc := c.guard.Conn.(*coalescingConn)
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.expired
}
