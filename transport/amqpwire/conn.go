package amqpwire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/coalesce"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// keepAlive is the TCP keepalive probe interval of every connection.
const keepAlive = 15 * time.Second

// prepared is a target checked and ready to dial.
type prepared struct {
	ep   endpoint.URL
	sasl amqp.SASLType
	mech string
}

// prepare parses t and decides its SASL mechanism, so that a refusal sends
// nothing anywhere; tok, when the Config has a token source, is the PLAIN
// password.
func (c *connector) prepare(t *target, tok string) (prepared, error) {
	ep, err := endpoint.Parse(t.url(), t.redacted)
	if err != nil {
		return prepared{}, err
	}
	mech, err := endpoint.Mechanism(c.cfg, ep, t.redacted)
	if err != nil {
		return prepared{}, err
	}
	if c.tokens != nil {
		ep.Password = tok
	}
	p := prepared{ep: ep, mech: mech}
	switch mech {
	case "PLAIN":
		p.sasl = amqp.SASLTypePlain(ep.User, ep.Password)
	case "EXTERNAL":
		p.sasl = amqp.SASLTypeExternal("")
	default:
		p.sasl = amqp.SASLTypeAnonymous()
	}
	return p, nil
}

func (c *connector) connect(ctx context.Context, t *target, tok token.Grant) (*Conn, error) {
	p, err := c.prepare(t, tok.Token)
	if err != nil {
		return nil, err
	}
	ep, sasl, mech := p.ep, p.sasl, p.mech
	fail := func(msg string, err error) *endpoint.ConnectError {
		return &endpoint.ConnectError{URL: t.redacted, Msg: msg, Err: endpoint.Scrub(err, ep.Password)}
	}

	timeout := c.cfg.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	d := net.Dialer{
		KeepAlive:       keepAlive,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAlive, Interval: keepAlive},
	}
	raw, err := d.DialContext(ctx, "tcp", ep.HostPort())
	if err != nil {
		return nil, fail("dial", err)
	}
	if tc, ok := raw.(*net.TCPConn); ok {
		if err := tc.SetNoDelay(true); err != nil {
			_ = raw.Close()
			return nil, fail("set TCP_NODELAY", err)
		}
	}
	netConn := raw
	if ep.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.cfg.TLS != nil {
			cfg = c.cfg.TLS.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = ep.Host
		}
		tc := tls.Client(raw, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, fail("TLS handshake", err)
		}
		netConn = tc
	}

	hostname := ep.Host
	if vhost := strings.TrimPrefix(ep.Path, "/"); c.cfg.Dialect == address.RabbitMQ4 && vhost != "" {
		hostname = "vhost:" + vhost
	}
	wire := coalesce.New(netConn, &folds{}, dispositionHold) // go-amqp writes one AMQP 1.0 frame per Write
	// go-amqp reads through the guard, which checks every delivery before
	// go-amqp decodes it (guard.go); it writes through the coalescer.
	g := newGuard(wire, c.cfg.MaxMessageSize, nil)
	ac, err := amqp.NewConn(ctx, g, &amqp.ConnOptions{
		ContainerID:  c.cfg.ContainerID,
		HostName:     hostname,
		IdleTimeout:  c.cfg.IdleTimeout,
		SASLType:     sasl,
		MaxFrameSize: guardMaxFrameSize,
	})
	if err != nil {
		_ = wire.Close()
		msg := "AMQP open"
		const saslFailed = "auth failed with code "
		switch text := err.Error(); {
		case strings.Contains(text, saslFailed):
			// go-amqp says "SASL PLAIN auth failed with code 0x1: " whatever
			// the mechanism; say it plainly and keep the error reachable.
			code := strings.TrimSuffix(strings.TrimSpace(text[strings.Index(text, saslFailed)+len(saslFailed):]), ":")
			ce := fail("authentication failed (SASL "+mech+")",
				&endpoint.Scrubbed{Text: "the broker refused the credentials (SASL outcome code " + code + ")", Err: err})
			// A token may be refused for being stale: the next Connect
			// asks the source for another.
			ce.Permanent = c.tokens == nil
			c.tokens.Refused()
			return nil, ce
		case strings.Contains(text, "no supported auth mechanism"):
			msg = "SASL " + mech + " not offered by the broker"
		case ctx.Err() != nil:
			msg = "AMQP open timed out"
		}
		return nil, fail(msg, err)
	}
	conn := &Conn{
		url:     t.redacted,
		amqp:    ac,
		net:     netConn,
		guard:   g,
		dialect: c.cfg.Dialect,
		log:     t.log,
	}
	conn.mgmt = &Management{conn: conn}
	conn.artemis = &ArtemisManagement{conn: conn}
	if c.tokens != nil {
		conn.startTokens(c.tokens, tok)
	}
	t.log.Debug("amqpactor: connected", "sasl", mech, "tls", ep.TLS)
	return conn, nil
}

// Conn is one AMQP connection. It implements transport.Conn.
type Conn struct {
	url     string // the redacted URL of the endpoint
	amqp    *amqp.Conn
	net     net.Conn
	guard   *guard
	dialect address.Dialect
	log     *slog.Logger

	// remoteEnd is when the broker last ended one of our sessions with an
	// error (unix nanoseconds; 0: never), see awaitChannelReuse.
	remoteEnd atomic.Int64
	mgmt      *Management
	artemis   *ArtemisManagement
	// declared: the nodes declared for the anonymous terminus (relay.go).
	declared declared
	// tokens: the expiry of the token the broker holds and why it was not
	// renewed; written by the refresher (token.go), read by Err.
	tokens token.State

	closeOnce sync.Once
	closeErr  error
}

var (
	_ transport.Conn         = (*Conn)(nil)
	_ transport.SessionLimit = (*Conn)(nil)
)

// Done is go-amqp's own channel: it is closed the moment the connection
// ends, by Close or by failure.
func (c *Conn) Done() <-chan struct{} { return c.amqp.Done() }

// Err says why Done was closed: nil after a clean Close, otherwise the
// cause (a *amqp.ConnError is reachable with errors.As, and the broker's
// *amqp.Error when it closed the connection with one, or a *GuardError when
// the inbound guard refused what the broker sent).
func (c *Conn) Err() error {
	err := c.amqp.Err()
	if err == nil {
		return nil
	}
	if ge := c.guardFailure(); ge != nil {
		// The guard refused what the broker sent; go-amqp's error has
		// only its text.
		return fmt.Errorf("amqpactor: connection to %s ended: %w", c.url, ge)
	}
	if te := c.tokens.ExpiredWith(time.Now()); te != nil {
		// The broker ends a connection whose token expired; say why it
		// was not renewed.
		return fmt.Errorf("amqpactor: connection to %s ended after its token expired (%w): %w", c.url, te, describe(err))
	}
	return fmt.Errorf("amqpactor: connection to %s ended: %w", c.url, describe(err))
}

// Features: dynamic sources only on Artemis (RabbitMQ 4.0 answers
// amqp:not-implemented, Service Bus has none); transactions nowhere (go-amqp
// v1.7 has no coordinator link); the anonymous relay where the peer offers
// it (relay.go); the broker as its open frame names it.
func (c *Conn) Features() transport.Features {
	f := transport.Features{DynamicSource: c.dialect == address.Artemis, AnonymousRelay: c.anonymousRelay()}
	if c.amqp != nil {
		f.Broker = BrokerOf(c.amqp.Properties())
	}
	return f
}

// BrokerOf names a broker from the properties of its open (AMQP 1.0) or
// connection.start (0-9-1): "product version", either alone when the
// other is missing, "" without both.
func BrokerOf(props map[string]any) string { return endpoint.Broker(props) }

// The reply nodes a RabbitMQ 4 broker gives a dynamic receiver (a request's
// reply-to), by release: ReplyNode says which this connection's broker has.
const (
	// ReplyQueue: a private classic queue the runtime declares (4.0).
	ReplyQueue = "reply-queue"
	// ReplyTemporaryQueue: a dynamic source with capability
	// temporary-queue, an exclusive queue the broker makes (4.1).
	ReplyTemporaryQueue = "temporary-queue"
	// ReplyDirect: direct reply-to, a dynamic source with capability
	// rabbitmq:volatile-queue; no queue at all (4.2 and later).
	ReplyDirect = "direct-reply-to"
)

// ReplyNode is the kind of reply node the connection's broker gives a
// dynamic receiver under the RabbitMQ4 dialect, from the release its open
// frame names; a release it cannot read gets the reply queue, which every
// release has.
func (c *Conn) ReplyNode() string {
	if c.amqp == nil {
		return ReplyQueue
	}
	major, minor, ok := rabbitRelease(c.amqp.Properties())
	switch {
	case !ok || major < 4 || major == 4 && minor == 0:
		return ReplyQueue
	case major == 4 && minor == 1:
		return ReplyTemporaryQueue
	default:
		return ReplyDirect
	}
}

// rabbitRelease reads major.minor from a RabbitMQ open's version property.
func rabbitRelease(props map[string]any) (major, minor int, ok bool) {
	if p, _ := props["product"].(string); !strings.EqualFold(p, "RabbitMQ") {
		return 0, 0, false
	}
	v, _ := props["version"].(string)
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}

// PeerOffers reports whether the broker's open frame offered capability
// (for example "ANONYMOUS-RELAY").
func (c *Conn) PeerOffers(capability string) bool {
	return c.guard != nil && c.guard.PeerOffers(capability)
}

// MaxSessions is the number of sessions the broker allows on the connection
// at once, from its open's channel-max (RabbitMQ 4: 64); zero when unknown.
// go-amqp closes the whole connection when a session is begun past it, so
// the runtime spreads its sessions over as many connections as they need.
func (c *Conn) MaxSessions() int {
	if c.guard == nil {
		return 0
	}
	return c.guard.PeerSessions()
}

func (c *Conn) guardFailure() *GuardError {
	if c.guard == nil {
		return nil
	}
	return c.guard.failed.Load()
}

// Management returns the client of the broker's AMQP management node on this
// connection (RabbitMQ 4). Its links are opened on first use. Beyond the
// declarations the runtime makes through it, it is for operators' reads: a
// queue's depth and consumers (QueueInfo), or any other request (Request).
func (c *Conn) Management() *Management { return c.mgmt }

// ArtemisManagement returns the client of ActiveMQ Artemis's management
// address on this connection. Its links are opened on first use.
func (c *Conn) ArtemisManagement() *ArtemisManagement { return c.artemis }

// String names the endpoint (without credentials).
func (c *Conn) String() string { return c.url }

// NewSession begins an AMQP session.
func (c *Conn) NewSession(ctx context.Context) (transport.Session, error) {
	if err := c.awaitChannelReuse(ctx); err != nil {
		return nil, fmt.Errorf("amqpactor: begin session on %s: %w", c.url, err)
	}
	s, err := c.amqp.NewSession(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("amqpactor: begin session on %s: %w", c.url, describe(err))
	}
	return &Session{conn: c, s: s}, nil
}

// Close closes the management links and the connection, bounded by ctx (or
// by DefaultCloseTimeout when ctx has no deadline); past the deadline the
// socket is shut without waiting for the broker. Closing a connection that
// already failed returns nil: Err has the cause.
func (c *Conn) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		ctx, cancel := closeContext(ctx)
		defer cancel()
		alreadyDone := false
		select {
		case <-c.amqp.Done():
			alreadyDone = true
		default:
		}
		c.mgmt.close(ctx)
		c.artemis.close(ctx)
		done := make(chan error, 1)
		go func() { done <- c.amqp.Close() }()
		var err error
		select {
		case err = <-done:
		case <-ctx.Done():
			// The broker did not answer our close in time: shut the socket,
			// which ends go-amqp's reader and writer at once.
			_ = c.net.Close()
			<-done
			err = fmt.Errorf("broker did not acknowledge the close: %w", ctx.Err())
		}
		if err != nil && !alreadyDone {
			c.closeErr = fmt.Errorf("amqpactor: close connection to %s: %w", c.url, describe(err))
		}
		c.log.Debug("amqpactor: connection closed")
	})
	return c.closeErr
}

// channelReuseGrace is how long a new session waits after the broker ended
// one of ours with an error. RabbitMQ 4.0 (and 4.1 before
// rabbitmq-server#14317) hands the frames of a channel number to the session
// it has just ended until it has cleaned that session up; go-amqp gives the
// next session the lowest free channel number, which is that one, and sends
// the end's acknowledgement and the new begin back to back, so the begin
// could go to the dead session and never be answered (seen as a begin
// timeout when a refused attach is retried on a new session). The broker
// cleans up within microseconds; this leaves it ample time, and costs
// nothing unless a session was just ended by the broker.
const channelReuseGrace = 100 * time.Millisecond

func (c *Conn) awaitChannelReuse(ctx context.Context) error {
	t := c.remoteEnd.Load()
	if t == 0 {
		return nil
	}
	wait := channelReuseGrace - time.Since(time.Unix(0, t))
	if wait <= 0 {
		return nil
	}
	select {
	case <-time.After(wait): // since Go 1.23 its timer is collected if ctx ends first
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// linkError is linkError, noting first whether the broker ended the
// session (see awaitChannelReuse).
func (c *Conn) linkError(ctx context.Context, addr, op string, err error) error {
	if err == nil {
		// Before se, whose address escapes: every settle came through
		// here and paid an allocation for it.
		return nil
	}
	var se *amqp.SessionError
	if c != nil && errors.As(err, &se) && se.RemoteErr != nil {
		c.remoteEnd.Store(time.Now().UnixNano())
	}
	return linkError(ctx, addr, op, err)
}
