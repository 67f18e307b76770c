package endpoint

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"amqp://u:p@h:5672/vh":          "amqp://u:xxxxx@h:5672/vh",
		"amqps://u:p/a?b#c@d@h/":        "amqps://u:xxxxx@h/",
		"amqp://u@h/":                   "amqp://u@h/",
		"amqp://h/":                     "amqp://h/",
		"u:secret@h:5672":               "xxxxx@h:5672",
		"amqp://u:p\x7f@h/":             "amqp://xxxxx@h/",
		"amqp://us%2Fer:p%zz@[::1]:1/v": "amqp://us%2Fer:xxxxx@[::1]:1/v",
	} {
		require.Equal(t, want, RedactURL(raw), raw)
	}
}

func TestParse(t *testing.T) {
	u, err := Parse("amqps://al%40ice:p/w@d@[::1]/vh", "redacted")
	require.NoError(t, err)
	require.Equal(t, URL{Rest: "amqps://[::1]/vh", Userinfo: "al%40ice:p/w@d", User: "al@ice", Password: "p/w@d",
		HasUser: true, TLS: true, Host: "::1", Port: "5671", Path: "/vh"}, u)
	require.Equal(t, "[::1]:5671", u.HostPort())

	for raw, want := range map[string]string{
		"":                        "amqpactor: connect (empty URL): no broker URL",
		"http://u:s3cret@h/":      `amqpactor: connect redacted: unsupported scheme "http" (want amqp or amqps)`,
		"amqp://u:s3cret@/":       "amqpactor: connect redacted: URL has no host",
		"amqp://u:s3cret@h:x/":    `amqpactor: connect redacted: invalid URL: invalid port ":x" after host`,
		"u:s3cret@h":              "amqpactor: connect redacted: invalid URL: no scheme: want amqp://[user:password@]host[:port][/vhost]",
		"amqp://u:s3\x01cret@h/":  "amqpactor: connect redacted: invalid URL: the userinfo holds a control character",
		"amqp://u:s3cret@h/%zz/x": `amqpactor: connect redacted: invalid URL: invalid URL escape "%zz"`,
	} {
		_, err := Parse(raw, "redacted")
		require.EqualError(t, err, want, "%q", raw)
		var ce *ConnectError
		require.ErrorAs(t, err, &ce)
		require.False(t, ce.Terminal())
	}
}

func TestMechanism(t *testing.T) {
	remote, err := Parse("amqp://u:p@192.0.2.1/", "r")
	require.NoError(t, err)
	local, err := Parse("amqp://u:p@localhost/", "l")
	require.NoError(t, err)
	anon, err := Parse("amqp://192.0.2.1/", "a")
	require.NoError(t, err)

	_, err = Mechanism(Config{}, remote, "r")
	require.ErrorIs(t, err, ErrCleartextCredentials)
	require.ErrorContains(t, err, "InsecurePlain")
	for _, c := range []struct {
		cfg  Config
		u    URL
		want string
	}{
		{Config{InsecurePlain: true}, remote, "PLAIN"},
		{Config{}, local, "PLAIN"},
		{Config{}, anon, "ANONYMOUS"},
		{Config{SASL: SASLAnonymous}, remote, "ANONYMOUS"},
		{Config{SASL: SASLExternal}, remote, "EXTERNAL"},
	} {
		got, err := Mechanism(c.cfg, c.u, "x")
		require.NoError(t, err)
		require.Equal(t, c.want, got)
	}
	_, err = Mechanism(Config{SASL: 9}, anon, "a")
	require.EqualError(t, err, "amqpactor: connect a: unknown SASL setting 9")
}

func TestScrubKeepsTheError(t *testing.T) {
	base := errors.New("dial u:s3cret failed")
	err := &ConnectError{URL: "amqp://u:xxxxx@h/", Msg: "dial", Err: Scrub(base, "", "s3cret"), Permanent: true}
	require.Equal(t, "amqpactor: connect amqp://u:xxxxx@h/: dial: dial u:xxxxx failed", err.Error())
	require.ErrorIs(t, err, base)
	require.True(t, err.Terminal())
	require.Same(t, base, Scrub(base, "absent"), "an error without the secret is kept as it is")
	require.NoError(t, Scrub(nil, "s3cret"))
}

func TestConfigFormatIsRedacted(t *testing.T) {
	c := Config{URL: "amqp://u:s3cret@h/", Failover: []string{"amqp://v:0th3r@g/"}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		s := fmt.Sprintf(verb, c)
		require.NotContains(t, s, "s3cret", verb)
		require.NotContains(t, s, "0th3r", verb)
	}
	require.True(t, strings.HasPrefix(fmt.Sprintf("%#v", c), `amqpwire.Config{URL:"amqp://u:xxxxx@h/"`), "%#v", c)
	require.Equal(t, "amqp://u:s3cret@h/", c.URL, "Format leaves c alone")
}

func TestBroker(t *testing.T) {
	require.Equal(t, "RabbitMQ 4.0.5", Broker(map[string]any{"product": "RabbitMQ", "version": "4.0.5"}))
	require.Equal(t, "RabbitMQ", Broker(map[string]any{"product": "RabbitMQ"}))
	require.Empty(t, Broker(nil))
}

func TestBound(t *testing.T) {
	ctx, cancel := Bound(nil, time.Minute) //nolint:staticcheck // nil is what Bound must accept
	defer cancel()
	dl, ok := ctx.Deadline()
	require.True(t, ok, "a nil context gets the bound")
	require.WithinDuration(t, time.Now().Add(time.Minute), dl, 10*time.Second)

	own, ownCancel := context.WithTimeout(context.Background(), time.Hour)
	defer ownCancel()
	ctx, cancel = Bound(own, time.Minute)
	defer cancel()
	require.Equal(t, own, ctx, "a context with a deadline keeps its own")

	done, doneCancel := context.WithCancel(context.Background())
	doneCancel()
	ctx, cancel = Bound(done, time.Minute)
	defer cancel()
	require.Error(t, ctx.Err(), "a done context stays done")
}
