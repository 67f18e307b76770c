package amqp091_test

import (
	"context"
	"errors"
	"net"
	neturl "net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/test/kit/livetest"

	"github.com/amqpactor/amqpactor/transport/amqp091"
)

const secret = "p@ss/w?rd#:%zz"

// TestConnectErrorsAreRedacted: no part of the password in String or in
// any error Connect returns, and PLAIN in clear text to a remote host is
// refused before anything is dialled.
func TestConnectErrorsAreRedacted(t *testing.T) {
	// A port nothing listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		url  string
		want string
	}{
		{"amqp://user:" + secret + "@" + addr + "/", "dial"},
		{"amqp://user:" + secret + "@192.0.2.1:5672/", "SASL PLAIN over plain TCP"},
		{"http://user:" + secret + "@" + addr + "/", "unsupported scheme"},
		{"amqp://user:" + secret + "@/", "no host"},
		{"", "no broker URL"},
	} {
		c := amqp091.New(amqp091.Config{URL: tc.url, DialTimeout: 2 * time.Second})
		require.NotContains(t, c.String(), "p@ss")
		_, err := c.Connect(ctx)
		require.Error(t, err, tc.url)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "p@ss", "the password in %q", err)
		require.NotContains(t, err.Error(), "w?rd", "the password in %q", err)
		if tc.want == "SASL PLAIN over plain TCP" {
			require.True(t, errors.Is(err, amqp091.ErrCleartextCredentials))
		}
	}
}

// TestLiveWrongPassword: the broker refusing the credentials is a terminal
// error (reconnecting cannot cure it) that does not quote the password.
func TestLiveWrongPassword(t *testing.T) {
	url := livetest.URL(t, "the AMQP 0-9-1 credentials test")
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	u.User = neturl.UserPassword("guest", "wrong-"+secret)
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	c := amqp091.New(amqp091.Config{URL: u.String()})
	_, err = c.Connect(ctx)
	require.ErrorContains(t, err, "authentication failed")
	require.NotContains(t, err.Error(), "p@ss")
	var term interface{ Terminal() bool }
	require.True(t, errors.As(err, &term) && term.Terminal(), "a refused login is terminal: %v", err)
}
