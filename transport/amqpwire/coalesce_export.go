package amqpwire

import "net"

// Coalesce wraps c so that frames written while a write is under way go
// out together in the next one (see coalescingConn). Transport
// packages on other AMQP clients that write frame by frame use it too.
// It never folds dispositions: those are AMQP 1.0 frames, and another
// protocol's bytes (its writes cut anywhere by a buffered writer) are
// passed on as written.
func Coalesce(c net.Conn) net.Conn { return coalesce(c, false) }
