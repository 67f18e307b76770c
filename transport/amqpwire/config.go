package amqpwire

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/secret"
	"github.com/amqpactor/amqpactor/transport"
)

// SASL chooses the SASL mechanism of a connection.
type SASL uint8

const (
	// SASLFromURL (the zero value) uses PLAIN with the URL's user and password
	// when the URL has userinfo, and ANONYMOUS otherwise.
	SASLFromURL SASL = iota
	// SASLAnonymous uses ANONYMOUS; userinfo in the URL is ignored.
	SASLAnonymous
	// SASLExternal uses EXTERNAL with an empty response (the identity comes
	// from the TLS client certificate); userinfo in the URL is ignored.
	SASLExternal
)

func (s SASL) String() string {
	switch s {
	case SASLFromURL:
		return "from-url"
	case SASLAnonymous:
		return "ANONYMOUS"
	case SASLExternal:
		return "EXTERNAL"
	}
	return "unknown"
}

// Defaults applied to zero fields of Config.
const (
	DefaultMaxMessageSize = 16 << 20
	DefaultDialTimeout    = 30 * time.Second
	// DefaultCloseTimeout bounds every Close whose context has no deadline.
	DefaultCloseTimeout = 5 * time.Second
	// DefaultRequestTimeout bounds a management request whose context has no
	// deadline.
	DefaultRequestTimeout = 30 * time.Second
)

// Config says how to reach one broker. The zero value of every field but URL
// is usable.
type Config struct {
	// URL is amqp://[user:password@]host[:port][/vhost] or amqps://…. The
	// userinfo ends at the last '@', so a password may hold '/', '?', '#',
	// '@' and ':' as they are; user and password are percent-decoded when
	// every '%' in them starts an escape (%2F), taken as written otherwise.
	// No part of the password appears in any error, log line or String. The
	// port defaults to 5672 (amqp) or 5671 (amqps). With the RabbitMQ4
	// dialect a non-empty path names the virtual host (sent as the open
	// frame's hostname "vhost:NAME"); otherwise the hostname sent is the
	// URL's host.
	URL string
	// Failover are more endpoints of the same broker cluster, tried in
	// order after URL when it cannot be reached or its connection is lost;
	// each is spelt and authenticated as URL is (its own userinfo, the same
	// TLS and SASL settings). Connect starts with the last endpoint that
	// worked. Empty means URL alone.
	Failover []string
	// TLS configures amqps:// connections. nil means a default config with
	// verification on. ServerName defaults to the URL's host. It is never
	// used for amqp:// URLs.
	TLS *tls.Config
	// SASL chooses the mechanism; the zero value takes it from the URL.
	SASL SASL
	// ContainerID is the AMQP container-id; empty lets go-amqp pick a random
	// one.
	ContainerID string
	// Dialect says how addresses are spelt and what must be declared before a
	// link attaches. The zero value is Artemis.
	Dialect address.Dialect
	// InsecurePlain allows SASL PLAIN (a password in clear text) over plain
	// TCP to a host that is not a loopback address. The zero value refuses it.
	InsecurePlain bool
	// IdleTimeout is how long the broker may stay silent before the
	// connection is declared dead. Zero means go-amqp's default (one
	// minute); negative disables it.
	IdleTimeout time.Duration
	// MaxMessageSize is the largest message a receiver accepts. A larger
	// one arrives as a poison message (transport.Poison), which the runtime
	// rejects alone with amqp:decode-error; the link goes on. At most this
	// much of one delivery is held in memory. Zero means 16 MiB.
	// Senders are bound by the broker's own maximum instead (go-amqp v1.7
	// cannot set one on a sender).
	MaxMessageSize uint64
	// DialTimeout bounds TCP connect, TLS handshake and the AMQP open, in
	// addition to the context given to Connect. Zero means 30 s.
	DialTimeout time.Duration
	// Logger receives connection events; nil discards them. Nothing logged
	// contains credentials.
	Logger *slog.Logger
}

// ErrCleartextCredentials is wrapped by the error Connect returns when SASL
// PLAIN would send a password over plain TCP to a host that is not a loopback
// address and Config.InsecurePlain is not set.
var ErrCleartextCredentials = errors.New("refusing to send a password in clear text")

// connector is the transport.Connector for one Config.
type connector struct {
	cfg Config // with its URLs redacted: targets hold them whole
	// targets are Config.URL, then Config.Failover, in order.
	targets []target
	// current indexes the target that connected last: String names it and
	// Connect tries it first.
	current atomic.Int32
}

// target is one endpoint of a connector.
type target struct {
	url      secret.String // the URL as given, password and all
	redacted string
	log      *slog.Logger
}

// New returns a connector for cfg. It never fails: a malformed URL or an
// unsafe combination of settings is reported by Connect, naming the redacted
// URL.
func New(cfg Config) transport.Connector {
	c := &connector{cfg: cfg.redacted()}
	for _, u := range append([]string{cfg.URL}, cfg.Failover...) {
		t := target{url: secret.New(u), redacted: redactURL(u)}
		if cfg.Logger != nil {
			t.log = cfg.Logger.With("broker", t.redacted)
		} else {
			t.log = slog.New(slog.DiscardHandler)
		}
		c.targets = append(c.targets, t)
	}
	return c
}

func (c *connector) Dialect() address.Dialect { return c.cfg.Dialect }

// String is the URL of the endpoint that connected last (the Config's URL
// until one has), without its password.
func (c *connector) String() string { return c.targets[c.current.Load()].redacted }

// Connect opens a connection to the endpoint that connected last, or, when
// it cannot be reached, to the next ones in order. Every endpoint is
// checked first, so that a URL that can never work is reported by the first
// Connect rather than by the first failover.
func (c *connector) Connect(ctx context.Context) (transport.Conn, error) {
	for i := range c.targets {
		if _, err := c.prepare(&c.targets[i]); err != nil {
			return nil, err
		}
	}
	start := int(c.current.Load())
	var errs []error
	for k := range c.targets {
		i := (start + k) % len(c.targets)
		conn, err := c.connect(ctx, &c.targets[i])
		if err == nil {
			if i != start {
				conn.log.Warn("amqpactor: failed over", "from", c.targets[start].redacted)
			}
			c.current.Store(int32(i))
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 1 {
		return nil, errs[0]
	}
	return nil, &failoverError{errs: errs}
}

// failoverError is what Connect returns when no endpoint could be reached:
// each error names its endpoint.
type failoverError struct{ errs []error }

func (e *failoverError) Error() string {
	texts := make([]string, len(e.errs))
	for i, err := range e.errs {
		texts[i] = err.Error()
	}
	return "amqpactor: no endpoint of the cluster answers: " + strings.Join(texts, "; ")
}

func (e *failoverError) Unwrap() []error { return e.errs }

// Terminal only when retrying can help on no endpoint: a node still booting
// may refuse credentials that another one accepts.
func (e *failoverError) Terminal() bool {
	for _, err := range e.errs {
		var t interface{ Terminal() bool }
		if !errors.As(err, &t) || !t.Terminal() {
			return false
		}
	}
	return true
}

// userinfoSplit is a URL with its userinfo taken off.
type userinfoSplit struct {
	rest           string // the URL without userinfo
	userinfo       string // as written
	user, password string // decoded
	hasUser        bool
}

// splitUserinfo takes the userinfo off a scheme://userinfo@host... URL by
// hand: the userinfo ends at the last '@'. url.Parse ends the authority at
// the first '/', '?' or '#', so a password holding one of them was misread
// (as a host and port, a path, a query or a fragment: "user:1234/x@host"
// dialled host "user", port 1234) and quoted in errors and in the
// "redacted" URL; a '%' not followed by two hex digits made it fail with an
// error quoting the password. Here user and password are percent-decoded
// when every '%' in them starts an escape, and taken as written otherwise.
// Errors never quote any of it. A URL without "://" is returned whole,
// unless it holds an '@' (it would be "user:password@host").
func splitUserinfo(raw string) (userinfoSplit, error) {
	scheme, after, ok := strings.Cut(raw, "://")
	if !ok || !validScheme(scheme) {
		if strings.Contains(raw, "@") {
			return userinfoSplit{}, errors.New("no scheme: want amqp://[user:password@]host[:port][/vhost]")
		}
		return userinfoSplit{rest: raw}, nil
	}
	at := strings.LastIndex(after, "@")
	if at < 0 {
		return userinfoSplit{rest: raw}, nil
	}
	sp := userinfoSplit{rest: scheme + "://" + after[at+1:], userinfo: after[:at], hasUser: true}
	for i := 0; i < len(sp.userinfo); i++ {
		if b := sp.userinfo[i]; b < 0x20 || b == 0x7f {
			return userinfoSplit{}, errors.New("the userinfo holds a control character")
		}
	}
	user, pass, _ := strings.Cut(sp.userinfo, ":")
	sp.user, sp.password = unescapeOrAsIs(user), unescapeOrAsIs(pass)
	return sp, nil
}

// validScheme reports a URL scheme: a letter, then letters, digits, '+',
// '-' or '.'.
func validScheme(s string) bool {
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return s != ""
}

func unescapeOrAsIs(s string) string {
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

// redactURL spells raw as url.URL.Redacted does, the password (whatever
// its characters) replaced by xxxxx. A URL that does not parse is cut down
// to its scheme and host part, so that not even a malformed URL leaks a
// password.
func redactURL(raw string) string {
	sp, err := splitUserinfo(raw)
	if err != nil {
		// No scheme, or a userinfo that cannot be used: keep only what
		// follows the last '@' (and the scheme, when there is one).
		prefix := ""
		if scheme, _, ok := strings.Cut(raw, "://"); ok && validScheme(scheme) {
			prefix = scheme + "://"
		}
		return prefix + "xxxxx@" + raw[strings.LastIndex(raw, "@")+1:]
	}
	if !sp.hasUser {
		if u, err := url.Parse(raw); err == nil && u.Opaque == "" {
			return u.Redacted()
		}
		return raw
	}
	scheme, host, _ := strings.Cut(sp.rest, "://")
	if u, err := url.Parse(sp.rest); err == nil {
		host = strings.TrimPrefix(u.String(), u.Scheme+"://")
	}
	user := url.User(sp.user).String()
	if _, _, hasPass := strings.Cut(sp.userinfo, ":"); hasPass {
		user += ":xxxxx"
	}
	return scheme + "://" + user + "@" + host
}

// scrub removes every secret from msg.
func scrub(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "xxxxx")
		}
	}
	return msg
}

// connectError is what Connect returns: it names the redacted URL.
type connectError struct {
	url string
	msg string
	err error
	// terminal: retrying cannot help (credentials refused, a URL or
	// settings that can never work). Reconnect loops stop on it.
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

// safeError carries an error whose text has been scrubbed of credentials
// while keeping the original reachable for errors.Is and errors.As.
type safeError struct {
	text string
	err  error
}

func (e *safeError) Error() string { return e.text }
func (e *safeError) Unwrap() error { return e.err }

func scrubbed(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	text := scrub(err.Error(), secrets...)
	if text == err.Error() {
		return err
	}
	return &safeError{text: text, err: err}
}

// withDefaultDeadline returns ctx bounded by d when it has no deadline.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// closeContext gives a Close call a deadline even when the caller's context
// has none (go-amqp issue 310: a close the peer never answers blocks for
// ever). A context that is already done still lets the close begin; it just
// does not wait for the peer.
func closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	return withDefaultDeadline(ctx, DefaultCloseTimeout)
}

var _ fmt.Stringer = (*connector)(nil)
