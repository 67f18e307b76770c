package amqpwire

import (
	"context"
	"errors"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// ErrTokenRefreshUnsupported is wrapped by the error a connection ends with
// when its token expired on a broker that cannot take a new token on a live
// connection (RabbitMQ before 4.1, ActiveMQ Artemis): the broker ends the
// connection at the token's expiry and the runtime reconnects with a fresh
// token from the source.
var ErrTokenRefreshUnsupported = errors.New("the broker cannot take a new token on a live connection (RabbitMQ 4.1 or later can)")

// tokenPath is the management node's resource that takes a new token for
// the connection the request comes on (RabbitMQ 4.1+).
const tokenPath = "/auth/tokens"

// canTakeToken reports whether the broker of c takes a new token on the
// live connection: RabbitMQ 4.1 and later.
func (c *Conn) canTakeToken() bool {
	if c.dialect != address.RabbitMQ4 || c.amqp == nil {
		return false
	}
	major, minor, ok := rabbitRelease(c.amqp.Properties())
	return ok && (major > 4 || major == 4 && minor >= 1)
}

// putToken gives the broker a new token for this connection, through the
// management node (the body is the token as binary).
func (c *Conn) putToken(ctx context.Context, tok string) error {
	_, err := c.mgmt.Request(ctx, "PUT", tokenPath, []byte(tok))
	return err
}

// startTokens starts the renewal of the token c authenticated with when
// the broker can take a new one; otherwise it notes why the connection
// will end at the token's expiry.
func (c *Conn) startTokens(k *token.Cache, g token.Grant) {
	if g.Expiry.IsZero() {
		return
	}
	if !c.canTakeToken() {
		c.tokens.WillExpire(g.Expiry, ErrTokenRefreshUnsupported)
		c.log.Warn("amqpactor: the token cannot be renewed on this connection; the broker ends it when the token expires and the runtime reconnects with a fresh one",
			"broker", c.Features().Broker, "token_expires", g.Expiry.UTC().Format(time.RFC3339))
		return
	}
	r := &token.Renewer{Cache: k, Put: c.putToken, Log: c.log, State: &c.tokens, Done: c.amqp.Done(),
		RetryFirst: token.RetryFirst, MinLead: token.MinLead}
	go r.Run(g)
}
