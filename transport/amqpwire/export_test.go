package amqpwire

import "github.com/amqpactor/amqpactor/transport/internal/coalesce"

// FoldedDispositions is how many disposition frames c's writer has folded
// into the one before (dispmerge.go), for the live tests.
func FoldedDispositions(c *Conn) uint64 { return c.guard.Conn.(*coalesce.Conn).Folded() }

// ExpiredHolds is how many times c's writer wrote the dispositions it held
// back because their hold ran out (dispmerge.go), for the live tests.
func ExpiredHolds(c *Conn) uint64 { return c.guard.Conn.(*coalesce.Conn).ExpiredHolds() }
