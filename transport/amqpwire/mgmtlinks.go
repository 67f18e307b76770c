package amqpwire

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"
)

// mgmtLinks is the link pair a management client (RabbitMQ 4's or
// Artemis's) sends its requests and reads their replies on, in a session of
// its own: opened by the client's first request, and again by the next one
// after they failed.
type mgmtLinks struct {
	closed atomic.Bool // set by Conn.Close; checked without mu

	mu   sync.Mutex // serialises requests; guards the fields below
	sess *amqp.Session
	snd  *amqp.Sender
	rcv  *amqp.Receiver
}

// dropIfDead forgets the links when the request failed for a reason other
// than the caller's context, so that the next request opens new ones; mu is
// held.
func (l *mgmtLinks) dropIfDead(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	l.endSession(l.sess)
	l.sess, l.snd, l.rcv = nil, nil, nil
}

func (l *mgmtLinks) endSession(s *amqp.Session) {
	if s == nil {
		return
	}
	ctx, cancel := closeContext(context.Background())
	defer cancel()
	_ = s.Close(ctx)
}

// close ends the management session, bounded by ctx. A request in flight
// keeps the session: closing the connection ends it, and the request, at
// once, so Conn.Close never waits for a request.
func (l *mgmtLinks) close(ctx context.Context) {
	l.closed.Store(true)
	if !l.mu.TryLock() {
		return
	}
	defer l.mu.Unlock()
	if l.sess != nil {
		_ = l.sess.Close(ctx)
		l.sess, l.snd, l.rcv = nil, nil, nil
	}
}
