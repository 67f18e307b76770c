package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/brokeradmin"
	"github.com/amqpactor/amqpactor/transport/amqpwire"

	"github.com/amqpactor/amqpactor/internal/livetest"
)

// The tests run against a RabbitMQ 4 broker named by AMQP_URL, e.g. the one
// test/broker/rabbitmq4.sh starts:
//
//	bash test/broker/rabbitmq4.sh start
//	AMQP_URL=$(bash test/broker/rabbitmq4.sh url) REQUIRE_LIVE=1 go test -race ./test/interop/

func liveURL(t *testing.T) string {
	t.Helper()
	return livetest.URL(t, "the interop tests against RabbitMQ 4 (Qpid Proton, rhea and pika)")
}

// urlUser is the user name in the URL: RabbitMQ refuses a message whose
// user-id is not the connection's user.
func urlUser(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse AMQP_URL: %v", err)
	}
	if pu.User == nil || pu.User.Username() == "" {
		return "guest"
	}
	return pu.User.Username()
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// env is what one test needs: the broker URL, a peer, and a management
// connection that declares the queues the peer uses and deletes every
// queue of the test at the end.
type env struct {
	t    *testing.T
	url  string
	user string
	peer peer
	mgmt *amqpwire.Management
	// release is the broker's RabbitMQ release: what it stores as durable
	// changed in 4.2 (stored).
	release livetest.Version
}

func newEnv(t *testing.T, p peer) *env {
	t.Helper()
	u := liveURL(t)
	p.require(t)
	c, err := amqpwire.New(amqpwire.Config{URL: u, Dialect: amqpactor.RabbitMQ4, ContainerID: "interop-management"}).
		Connect(testContext(t, 30*time.Second))
	if err != nil {
		t.Fatalf("connect for management: %v", err)
	}
	conn := c.(*amqpwire.Conn)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := conn.Close(ctx); err != nil {
			t.Errorf("close the management connection: %v", err)
		}
	})
	return &env{t: t, url: u, user: urlUser(t, u), peer: p, mgmt: conn.Management(), release: livetest.RabbitMQ(t, u)}
}

// queue returns a fresh queue name, deleted when the test ends (after the
// apps of the test have stopped).
func (e *env) queue(what string) string {
	e.t.Helper()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "interop." + e.peer.name + "." + what + "." + hex.EncodeToString(rnd[:])
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := brokeradmin.DeleteQueue(ctx, e.mgmt, name); err != nil {
			e.t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// declare declares a fresh queue (quorum, as the App would) for a peer to use.
func (e *env) declare(what string) string {
	e.t.Helper()
	name := e.queue(what)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.mgmt.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name}); err != nil {
		e.t.Fatalf("declare queue %s: %v", name, err)
	}
	return name
}

// app returns an App on the broker with the RabbitMQ4 dialect; setup
// subscribes before Start (so Start declares the queues), and the App stops
// when the test ends.
func (e *env) app(setup func(app *amqpactor.App)) *amqpactor.App {
	e.t.Helper()
	app := amqpactor.New(amqpactor.Dial(e.url, amqpactor.WithDialect(amqpactor.RabbitMQ4),
		amqpactor.WithContainerID("interop-amqpactor")), amqpactor.WithName("interop"))
	return e.started(app, setup, "start the App")
}

// started runs setup on app, starts it (failing the test with what) and
// stops it when the test ends.
func (e *env) started(app *amqpactor.App, setup func(app *amqpactor.App), what string) *amqpactor.App {
	e.t.Helper()
	if setup != nil {
		setup(app)
	}
	if err := app.Start(testContext(e.t, 30*time.Second)); err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(ctx); err != nil {
			e.t.Errorf("stop the App: %v", err)
		}
	})
	return app
}

// peerEnv is the environment of one peer run.
func (e *env) peerEnv(address string, kv ...string) map[string]string {
	m := map[string]string{"PEER_URL": e.url, "PEER_ADDRESS": address}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func queuePath(name string) string { return "/queues/" + name }

// collect returns a handler that hands every message to the returned
// channel, and a function that waits (bounded by ctx) for n of them.
func collect(t *testing.T) (amqpactor.Handler, func(ctx context.Context, n int) []*amqpactor.Message) {
	ch := make(chan *amqpactor.Message, 64)
	h := func(ctx context.Context, m *amqpactor.Message) error {
		select {
		case ch <- m:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	wait := func(ctx context.Context, n int) []*amqpactor.Message {
		t.Helper()
		var got []*amqpactor.Message
		for len(got) < n {
			select {
			case m := <-ch:
				got = append(got, m)
			case <-ctx.Done():
				t.Fatalf("received %d of %d messages: %v", len(got), n, ctx.Err())
			}
		}
		return got
	}
	return h, wait
}

// What RabbitMQ 4.0 changes in a message between its sender and a receiver,
// as seen on this broker with every client (ours and the peers):
//
//   - it adds two message annotations: x-exchange (the empty string, the
//     default exchange, for a message sent to /queues/NAME) and
//     x-routing-key (the queue's name);
//   - it sets first-acquirer in the header of a first delivery;
//   - it treats a message whose header does not say durable=false (no
//     header, or a header without the durable field) as durable, and says
//     so in the header it delivers, though the AMQP default is false.
//     Proton leaves a false durable field off the wire, so it cannot send a
//     non-durable message here; rhea writes the field when it is given.
//     amqpactor always writes a header saying durable=true unless the
//     Message is Transient (issue 28): RabbitMQ 4.2 and later store a
//     message without a header as transient (env.stored).
//
// viaBroker applies those changes to what a receiver is expected to see of
// a message sent to queue q; durable is what the broker stored it as.
func viaBroker(want *amqpactor.Message, q string, durable bool) *amqpactor.Message {
	w := *want
	w.FirstAcquirer = true
	w.Durable, w.Transient = durable, !durable
	w.Annotations = map[string]any{"x-exchange": "", "x-routing-key": q}
	for k, v := range want.Annotations {
		w.Annotations[k] = v
	}
	return &w
}

// stored says whether the broker keeps a message that peer p sent with
// header h as durable. RabbitMQ 4.0 does unless the header says
// durable=false (which Proton cannot write); from 4.2 on only a header that
// says durable=true makes it so.
func (e *env) stored(p peer, h *peerHeader) bool {
	if e.release.AtLeast(4, 2) {
		return h != nil && h.Durable != nil && *h.Durable
	}
	return !(p.explicitFalse && h != nil && h.Durable != nil && !*h.Durable) // RabbitMQ 4.0
}

// brokerAnnotations are the message annotations RabbitMQ 4.0 adds, as a
// peer prints them.
func brokerAnnotations(q string) []pair {
	return []pair{{tvSym("x-exchange"), tvStr("")}, {tvSym("x-routing-key"), tvStr(q)}}
}
