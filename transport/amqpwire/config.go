package amqpwire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/secret"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// SASL chooses the SASL mechanism of a connection. It is an alias of the
// type both transports share, so that amqp091 takes the same settings.
type SASL = endpoint.SASL

// The SASL settings, the shared type's.
const (
	// SASLFromURL (the zero value) uses PLAIN with the URL's user and password
	// when the URL has userinfo, and ANONYMOUS otherwise.
	SASLFromURL = endpoint.SASLFromURL
	// SASLAnonymous uses ANONYMOUS; userinfo in the URL is ignored.
	SASLAnonymous = endpoint.SASLAnonymous
	// SASLExternal uses EXTERNAL with an empty response (the identity comes
	// from the TLS client certificate); userinfo in the URL is ignored.
	SASLExternal = endpoint.SASLExternal
)

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

// Config says how to reach one broker. It is an alias of the type both
// transports share (amqp091.Config is the same type), where its fields are
// documented, so that every DialOption means the same on either. The zero
// value of every field but URL is usable.
type Config = endpoint.Config

// ErrCleartextCredentials is wrapped by the error Connect returns when SASL
// PLAIN would send a password over plain TCP to a host that is not a loopback
// address and Config.InsecurePlain is not set. It is the shared value, the
// one amqp091.ErrCleartextCredentials is too.
var ErrCleartextCredentials = endpoint.ErrCleartextCredentials

// connector is the transport.Connector for one Config.
type connector struct {
	cfg Config // with its URLs redacted: targets hold them whole
	// targets are Config.URL, then Config.Failover, in order.
	targets []target
	// current indexes the target that connected last: String names it and
	// Connect tries it first.
	current atomic.Int32
	// tokens: the newest token when Config.TokenSource is set, else nil.
	tokens *token.Cache
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
	c := &connector{cfg: endpoint.Redacted(cfg)}
	c.tokens = token.NewCache(cfg.TokenSource)
	for _, u := range append([]string{cfg.URL}, cfg.Failover...) {
		t := target{url: secret.New(u), redacted: endpoint.RedactURL(u)}
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

// CheckBindingKeys: only RabbitMQ 4 binds a topic subscription by pattern.
func (c *connector) CheckBindingKeys(a address.Address, k address.BindingKeys) error {
	return address.CheckBindingKeys(c.cfg.Dialect, a, k)
}

// String is the URL of the endpoint that connected last (the Config's URL
// until one has), without its password.
func (c *connector) String() string { return c.targets[c.current.Load()].redacted }

// Connect opens a connection to the endpoint that connected last, or, when
// it cannot be reached, to the next ones in order. Every endpoint is
// checked first, so that a URL that can never work is reported by the first
// Connect rather than by the first failover.
func (c *connector) Connect(ctx context.Context) (transport.Conn, error) {
	for i := range c.targets {
		if _, err := c.prepare(&c.targets[i], ""); err != nil {
			return nil, err
		}
	}
	tok, err := c.tokens.Grant(ctx, c.String())
	if err != nil {
		return nil, err
	}
	start := int(c.current.Load())
	var errs []error
	for k := range c.targets {
		i := (start + k) % len(c.targets)
		conn, err := c.connect(ctx, &c.targets[i], tok)
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

// closeContext gives a Close call a deadline even when the caller's context
// has none.
func closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return endpoint.Bound(ctx, DefaultCloseTimeout)
}

var _ fmt.Stringer = (*connector)(nil)
