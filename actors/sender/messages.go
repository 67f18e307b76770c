package sender

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/transport"
)

// SessionUp gives a sender the session to attach on; SessionDown takes it
// away. SessionLost tells the publisher that its session ended under a
// sender: RabbitMQ 4 ends the whole session when it refuses one attach, so
// every sender on it needs a new one.
type (
	SessionUp   struct{ Session transport.Session }
	SessionDown struct{ Err error }
	SessionLost struct {
		Session transport.Session
		Err     error
	}
)

// Retire asks a sender to retire (see the package documentation); its
// parent sends it to make room for another address. Retiring tells the
// parent that the sender PID has begun to retire (its lane is closed from
// now on); Retired that it has let go of its link and may be stopped.
type (
	Retire   struct{}
	Retiring struct{ PID *actor.PID }
	Retired  struct{ PID *actor.PID }
)

// StateRetiring is the state of a sender that is retiring.
const StateRetiring = "retiring"

// Wake tells a sender that its publish.Lane has publishes parked for it (Park).
type Wake struct{}

// What a sender sends itself. The writer and the confirmer of its link
// send it a *publish.Ended when the link dies (see reports).
type (
	attachResult struct {
		sess transport.Session // the session it was tried on
		link transport.Sender
		err  error
	}
	retry    struct{}
	idleTick struct{}
)
