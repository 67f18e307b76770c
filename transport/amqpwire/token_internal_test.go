package amqpwire

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport/internal/token"
)

// fakeSource hands out tok-secret-1, tok-secret-2, … each living life.
type fakeSource struct {
	life  time.Duration
	calls atomic.Int64
}

func (s *fakeSource) get(context.Context) (string, time.Time, error) {
	n := s.calls.Add(1)
	return fmt.Sprintf("tok-secret-%d", n), time.Now().Add(s.life), nil
}

// A failing source fails the Connect (retried as an unreachable broker),
// and a token source with a mechanism other than PLAIN is refused for good.
func TestTokenSourceConnect(t *testing.T) {
	c := New(Config{URL: "amqp://127.0.0.1:1/", TokenSource: func(context.Context) (string, time.Time, error) {
		return "", time.Time{}, errors.New("idp down")
	}})
	_, err := c.Connect(context.Background())
	require.ErrorContains(t, err, "idp down")
	var term interface{ Terminal() bool }
	require.False(t, errors.As(err, &term) && term.Terminal(), "a source that fails now may answer later")

	c = New(Config{URL: "amqp://127.0.0.1:1/", SASL: SASLAnonymous, TokenSource: (&fakeSource{life: time.Hour}).get})
	_, err = c.Connect(context.Background())
	require.ErrorContains(t, err, "needs SASL PLAIN")
	require.True(t, errors.As(err, &term) && term.Terminal(), "settings that never work are terminal")

	// The token is the password, never printed: a port nothing answers on.
	src := &fakeSource{life: time.Hour}
	c = New(Config{URL: "amqp://127.0.0.1:1/", TokenSource: src.get, DialTimeout: time.Second})
	_, err = c.Connect(context.Background())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "tok-secret")
	require.Equal(t, int64(1), src.calls.Load())
	p, err := c.(*connector).prepare(&c.(*connector).targets[0], "tok-secret-1")
	require.NoError(t, err)
	require.Equal(t, "PLAIN", p.mech, "a token goes as the PLAIN password")
	require.False(t, strings.Contains(fmt.Sprintf("%+v %#v", c, c), "tok-secret"), "fmt shows no token")
}

// A broker that cannot take a new token on a live connection (Artemis,
// RabbitMQ 4.0) gets no renewal attempt; once the token expires, the
// connection's error says why it ended.
func TestTokenOnBrokerThatCannotRenew(t *testing.T) {
	for _, d := range []address.Dialect{address.Artemis, address.RabbitMQ4} {
		c := &Conn{dialect: d, log: slog.New(slog.DiscardHandler)}
		exp := time.Now().Add(time.Hour)
		c.startTokens(token.NewCache((&fakeSource{life: time.Hour}).get), token.Grant{Token: "tok-secret-1", Got: time.Now(), Expiry: exp})
		require.NoError(t, c.tokens.ExpiredWith(time.Now()), "not yet expired")
		require.ErrorIs(t, c.tokens.ExpiredWith(exp.Add(time.Second)), ErrTokenRefreshUnsupported, "%s", d)
	}
}
