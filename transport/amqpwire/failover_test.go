package amqpwire_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// dropper is a TCP endpoint that accepts connections and closes them at
// once: a node that is reachable but never opens AMQP. It counts them.
type dropper struct {
	ln       net.Listener
	accepted atomic.Int64
	done     chan struct{}
}

func newDropper(t *testing.T) *dropper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	d := &dropper{ln: ln, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.accepted.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-d.done
	})
	return d
}

func (d *dropper) url(user string) string {
	return fmt.Sprintf("amqp://%s:%s@%s/", user, secret, d.ln.Addr())
}

// refusedURL names a loopback port nothing listens on.
func refusedURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	addr := ln.Addr().String()
	_ = ln.Close()
	return "amqp://user:" + secret + "@" + addr + "/"
}

// When no endpoint answers, the error names each one (without its
// password), and String keeps naming the Dial URL.
func TestFailoverNoEndpointAnswers(t *testing.T) {
	a, b := newDropper(t), refusedURL(t)
	c := amqpwire.New(amqpwire.Config{URL: a.url("first"), Failover: []string{b}, DialTimeout: 5 * time.Second})
	_, err := c.Connect(context.Background())
	expect(t, err != nil, "Connect succeeded")
	noSecret(t, err.Error(), secret)
	expect(t, strings.Contains(err.Error(), "first:xxxxx@"+a.ln.Addr().String()), "the error names the first endpoint: %v", err)
	expect(t, strings.Contains(err.Error(), strings.Replace(b, secret, "xxxxx", 1)), "the error names the second endpoint: %v", err)
	expect(t, a.accepted.Load() == 1, "the first endpoint was tried once, not %d times", a.accepted.Load())
	var term interface{ Terminal() bool }
	expect(t, !errors.As(err, &term) || !term.Terminal(), "unreachable endpoints are worth retrying")
	expect(t, c.String() == "amqp://first:xxxxx@"+a.ln.Addr().String()+"/", "String names the Dial URL: %s", c.String())
}

// A malformed failover URL is reported by the first Connect, naming it
// without its password, even though the Dial URL could be reached.
func TestFailoverBadURLReportedAtOnce(t *testing.T) {
	a := newDropper(t)
	c := amqpwire.New(amqpwire.Config{URL: a.url("first"), Failover: []string{"amqp://second:" + secret + "@host:port/"}})
	_, err := c.Connect(context.Background())
	expect(t, err != nil, "Connect succeeded")
	noSecret(t, err.Error(), secret)
	expect(t, strings.Contains(err.Error(), "second:xxxxx@host:port"), "the error names the failover URL: %v", err)
	expect(t, a.accepted.Load() == 0, "nothing was dialled")

	// An empty failover URL is an error too, not an endpoint skipped.
	c = amqpwire.New(amqpwire.Config{URL: a.url("first"), Failover: []string{""}})
	_, err = c.Connect(context.Background())
	expect(t, err != nil && strings.Contains(err.Error(), "no broker URL"), "an empty failover URL is refused: %v", err)

	// The cleartext rule holds for every endpoint.
	c = amqpwire.New(amqpwire.Config{URL: a.url("first"), Failover: []string{"amqp://second:" + secret + "@192.0.2.1:5672/"}})
	_, err = c.Connect(context.Background())
	expect(t, errors.Is(err, amqpwire.ErrCleartextCredentials), "PLAIN to a remote failover host is refused: %v", err)
	noSecret(t, err.Error(), secret)
}

// Live: the Dial URL is unreachable, so Connect goes on to the next
// endpoint, the broker; the connection and the connector then name it, and
// the next Connect tries it first.
func TestFailoverLive(t *testing.T) {
	u := liveURL(t)
	dead := newDropper(t)
	refused := refusedURL(t)
	c := amqpwire.New(amqpwire.Config{URL: dead.url("first"), Failover: []string{refused, u}, Dialect: address.RabbitMQ4})
	ctx := testContext(t)
	conn, err := c.Connect(ctx)
	must(t, err, "connect through the failover list")
	want := conn.(fmt.Stringer).String()
	expect(t, !strings.Contains(want, "first"), "the connection names the broker, not the Dial URL: %s", want)
	expect(t, c.String() == want, "the connector names the endpoint it is on: %s, want %s", c.String(), want)
	must(t, conn.Close(ctx), "close")
	expect(t, dead.accepted.Load() == 1, "the Dial URL was tried once: %d", dead.accepted.Load())

	// The endpoint that worked last is tried first.
	conn, err = c.Connect(ctx)
	must(t, err, "reconnect")
	expect(t, dead.accepted.Load() == 1, "the Dial URL was not tried again: %d", dead.accepted.Load())
	must(t, conn.Close(ctx), "close")
	var _ transport.Connector = c
}
