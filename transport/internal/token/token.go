// Package token is what both transports do with a token source
// (Config.TokenSource): keep the newest token for the next connection, and
// renew the token a live connection holds before it expires, each transport
// handing the broker the new one its own way (AMQP 1.0: a PUT to the
// management node; 0-9-1: connection.update-secret). No token is ever
// kept where fmt could print it, nor quoted in an error or log line.
package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/internal/secret"
	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
)

// Renewal timing: a token is renewed once RefreshShare of its life has
// passed, leaving the rest for retries; a failed renewal is tried again
// after RetryFirst, doubling, at most Tries times per token and never past
// its expiry; MinLead keeps a renewal from waiting until the last instant
// of a token that lives a few seconds only.
const (
	RefreshShare = 0.75
	RetryFirst   = time.Second
	Tries        = 5
	MinLead      = time.Second
)

// Source is Config.TokenSource.
type Source = func(ctx context.Context) (token string, expiry time.Time, err error)

// Cache holds the newest token of a connector, shared by its connections: a
// renewal on one connection is what the next Connect uses.
type Cache struct {
	source Source

	mu     sync.Mutex // guards the fields below
	token  secret.String
	expiry time.Time // zero: never expires
}

// NewCache returns the cache of source, nil when source is: a nil *Cache
// means the connector has no token source.
func NewCache(source Source) *Cache {
	if source == nil {
		return nil
	}
	return &Cache{source: source}
}

// Grant is the token a Connect authenticates with, and its life.
type Grant struct {
	Token       string
	Got, Expiry time.Time
}

// Grant returns the newest token, asking the source for a fresh one when
// there is none yet or it expires soon. A failing source fails the
// Connect, as an unreachable broker does (redacted names the URL).
func (k *Cache) Grant(ctx context.Context, redacted string) (Grant, error) {
	if k == nil {
		return Grant{}, nil
	}
	got := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.token != nil && (k.expiry.IsZero() || time.Until(k.expiry) > MinLead*5) {
		return Grant{Token: k.token(), Got: got, Expiry: k.expiry}, nil
	}
	tok, exp, err := k.fetchLocked(ctx)
	if err != nil {
		return Grant{}, &endpoint.ConnectError{URL: redacted, Msg: "no token", Err: err}
	}
	return Grant{Token: tok, Got: got, Expiry: exp}, nil
}

// Fresh asks the source for a new token and keeps it.
func (k *Cache) Fresh(ctx context.Context) (string, time.Time, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.fetchLocked(ctx)
}

// Refused forgets the token kept, which the broker refused at connect
// (revoked, or expired early), so that the next Grant asks the source.
func (k *Cache) Refused() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.token, k.expiry = nil, time.Time{}
}

// Newest is the token kept last.
func (k *Cache) Newest() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.token == nil {
		return ""
	}
	return k.token()
}

func (k *Cache) fetchLocked(ctx context.Context) (string, time.Time, error) {
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
	lead := time.Duration(float64(exp.Sub(got)) * (1 - RefreshShare))
	if lead < minLead {
		lead = minLead
	}
	return exp.Add(-lead)
}

// State is a connection's view of its token, written by its Renewer and
// read by the connection's Err.
type State struct {
	expiry atomic.Int64 // unix nanoseconds of the token the broker holds; 0: none or never
	failed atomic.Pointer[error]
}

// WillExpire notes that the token the broker holds expires at exp and
// cannot be renewed, for why: ExpiredWith says so once it has.
func (s *State) WillExpire(exp time.Time, why error) {
	s.expiry.Store(exp.UnixNano())
	s.failed.Store(&why)
}

// ExpiredWith is why the connection's token expired unrenewed, nil while
// it has not.
func (s *State) ExpiredWith(now time.Time) error {
	exp := s.expiry.Load()
	if exp == 0 || now.UnixNano() < exp {
		return nil
	}
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Renewer renews the token a connection authenticated with before it
// expires, until Done closes: it asks the Cache for a new one and gives it
// to the broker by Put. Failures are logged and retried within bounds; when
// the token expires unrenewed the cause is kept in State for the
// connection's Err, and the broker ends the connection.
type Renewer struct {
	Cache *Cache
	Put   func(ctx context.Context, token string) error
	Log   *slog.Logger
	State *State
	Done  <-chan struct{}
	// RetryFirst and MinLead are the package's, which tests shorten.
	RetryFirst, MinLead time.Duration
}

// Run renews the token of g and every later one; it returns when Done
// closes, or when a token expires unrenewed.
func (r *Renewer) Run(g Grant) {
	got, exp := g.Got, g.Expiry
	for !exp.IsZero() {
		r.State.expiry.Store(exp.UnixNano())
		if !r.sleepUntil(refreshAt(got, exp, r.MinLead)) {
			return
		}
		var err error
		retry := r.RetryFirst
		for try := 1; ; try++ {
			var next time.Time
			got = time.Now()
			next, err = r.renew(exp)
			if err == nil {
				r.Log.Debug("amqpactor: token refreshed", "expires", next.UTC().Format(time.RFC3339))
				exp = next
				break
			}
			if try >= Tries || time.Now().Add(retry).After(exp) {
				break
			}
			r.Log.Warn("amqpactor: token refresh failed; retrying", "try", try, "retry_in", retry, "error", err)
			if !r.sleepUntil(time.Now().Add(retry)) {
				return
			}
			retry *= 2
		}
		if err != nil {
			err = fmt.Errorf("the token expired at %s unrenewed: %w", exp.UTC().Format(time.RFC3339), err)
			r.State.failed.Store(&err)
			r.Log.Error("amqpactor: token refresh failed for good; the broker will end the connection at the token's expiry", "error", err)
			return
		}
	}
	r.State.expiry.Store(0)
}

// renew gets a fresh token and hands it to the broker, each bounded by what
// is left of the current token's life.
func (r *Renewer) renew(exp time.Time) (time.Time, error) {
	ctx, cancel := context.WithDeadline(context.Background(), exp)
	defer cancel()
	go func() {
		select {
		case <-r.Done:
			cancel()
		case <-ctx.Done():
		}
	}()
	tok, next, err := r.Cache.Fresh(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := r.Put(ctx, tok); err != nil {
		return time.Time{}, endpoint.Scrub(err, tok)
	}
	return next, nil
}

// sleepUntil waits until t; false when Done closed first.
func (r *Renewer) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.Done:
		return false
	}
}
