package amqpactor

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// DialOption configures Dial.
type DialOption func(*amqpwire.Config)

// Dial returns a Connector for a live AMQP 1.0 broker at url (amqp:// or
// amqps://, TLS verified by default), with go-amqp on the wire. It never
// fails: a bad URL or unsafe settings are reported by App.Start, naming the
// URL without its password. SASL PLAIN comes from the URL's userinfo.
func Dial(url string, opts ...DialOption) Connector {
	return amqpwire.New(dialConfig(url, opts))
}

// dialConfig is the Config of url with opts applied, for either transport.
func dialConfig(url string, opts []DialOption) amqpwire.Config {
	cfg := amqpwire.Config{URL: url}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	return cfg
}

// WithContainerID sets the AMQP container-id. Zero means a random one.
func WithContainerID(id string) DialOption { return func(c *amqpwire.Config) { c.ContainerID = id } }

// WithDialect says how the broker spells addresses. Zero means Artemis.
func WithDialect(d Dialect) DialOption { return func(c *amqpwire.Config) { c.Dialect = d } }

// WithTLS sets the TLS config of an amqps:// connection. Nil means the
// defaults, with verification on.
func WithTLS(cfg *tls.Config) DialOption { return func(c *amqpwire.Config) { c.TLS = cfg } }

// WithSASLAnonymous authenticates with SASL ANONYMOUS.
func WithSASLAnonymous() DialOption {
	return func(c *amqpwire.Config) { c.SASL = amqpwire.SASLAnonymous }
}

// WithSASLExternal authenticates with SASL EXTERNAL (the TLS client
// certificate).
func WithSASLExternal() DialOption {
	return func(c *amqpwire.Config) { c.SASL = amqpwire.SASLExternal }
}

// WithInsecurePlain allows SASL PLAIN, a password in clear text, over plain
// TCP to a host that is not a loopback address. Without it Start refuses.
func WithInsecurePlain() DialOption { return func(c *amqpwire.Config) { c.InsecurePlain = true } }

// WithIdleTimeout sets how long the broker may stay silent before the
// connection is declared dead. Zero means one minute.
func WithIdleTimeout(d time.Duration) DialOption {
	return func(c *amqpwire.Config) { c.IdleTimeout = d }
}

// WithMaxMessageSize bounds the size of a message a receiver accepts. Zero
// means 16 MiB. A larger message is rejected alone, with amqp:decode-error
// and a description that says so; it never ends the link.
func WithMaxMessageSize(n uint64) DialOption {
	return func(c *amqpwire.Config) { c.MaxMessageSize = n }
}

// WithDialLogger receives connection events. Nothing logged contains
// credentials.
func WithDialLogger(l *slog.Logger) DialOption { return func(c *amqpwire.Config) { c.Logger = l } }

// WithFailover adds endpoints of the same broker cluster, tried in order
// after the Dial URL when it cannot be reached or its connection is lost,
// with the App's backoff between rounds; after a loss the endpoint that
// worked last is tried first. Each URL has its own credentials and is
// checked as the Dial URL is (TLS, SASL and the cleartext rule apply to
// each); none is ever printed with its password. The tree's connection node
// and StateChange.Address name the endpoint the connection is on.
func WithFailover(urls ...string) DialOption {
	return func(c *amqpwire.Config) { c.Failover = append(c.Failover, urls...) }
}

// WithTokenSource authenticates with a token, an OAuth 2 access token (a
// JWT) as RabbitMQ's OAuth 2 backend takes it: the password of SASL PLAIN,
// with the URL's user (none is needed). source returns a fresh token and
// when it expires (zero: never); it is called for every new connection, so
// a reconnect always uses the newest token, and, on RabbitMQ 4.1 and later
// over AMQP 1.0, once three quarters of a token's life has passed, to hand
// the broker a new one on the live connection (a PUT to /auth/tokens on
// its management node), which then goes on undisturbed. A failed renewal is
// logged and tried again a few times before the token expires; if it still
// fails, the broker ends the connection at the expiry and the runtime
// reconnects with a fresh token, the connection's state naming the cause.
// A broker that cannot take a new token on a live connection (RabbitMQ
// 4.0, ActiveMQ Artemis) ends it at the expiry: the connection's error
// then wraps amqpwire.ErrTokenRefreshUnsupported, and the runtime
// reconnects. Dial091 renews with 0-9-1's connection.update-secret. No
// token appears in any log line or error. source must honour ctx; it is
// called from the connection's goroutines, never two at once.
func WithTokenSource(source func(ctx context.Context) (token string, expiry time.Time, err error)) DialOption {
	return func(c *amqpwire.Config) { c.TokenSource = source }
}
