package amqpwire

import (
	"net"

	"github.com/amqpactor/amqpactor/transport/internal/coalesce"
)

// Coalesce wraps c so that frames written while a write is under way go
// out together in the next one. It is the write coalescer both transports
// share (transport/internal/coalesce), kept here for the callers that know
// it by this name. It never folds dispositions: those are AMQP 1.0 frames,
// and another protocol's bytes (its writes cut anywhere by a buffered
// writer) are passed on as written.
func Coalesce(c net.Conn) net.Conn { return coalesce.New(c, nil, 0) }
