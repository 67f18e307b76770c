package amqpwire

import "net"

// Coalesce wraps c so that frames written while a write is under way go
// out together in the next one (see coalescingConn). Transport
// packages on other AMQP clients that write frame by frame use it too.
func Coalesce(c net.Conn) net.Conn { return coalesce(c) }
