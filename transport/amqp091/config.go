package amqp091

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/secret"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/coalesce"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// Defaults applied to zero fields of Config.
const (
	DefaultDialTimeout    = 30 * time.Second
	DefaultCloseTimeout   = 5 * time.Second
	DefaultHeartbeat      = 30 * time.Second
	DefaultMaxMessageSize = 16 << 20
)

// Config says how to reach one RabbitMQ broker over AMQP 0-9-1. It is an
// alias of the type both transports share (amqpwire.Config is the same
// type), so that every DialOption means the same on both connectors.
// Dialect is ignored (addresses are always spelt as RabbitMQ 4's),
// IdleTimeout sets the heartbeat to two thirds of it, in whole seconds (at
// least one; zero: 30 s), so that a broker silent for about IdleTimeout is
// given up on; ContainerID is sent as the connection name.
type Config = endpoint.Config

// connector is the transport.Connector of one Config.
type connector struct {
	cfg      Config        // without its URL, which url holds
	url      secret.String // the URL as given, password and all
	redacted string
	log      *slog.Logger
	// tokens: the newest token when Config.TokenSource is set, else nil.
	tokens *token.Cache
}

// New returns a connector for cfg. It never fails: a malformed URL or an
// unsafe combination of settings is reported by Connect, naming the URL
// without its password.
func New(cfg Config) transport.Connector {
	c := &connector{cfg: cfg, url: secret.New(cfg.URL), redacted: endpoint.RedactURL(cfg.URL), tokens: token.NewCache(cfg.TokenSource)}
	c.cfg.URL, c.cfg.Failover = c.redacted, nil // 0-9-1 has no failover
	if cfg.Logger != nil {
		c.log = cfg.Logger.With("broker", c.redacted)
	} else {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// Dialect is RabbitMQ4: addresses are validated as they are on RabbitMQ 4
// over AMQP 1.0.
func (c *connector) Dialect() address.Dialect { return address.RabbitMQ4 }

// String is the URL without its password.
func (c *connector) String() string { return c.redacted }

// ProtocolVersion is the AMQP version spoken, as AsyncAPI spells it.
func (c *connector) ProtocolVersion() string { return "0.9.1" }

// ErrCleartextCredentials is wrapped by the error Connect returns when SASL
// PLAIN would send a password in clear text to a host that is not a
// loopback address. It is the value both transports share, the one
// amqpwire.ErrCleartextCredentials is too.
var ErrCleartextCredentials = endpoint.ErrCleartextCredentials

// vhost is the virtual host u's path names: "/" when it names none.
func vhost(u endpoint.URL) string {
	v := strings.TrimPrefix(u.Path, "/")
	if v == "" {
		return "/"
	}
	if d, err := url.PathUnescape(v); err == nil {
		return d
	}
	return v
}

// anonymous is SASL ANONYMOUS, which amqp091-go does not have.
type anonymous struct{}

func (anonymous) Mechanism() string { return "ANONYMOUS" }
func (anonymous) Response() string  { return "" }

// Connect opens one AMQP 0-9-1 connection.
func (c *connector) Connect(ctx context.Context) (transport.Conn, error) {
	ep, err := endpoint.Parse(c.url(), c.redacted)
	if err != nil {
		return nil, err
	}
	mech, err := endpoint.Mechanism(c.cfg, ep, c.redacted)
	if err != nil {
		return nil, err
	}
	grant, err := c.tokens.Grant(ctx, c.redacted)
	if err != nil {
		return nil, err
	}
	if c.tokens != nil {
		ep.Password = grant.Token
	}
	fail := func(msg string, err error) *endpoint.ConnectError {
		return &endpoint.ConnectError{URL: c.redacted, Msg: msg, Err: endpoint.Scrub(err, ep.Password)}
	}
	var auth rmq.Authentication
	switch mech {
	case "PLAIN":
		auth = &rmq.PlainAuth{Username: ep.User, Password: ep.Password}
	case "EXTERNAL":
		auth = &rmq.ExternalAuth{}
	default:
		auth = anonymous{}
	}
	timeout := c.cfg.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()

	// amqp091-go gives up on a broker silent for three half-heartbeats
	// (it reads at half the interval); the wire counts whole seconds.
	heartbeat := DefaultHeartbeat
	if c.cfg.IdleTimeout > 0 {
		heartbeat = max(c.cfg.IdleTimeout*2/3, time.Second).Truncate(time.Second)
	}
	var tc *tls.Config // set for amqps
	props := rmq.NewConnectionProperties()
	props["product"] = "amqpactor"
	if c.cfg.ContainerID != "" {
		props.SetClientConnectionName(c.cfg.ContainerID)
	}
	cfg := rmq.Config{
		SASL:       []rmq.Authentication{auth},
		Vhost:      vhost(ep),
		Heartbeat:  heartbeat,
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{KeepAlive: 15 * time.Second}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
			// amqp091-go flushes every frame with its own write system
			// call; under load the frames of a burst share one instead.
			conn = coalesce.New(conn, nil, 0)
			// Bounds the TLS and AMQP handshakes; amqp091-go clears it
			// once the connection is open.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			if tc != nil {
				// TLS here rather than in amqp091-go, so that the
				// guard reads the plain frames.
				t := tls.Client(conn, tc)
				if err := t.HandshakeContext(ctx); err != nil {
					_ = conn.Close()
					return nil, err
				}
				conn = t
			}
			return guard(conn), nil
		},
	}
	dialURL := ep.Rest
	if ep.TLS {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.cfg.TLS != nil {
			tc = c.cfg.TLS.Clone()
		}
		if tc.ServerName == "" {
			tc.ServerName = ep.Host
		}
		if dialURL, err = plainURL(ep.Rest); err != nil {
			return nil, fail("invalid URL", err)
		}
	}
	type result struct {
		conn *rmq.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := rmq.DialConfig(dialURL, cfg)
		done <- result{conn, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		// The dial's own deadline is ctx's; it returns shortly.
		r = <-done
		if r.err == nil {
			_ = r.conn.Close()
			r.err = ctx.Err()
		}
	}
	if r.err != nil {
		var re *rmq.Error
		switch {
		case errors.Is(r.err, rmq.ErrSASL):
			return nil, fail("SASL "+mech+" not offered by the broker", r.err)
		case errors.As(r.err, &re) && re.Code == rmq.AccessRefused:
			ce := fail("authentication failed (SASL "+mech+")", r.err)
			// A token may be refused for being stale: the next Connect
			// asks the source for another.
			ce.Permanent = c.tokens == nil
			c.tokens.Refused()
			return nil, ce
		case ctx.Err() != nil:
			return nil, fail("AMQP open timed out", r.err)
		}
		return nil, fail("dial", r.err)
	}
	c.log.Debug("amqpactor: connected (AMQP 0-9-1)", "sasl", mech, "tls", ep.TLS)
	k := newConn(c, r.conn)
	if c.tokens != nil && !grant.Expiry.IsZero() {
		// RabbitMQ takes a new secret on a live 0-9-1 connection.
		rn := &token.Renewer{Cache: c.tokens, Put: k.updateSecret, Log: c.log, State: &k.tokens, Done: k.done,
			RetryFirst: token.RetryFirst, MinLead: token.MinLead}
		go rn.Run(grant)
	}
	return k, nil
}

// plainURL is an amqps URL as amqp091-go is given it when the connector
// does TLS itself: scheme amqp, the port made explicit (5671 by default).
func plainURL(rest string) (string, error) {
	u, err := url.Parse(rest)
	if err != nil {
		return "", err
	}
	u.Scheme = "amqp"
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "5671")
	}
	return u.String(), nil
}

// closeContext bounds a close whose context has no deadline.
func closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return endpoint.Bound(ctx, DefaultCloseTimeout)
}

// Format prints the connector as its String for every verb but %#v, which
// shows its Config, redacted (Config's Format): the fields alone
// would show the password.
func (c *connector) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "&amqp091.connector{cfg:%#v}", c.cfg)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), c.String())
}
