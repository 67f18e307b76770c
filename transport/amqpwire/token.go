package amqpwire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/secret"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
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

// Refresh timing: a token is renewed once tokenRefreshShare of its life has
// passed, leaving the rest for retries; a failed renewal is tried again
// after tokenRetryFirst, doubling, at most tokenRefreshTries times per
// token and never past its expiry.
const (
	tokenRefreshShare = 0.75
	tokenRetryFirst   = time.Second
	tokenRefreshTries = 5
	// tokenMinLead keeps a renewal from waiting until the last instant of
	// a token that lives a few seconds only.
	tokenMinLead = time.Second
)

// tokens holds the newest token of a connector, shared by its connections:
// a renewal on one connection is what the next Connect uses.
type tokens struct {
	source func(ctx context.Context) (string, time.Time, error)

	mu     sync.Mutex // guards the fields below
	token  secret.String
	expiry time.Time // zero: never expires
}

// current returns the newest token, asking the source for a fresh one when
// there is none yet or it expires within a renewal's lead.
func (k *tokens) current(ctx context.Context) (string, time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.token != nil && (k.expiry.IsZero() || time.Until(k.expiry) > tokenMinLead*5) {
		return k.token(), k.expiry, nil
	}
	return k.fetchLocked(ctx)
}

// fresh asks the source for a new token and keeps it.
func (k *tokens) fresh(ctx context.Context) (string, time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetchLocked(ctx)
}

func (k *tokens) fetchLocked(ctx context.Context) (string, time.Time, error) {
	tok, exp, err := k.source(ctx)
	switch {
	case err != nil:
		// The source's own text: the runtime never quotes a token.
		return "", time.Time{}, fmt.Errorf("token source: %w", err)
	case tok == "":
		return "", time.Time{}, errors.New("token source returned an empty token")
	}
	k.token, k.expiry = secret.New(tok), exp
	return tok, exp, nil
}

// refreshAt is when a token obtained at got that expires at exp is renewed,
// at least minLead before it expires.
func refreshAt(got, exp time.Time, minLead time.Duration) time.Time {
	life := exp.Sub(got)
	lead := time.Duration(float64(life) * (1 - tokenRefreshShare))
	if lead < minLead {
		lead = minLead
	}
	return exp.Add(-lead)
}

// tokenState is a connection's view of its token, written by its refresher
// and read by Err.
type tokenState struct {
	expiry atomic.Int64 // unix nanoseconds of the token the broker holds; 0: none or never
	failed atomic.Pointer[error]
}

// expiredWith is why the connection's token expired unrenewed, nil while
// it has not.
func (s *tokenState) expiredWith(now time.Time) error {
	exp := s.expiry.Load()
	if exp == 0 || now.UnixNano() < exp {
		return nil
	}
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// refresher renews the token a connection authenticated with before it
// expires, until done closes: it asks the source for a new one and gives it
// to the broker by put. Failures are logged and retried within bounds; when
// the token expires unrenewed the cause is kept in st for the connection's
// Err, and the broker ends the connection.
type refresher struct {
	tokens *tokens
	put    func(ctx context.Context, token string) error
	log    *slog.Logger
	st     *tokenState
	done   <-chan struct{}
	// retryFirst and minLead are tokenRetryFirst and tokenMinLead, which
	// tests shorten.
	retryFirst, minLead time.Duration
}

// run renews the token that expires at exp, obtained at got, and every
// later one; it returns when done closes, or when a token expires unrenewed.
func (r *refresher) run(got, exp time.Time) {
	for !exp.IsZero() {
		r.st.expiry.Store(exp.UnixNano())
		if !r.sleepUntil(refreshAt(got, exp, r.minLead)) {
			return
		}
		var err error
		retry := r.retryFirst
		for try := 1; ; try++ {
			var next time.Time
			got = time.Now()
			next, err = r.renew(exp)
			if err == nil {
				r.log.Debug("amqpactor: token refreshed", "expires", next.Format(time.RFC3339))
				exp = next
				break
			}
			if try >= tokenRefreshTries || time.Now().Add(retry).After(exp) {
				break
			}
			r.log.Warn("amqpactor: token refresh failed; retrying", "try", try, "retry_in", retry, "error", err)
			if !r.sleepUntil(time.Now().Add(retry)) {
				return
			}
			retry *= 2
		}
		if err != nil {
			err = fmt.Errorf("the token expired at %s unrenewed: %w", exp.UTC().Format(time.RFC3339), err)
			r.st.failed.Store(&err)
			r.log.Error("amqpactor: token refresh failed for good; the broker will end the connection at the token's expiry", "error", err)
			return
		}
	}
	r.st.expiry.Store(0)
}

// renew gets a fresh token and hands it to the broker, each bounded by what
// is left of the current token's life.
func (r *refresher) renew(exp time.Time) (time.Time, error) {
	ctx, cancel := context.WithDeadline(context.Background(), exp)
	defer cancel()
	go func() {
		select {
		case <-r.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tok, next, err := r.tokens.fresh(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := r.put(ctx, tok); err != nil {
		return time.Time{}, endpoint.Scrub(err, tok)
	}
	return next, nil
}

// sleepUntil waits until t; false when done closed first.
func (r *refresher) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.done:
		return false
	}
}

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
func (c *Conn) putToken(ctx context.Context, token string) error {
	_, err := c.mgmt.Request(ctx, "PUT", tokenPath, []byte(token))
	return err
}

// startTokens starts the renewal of the token c authenticated with, which
// expires at exp, when the broker can take one; otherwise it notes why the
// connection will end at the token's expiry.
func (c *Conn) startTokens(k *tokens, got, exp time.Time) {
	if exp.IsZero() {
		return
	}
	if !c.canTakeToken() {
		c.tokens.expiry.Store(exp.UnixNano())
		err := error(ErrTokenRefreshUnsupported)
		c.tokens.failed.Store(&err)
		c.log.Warn("amqpactor: the token cannot be renewed on this connection; the broker ends it when the token expires and the runtime reconnects with a fresh one",
			"broker", BrokerOf(c.amqp.Properties()), "token_expires", exp.UTC().Format(time.RFC3339))
		return
	}
	r := &refresher{tokens: k, put: c.putToken, log: c.log, st: &c.tokens, done: c.amqp.Done(),
		retryFirst: tokenRetryFirst, minLead: tokenMinLead}
	go r.run(got, exp)
}
