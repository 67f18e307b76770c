// Package endpoint is what both transports know of a broker endpoint
// before they speak its protocol: the Config a connector is made from,
// the URL taken apart (the userinfo ends at the last '@'), the SASL
// mechanism it asks for and the refusal of a password in clear text, the
// URL without its password, and the connect errors, which name the
// redacted URL and never quote a credential; and the bound both put on a
// close whose caller gave none (Bound). amqpwire and amqp091 alias
// Config, SASL and ErrCleartextCredentials, so a DialOption means the same
// on both.
package endpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor/address"
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

// Config says how to reach one broker. The zero value of every field but URL
// is usable. Users know it as amqpwire.Config (amqp091.Config is the same
// type); each transport documents what it makes of the fields.
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
	// TokenSource, when set, gives the password of SASL PLAIN: a fresh
	// token (an OAuth 2 access token, a JWT) and when it expires. It is
	// called for each new connection and, on a broker that takes a new
	// token on a live connection, again before the token expires; the user
	// is the URL's (empty without one). A zero expiry means the token does
	// not expire. It must return promptly and honour ctx.
	TokenSource func(ctx context.Context) (token string, expiry time.Time, err error)
}

// ErrCleartextCredentials is wrapped by the error Connect returns when SASL
// PLAIN would send a password over plain TCP to a host that is not a loopback
// address and Config.InsecurePlain is not set.
var ErrCleartextCredentials = errors.New("refusing to send a password in clear text")

// Format prints c as fmt would, every URL without its password: without
// it %v and %#v of a Config, or of a connector holding one, show the
// password whole. %#v spells the type as users know it, amqpwire.Config.
func (c Config) Format(f fmt.State, verb rune) {
	type config Config // no methods: fmt prints its fields
	s := fmt.Sprintf(fmt.FormatString(f, verb), config(Redacted(c)))
	_, _ = io.WriteString(f, strings.ReplaceAll(s, "endpoint.config{", "amqpwire.Config{"))
}

// Redacted is c with every URL's password replaced by xxxxx. A function, not
// a method, so that amqpwire.Config shows users no more than Format.
func Redacted(c Config) Config {
	c.URL = RedactURL(c.URL)
	if c.Failover != nil {
		f := make([]string, len(c.Failover))
		for i, u := range c.Failover {
			f[i] = RedactURL(u)
		}
		c.Failover = f
	}
	return c
}

// Mechanism is the SASL mechanism c asks for on u: "PLAIN", "ANONYMOUS" or
// "EXTERNAL". It refuses an unknown setting, and PLAIN over plain TCP to a
// host that is not a loopback address unless InsecurePlain is set, before
// anything is dialled; redacted names u in the error. A function, not a
// method, so that amqpwire.Config shows users no more than Format.
func Mechanism(c Config, u URL, redacted string) (string, error) {
	mech := "ANONYMOUS"
	switch c.SASL {
	case SASLFromURL:
		if u.HasUser || c.TokenSource != nil {
			mech = "PLAIN"
		}
	case SASLAnonymous, SASLExternal:
		if c.TokenSource != nil {
			// A token travels as the PLAIN password; another mechanism
			// would drop it without a word.
			return "", &ConnectError{URL: redacted, Msg: "a token source needs SASL PLAIN, not " + c.SASL.String(), Permanent: true}
		}
		if c.SASL == SASLExternal {
			mech = "EXTERNAL"
		}
	default:
		return "", &ConnectError{URL: redacted, Msg: fmt.Sprintf("unknown SASL setting %d", c.SASL)}
	}
	if mech == "PLAIN" && !u.TLS && !c.InsecurePlain && !isLoopback(u.Host) {
		return "", &ConnectError{URL: redacted, Msg: "SASL PLAIN over plain TCP to a non-loopback host", Err: fmt.Errorf(
			"%w; use amqps://, or set InsecurePlain to allow it", ErrCleartextCredentials)}
	}
	return mech, nil
}
