package amqp091

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// Conn is one AMQP 0-9-1 connection. It implements transport.Conn and
// transport.Transactional.
type Conn struct {
	c    *connector
	conn *rmq.Connection

	done    chan struct{}
	errMu   sync.Mutex
	err     error
	closing sync.Once
	closeE  error

	// declared remembers the nodes declared on this connection, so a
	// re-attach does not declare them again.
	declared sync.Map
	// replies are the direct reply-to receivers of this connection by the
	// address they report: a request naming one as its reply-to must be
	// published on that receiver's channel (see Session.publishVia).
	replies sync.Map
	// tokens: the expiry of the token the broker holds and why it was not
	// renewed; written by the renewer, read by Err.
	tokens token.State
}

var (
	_ transport.Conn          = (*Conn)(nil)
	_ transport.SessionLimit  = (*Conn)(nil)
	_ transport.Transactional = (*Conn)(nil)
)

func newConn(c *connector, conn *rmq.Connection) *Conn {
	k := &Conn{c: c, conn: conn, done: make(chan struct{})}
	closes := conn.NotifyClose(make(chan *rmq.Error, 1))
	go func() {
		e, ok := <-closes
		if ok && e != nil {
			k.errMu.Lock()
			k.err = fmt.Errorf("amqpactor: connection to %s ended: %w", c.redacted, lost(e, true))
			if te := k.tokens.ExpiredWith(time.Now()); te != nil {
				k.err = fmt.Errorf("amqpactor: connection to %s ended after its token expired (%w): %w", c.redacted, te, lost(e, true))
			}
			k.errMu.Unlock()
			c.log.Warn("amqpactor: connection closed by the broker", "code", e.Code, "reason", e.Reason)
		}
		close(k.done)
	}()
	return k
}

// updateSecret hands the broker a new token for this connection
// (connection.update-secret); amqp091-go's call has no context, so a
// caller that gives up leaves it to end with the connection.
func (c *Conn) updateSecret(ctx context.Context, tok string) error {
	done := make(chan error, 1)
	go func() { done <- c.conn.UpdateSecret(tok, "token renewed") }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("amqpactor: update-secret on %s: %w", c.c.redacted, err)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("amqpactor: update-secret on %s: %w", c.c.redacted, ctx.Err())
	}
}

// Done is closed when the connection ends, by Close or by failure.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Err says why Done was closed: nil after a clean Close; otherwise an
// error wrapping *amqp.ConnError (the broker's reply code and text as its
// RemoteErr when the broker closed it).
func (c *Conn) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// Features: a direct reply-to consumer stands for a dynamic node; every
// channel can be put in tx.select mode; no anonymous relay (a Sender is
// per address); the broker as its connection.start names it.
func (c *Conn) Features() transport.Features {
	return transport.Features{DynamicSource: true, Transactions: true, Broker: endpoint.Broker(c.conn.Properties)}
}

// MaxSessions is the channel-max negotiated in the tune (RabbitMQ: 2047 by
// default): every session is a channel, and channel 0 is the connection's.
func (c *Conn) MaxSessions() int { return int(c.conn.Config.ChannelMax) }

// String names the broker (without credentials).
func (c *Conn) String() string { return c.c.String() }

// gone is the error of a call that failed because the channel or the
// connection ended.
func (c *Conn) gone(err error) error {
	return lost(err, c.conn.IsClosed())
}

// channel opens a channel, bounded by ctx. A channel that opens after ctx
// ended is closed at once.
func (c *Conn) channel(ctx context.Context) (*rmq.Channel, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		ch  *rmq.Channel
		err error
	}
	done := make(chan result, 1)
	go func() {
		ch, err := c.conn.Channel()
		done <- result{ch, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, c.gone(r.err)
		}
		return r.ch, nil
	case <-ctx.Done():
		go func() {
			if r := <-done; r.ch != nil {
				_ = r.ch.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// call runs f, a call into amqp091-go that blocks until the broker
// answers, bounded by ctx: past it, ch (when there is one) is closed,
// which ends the call.
func (c *Conn) call(ctx context.Context, ch *rmq.Channel, f func() error) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		if err != nil {
			return c.gone(err)
		}
		return nil
	case <-ctx.Done():
		if ch != nil {
			_ = ch.Close()
		}
		// f returns once its channel is closed or the broker answers;
		// its result no longer matters.
		return ctx.Err()
	}
}

// NewSession opens a channel.
func (c *Conn) NewSession(ctx context.Context) (transport.Session, error) {
	ch, err := c.channel(ctx)
	if err != nil {
		return nil, fmt.Errorf("amqpactor: open channel on %s: %w", c.c.redacted, err)
	}
	return newSession(c, ch), nil
}

// Close closes the connection, bounded by ctx (DefaultCloseTimeout when it
// has no deadline). Closing a connection that already failed returns nil:
// Err has the cause.
func (c *Conn) Close(ctx context.Context) error {
	c.closing.Do(func() {
		ctx, cancel := closeContext(ctx)
		defer cancel()
		if c.conn.IsClosed() {
			<-c.done
			return
		}
		deadline, _ := ctx.Deadline()
		if err := c.conn.CloseDeadline(deadline); err != nil && !errors.Is(err, rmq.ErrClosed) {
			c.closeE = fmt.Errorf("amqpactor: close connection to %s: %w", c.c.redacted, err)
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			// amqp091-go shuts the socket when the close handshake
			// fails; done follows without us.
		}
		c.c.log.Debug("amqpactor: connection closed")
	})
	return c.closeE
}

func randomToken() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// connGone is the error for a connection that has ended.
func connGone() error { return &amqp.ConnError{} }
