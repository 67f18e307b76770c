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
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// Defaults applied to zero fields of Config.
const (
	DefaultDialTimeout    = 30 * time.Second
	DefaultCloseTimeout   = 5 * time.Second
	DefaultHeartbeat      = 30 * time.Second
	DefaultMaxMessageSize = 16 << 20
)

// Config says how to reach one RabbitMQ broker over AMQP 0-9-1. It is
// amqpwire.Config, so that every DialOption means the same on both
// connectors; Dialect is ignored (addresses are always spelt as RabbitMQ
// 4's), IdleTimeout sets the heartbeat to two thirds of it, in whole
// seconds (at least one; zero: 30 s), so that a broker silent for about
// IdleTimeout is given up on; ContainerID is sent as the connection name.
type Config = amqpwire.Config

// connector is the transport.Connector of one Config.
type connector struct {
	cfg      Config        // without its URL, which url holds
	url      secret.String // the URL as given, password and all
	redacted string
	log      *slog.Logger
}

// New returns a connector for cfg. It never fails: a malformed URL or an
// unsafe combination of settings is reported by Connect, naming the URL
// without its password.
func New(cfg Config) transport.Connector {
	// amqpwire's connector spells the URL without its password, whatever
	// characters the password holds.
	c := &connector{cfg: cfg, url: secret.New(cfg.URL), redacted: amqpwire.New(amqpwire.Config{URL: cfg.URL}).String()}
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

// connectError is what Connect returns: it names the redacted URL.
type connectError struct {
	url      string
	msg      string
	err      error
	terminal bool
}

// Terminal reports an error that retrying the same Connect will not cure.
func (e *connectError) Terminal() bool { return e.terminal }

func (e *connectError) Error() string {
	s := "amqpactor: connect " + e.url + ": " + e.msg
	if e.err != nil {
		s += ": " + e.err.Error()
	}
	return s
}

func (e *connectError) Unwrap() error { return e.err }

// scrubbed hides secret in err's text, keeping err reachable.
type scrubbed struct {
	text string
	err  error
}

func (e *scrubbed) Error() string { return e.text }
func (e *scrubbed) Unwrap() error { return e.err }

func scrub(err error, secret string) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return &scrubbed{text: strings.ReplaceAll(err.Error(), secret, "xxxxx"), err: err}
}

// ErrCleartextCredentials is amqpwire's: a password would go in clear text
// to a host that is not a loopback address.
var ErrCleartextCredentials = amqpwire.ErrCleartextCredentials

// endpoint is the URL taken apart. The userinfo ends at the last '@' (as
// on amqpwire), so a password may hold any character.
type endpoint struct {
	rest           string // the URL without userinfo
	user, password string
	hasUser        bool
	tls            bool
	host           string
	vhost          string
}

func (c *connector) parse() (endpoint, error) {
	var ep endpoint
	raw := c.url()
	if raw == "" {
		return ep, &connectError{url: "(empty URL)", msg: "no broker URL"}
	}
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok {
		return ep, &connectError{url: c.redacted, msg: "invalid URL: want amqp://[user:password@]host[:port][/vhost]"}
	}
	if at := strings.LastIndex(after, "@"); at >= 0 {
		ep.hasUser = true
		info := after[:at]
		after = after[at+1:]
		u, p, _ := strings.Cut(info, ":")
		ep.user, ep.password = unescape(u), unescape(p)
	}
	ep.rest = scheme + "://" + after
	u, err := url.Parse(ep.rest)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return ep, &connectError{url: c.redacted, msg: "invalid URL", err: scrub(err, ep.password)}
	}
	switch u.Scheme {
	case "amqp":
	case "amqps":
		ep.tls = true
	default:
		return ep, &connectError{url: c.redacted, msg: fmt.Sprintf("unsupported scheme %q (want amqp or amqps)", u.Scheme)}
	}
	ep.host = u.Hostname()
	if ep.host == "" {
		return ep, &connectError{url: c.redacted, msg: "URL has no host"}
	}
	ep.vhost = strings.TrimPrefix(u.Path, "/")
	if ep.vhost == "" {
		ep.vhost = "/"
	} else if v, err := url.PathUnescape(ep.vhost); err == nil {
		ep.vhost = v
	}
	return ep, nil
}

func unescape(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// anonymous is SASL ANONYMOUS, which amqp091-go does not have.
type anonymous struct{}

func (anonymous) Mechanism() string { return "ANONYMOUS" }
func (anonymous) Response() string  { return "" }

// Connect opens one AMQP 0-9-1 connection.
func (c *connector) Connect(ctx context.Context) (transport.Conn, error) {
	ep, err := c.parse()
	if err != nil {
		return nil, err
	}
	fail := func(msg string, err error) *connectError {
		return &connectError{url: c.redacted, msg: msg, err: scrub(err, ep.password)}
	}
	var auth rmq.Authentication
	mech := "ANONYMOUS"
	switch c.cfg.SASL {
	case amqpwire.SASLFromURL:
		if ep.hasUser {
			mech = "PLAIN"
			auth = &rmq.PlainAuth{Username: ep.user, Password: ep.password}
		} else {
			auth = anonymous{}
		}
	case amqpwire.SASLAnonymous:
		auth = anonymous{}
	case amqpwire.SASLExternal:
		mech = "EXTERNAL"
		auth = &rmq.ExternalAuth{}
	default:
		return nil, fail(fmt.Sprintf("unknown SASL setting %d", c.cfg.SASL), nil)
	}
	if mech == "PLAIN" && !ep.tls && !c.cfg.InsecurePlain && !isLoopback(ep.host) {
		return nil, fail("SASL PLAIN over plain TCP to a non-loopback host", fmt.Errorf(
			"%w; use amqps://, or set InsecurePlain to allow it", ErrCleartextCredentials))
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
	props := rmq.NewConnectionProperties()
	props["product"] = "amqpactor"
	if c.cfg.ContainerID != "" {
		props.SetClientConnectionName(c.cfg.ContainerID)
	}
	cfg := rmq.Config{
		SASL:       []rmq.Authentication{auth},
		Vhost:      ep.vhost,
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
			conn = amqpwire.Coalesce(conn)
			// Bounds the TLS and AMQP handshakes; amqp091-go clears it
			// once the connection is open.
			if err := conn.SetDeadline(deadline); err != nil {
				_ = conn.Close()
				return nil, err
			}
			return conn, nil
		},
	}
	if ep.tls {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if c.cfg.TLS != nil {
			tc = c.cfg.TLS.Clone()
		}
		if tc.ServerName == "" {
			tc.ServerName = ep.host
		}
		cfg.TLSClientConfig = tc
	}
	type result struct {
		conn *rmq.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := rmq.DialConfig(ep.rest, cfg)
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
			ce.terminal = true
			return nil, ce
		case ctx.Err() != nil:
			return nil, fail("AMQP open timed out", r.err)
		}
		return nil, fail("dial", r.err)
	}
	c.log.Debug("amqpactor: connected (AMQP 0-9-1)", "sasl", mech, "tls", ep.tls)
	return newConn(c, r.conn), nil
}

// closeContext bounds a close whose context has no deadline.
func closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, DefaultCloseTimeout)
}

// Format prints the connector as its String for every verb but %#v, which
// shows its Config, redacted (amqpwire.Config's Format): the fields alone
// would show the password.
func (c *connector) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprintf(f, "&amqp091.connector{cfg:%#v}", c.cfg)
		return
	}
	fmt.Fprintf(f, fmt.FormatString(f, verb), c.String())
}
