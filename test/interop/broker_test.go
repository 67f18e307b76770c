package interop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport/amqpwire"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// The AMQP 1.0 peers run against both test brokers, each case once per
// broker as the subtests artemis/PEER and rabbitmq4/PEER: ActiveMQ Artemis
// (ARTEMIS_URL, the Artemis dialect) and RabbitMQ 4 (AMQP_URL, the
// RabbitMQ4 dialect), e.g. the ones test/broker starts:
//
//	bash test/broker/artemis.sh start
//	bash test/broker/rabbitmq4.sh start
//	ARTEMIS_URL=$(bash test/broker/artemis.sh url) AMQP_URL=$(bash test/broker/rabbitmq4.sh url) \
//		REQUIRE_LIVE=1 go test -race ./test/interop/

// A broker is one of the test brokers: how the App dials it and where its
// URL comes from.
type broker struct {
	name    string
	dialect amqpactor.Dialect
	url     func(t *testing.T) string
}

var (
	artemis = broker{name: "artemis", dialect: amqpactor.Artemis, url: func(t *testing.T) string {
		return livetest.ArtemisURL(t, "the interop tests against Artemis (Qpid Proton, rhea and fe2o3)")
	}}
	rabbitmq4 = broker{name: "rabbitmq4", dialect: amqpactor.RabbitMQ4, url: func(t *testing.T) string {
		return livetest.URL(t, "the interop tests against RabbitMQ 4 (Qpid Proton, rhea, fe2o3 and pika)")
	}}
	brokers = []broker{artemis, rabbitmq4}
)

// eachPeer runs f once per broker and AMQP 1.0 peer, as the parallel
// subtest BROKER/PEER with its own env.
func eachPeer(t *testing.T, f func(t *testing.T, e *env)) {
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			for _, p := range peers {
				t.Run(p.name, func(t *testing.T) {
					t.Parallel()
					f(t, newEnvOn(t, b, p))
				})
			}
		})
	}
}

// urlUser is the user name in the URL: RabbitMQ refuses a message whose
// user-id is not the connection's user.
func urlUser(t *testing.T, u string) string {
	t.Helper()
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatalf("parse the broker URL: %v", err)
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

// env is what one test needs: the broker, its URL, a peer, and a
// management connection that declares the queues the peer uses and deletes
// every queue of the test at the end (RabbitMQ's /management node, or
// Artemis's activemq.management address).
type env struct {
	t      *testing.T
	broker broker
	url    string
	user   string
	peer   peer
	mgmt   *amqpwire.Management // RabbitMQ 4
	admin  *artemisAdmin        // Artemis
	// release is the broker's RabbitMQ release: what it stores as durable
	// changed in 4.2 (stored).
	release livetest.Version
}

// newEnv is an env on RabbitMQ 4, for the tests that need it: pika speaks
// AMQP 0-9-1, which Artemis does not, and the hostile tests read RabbitMQ's
// queue types and counts.
func newEnv(t *testing.T, p peer) *env {
	t.Helper()
	return newEnvOn(t, rabbitmq4, p)
}

func newEnvOn(t *testing.T, b broker, p peer) *env {
	t.Helper()
	u := b.url(t)
	p.require(t)
	e := &env{t: t, broker: b, url: u, user: urlUser(t, u), peer: p}
	if b.dialect == amqpactor.Artemis {
		e.admin = newArtemisAdmin(t, u)
		return e
	}
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
	e.mgmt, e.release = conn.Management(), livetest.RabbitMQ(t, u)
	return e
}

func (e *env) artemis() bool { return e.broker.dialect == amqpactor.Artemis }

// queue returns a fresh queue name, deleted when the test ends (after the
// apps of the test have stopped).
func (e *env) queue(what string) string {
	e.t.Helper()
	name := e.name(what)
	e.deleteAtEnd(name)
	return name
}

// name returns a fresh name for a node of the test.
func (e *env) name(what string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	return "interop." + e.peer.name + "." + what + "." + hex.EncodeToString(rnd[:])
}

// deleteAtEnd deletes the queue name (on Artemis, the address name with its
// queues) when the test ends.
func (e *env) deleteAtEnd(name string) {
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if e.artemis() {
			e.admin.deleteAddress(ctx, e.t, name)
		} else if err := brokeradmin.DeleteQueue(ctx, e.mgmt, name); err != nil {
			e.t.Errorf("delete queue %s: %v", name, err)
		}
	})
}

// declare declares a fresh queue (quorum, as the App would) for a peer to
// use. On Artemis it is a durable anycast queue of its own address: a peer
// that attached first without capabilities would otherwise make the broker
// create a multicast address, which the App's queue publishes do not reach.
func (e *env) declare(what string) string {
	e.t.Helper()
	name := e.queue(what)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if e.artemis() {
		e.admin.createQueue(ctx, e.t, name)
		return name
	}
	if _, err := e.mgmt.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name}); err != nil {
		e.t.Fatalf("declare queue %s: %v", name, err)
	}
	return name
}

// app returns an App on the broker with its dialect; setup subscribes
// before Start (so Start declares the queues on RabbitMQ, and attaches,
// creating them, on Artemis), and the App stops when the test ends.
func (e *env) app(setup func(app *amqpactor.App)) *amqpactor.App {
	e.t.Helper()
	app := amqpactor.New(amqpactor.Dial(e.url, amqpactor.WithDialect(e.broker.dialect),
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

// queued is how many messages the queue name holds.
func (e *env) queued(ctx context.Context, name string) (uint64, error) {
	if e.artemis() {
		text, err := e.admin.call(ctx, "queue."+name, "messageCount", "")
		if err != nil {
			return 0, err
		}
		var n []uint64
		if err := json.Unmarshal([]byte(text), &n); err != nil || len(n) != 1 {
			return 0, fmt.Errorf("Artemis says queue %s holds %q messages", name, text)
		}
		return n[0], nil
	}
	info, err := e.mgmt.QueueInfo(ctx, name)
	return info.Messages, err
}

// addr is how a peer addresses the queue name: /queues/NAME on RabbitMQ 4,
// the address of the same name on Artemis.
func (e *env) addr(name string) string {
	if e.artemis() {
		return name
	}
	return queuePath(name)
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
// What Artemis 2.40 changes in a message between its sender and a
// receiver, as seen with every client: nothing. It adds no annotations,
// leaves the header as sent (first-acquirer too) and keeps a message as
// durable only when its header says durable=true, the AMQP default.
//
// viaBroker applies the broker's changes to what a receiver is expected to
// see of a message sent to queue q; durable is what the broker stored it
// as.
func (e *env) viaBroker(want *amqpactor.Message, q string, durable bool) *amqpactor.Message {
	w := *want
	w.Durable, w.Transient = durable, !durable
	if e.artemis() {
		return &w
	}
	w.FirstAcquirer = true
	w.Annotations = map[string]any{"x-exchange": "", "x-routing-key": q}
	for k, v := range want.Annotations {
		w.Annotations[k] = v
	}
	return &w
}

// stored says whether the broker keeps a message that peer p sent with
// header h as durable. RabbitMQ 4.0 does unless the header says
// durable=false (which Proton cannot write); from 4.2 on, and on Artemis,
// only a header that says durable=true makes it so.
func (e *env) stored(p peer, h *peerHeader) bool {
	if e.artemis() || e.release.AtLeast(4, 2) {
		return h != nil && h.Durable != nil && *h.Durable
	}
	return !(p.explicitFalse && h != nil && h.Durable != nil && !*h.Durable) // RabbitMQ 4.0
}

// brokerAnnotations are the message annotations the broker adds, as a peer
// prints them: RabbitMQ's for queue q, none on Artemis.
func (e *env) brokerAnnotations(q string) []pair {
	if e.artemis() {
		return nil
	}
	return []pair{{tvSym("x-exchange"), tvStr("")}, {tvSym("x-routing-key"), tvStr(q)}}
}

// firstAcquirer is the first-acquirer a receiver sees in the header of a
// first delivery of a message sent with sent: RabbitMQ sets it, Artemis
// passes on what the sender wrote.
func (e *env) firstAcquirer(sent bool) bool { return !e.artemis() || sent }

// artemisAdmin speaks to Artemis's management address (activemq.management)
// over AMQP, as Artemis's own tools do: a request names a resource and an
// operation in application-properties, its body is a JSON array of the
// parameters, and the reply, to a dynamic address, says whether it worked.
type artemisAdmin struct {
	conn    *amqp.Conn
	sender  *amqp.Sender
	replies *amqp.Receiver
	mu      sync.Mutex
	n       int
}

func newArtemisAdmin(t *testing.T, u string) *artemisAdmin {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	// go-amqp authenticates with the URL's userinfo (SASL PLAIN).
	conn, err := amqp.Dial(ctx, u, &amqp.ConnOptions{ContainerID: "interop-artemis-admin"})
	if err != nil {
		t.Fatalf("connect for Artemis management: %v", err)
	}
	// Registered first, so it runs last: after every queue's deletion.
	t.Cleanup(func() { _ = conn.Close() })
	a := &artemisAdmin{conn: conn}
	sess, err := conn.NewSession(ctx, nil)
	if err != nil {
		t.Fatalf("Artemis management session: %v", err)
	}
	if a.sender, err = sess.NewSender(ctx, "activemq.management", nil); err != nil {
		t.Fatalf("attach to activemq.management: %v", err)
	}
	if a.replies, err = sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{DynamicAddress: true, Credit: 10}); err != nil {
		t.Fatalf("attach the management reply receiver: %v", err)
	}
	return a
}

// call runs the operation op of resource with params (or, with op empty,
// reads its attribute attr) and returns the text of the reply, a JSON
// array, or an error with it when the broker says the call failed.
func (a *artemisAdmin) call(ctx context.Context, resource, attr, op string, params ...any) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	body, err := json.Marshal(params)
	if err != nil {
		return "", err
	}
	reply := a.replies.Address()
	m := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: fmt.Sprintf("admin-%d", a.n), ReplyTo: &reply},
		ApplicationProperties: map[string]any{"_AMQ_ResourceName": resource},
		Value:                 string(body),
	}
	if op != "" {
		m.ApplicationProperties["_AMQ_OperationName"] = op
	} else {
		m.ApplicationProperties["_AMQ_Attribute"] = attr
	}
	if err := a.sender.Send(ctx, m, nil); err != nil {
		return "", err
	}
	r, err := a.replies.Receive(ctx, nil)
	if err != nil {
		return "", err
	}
	if err := a.replies.AcceptMessage(ctx, r); err != nil {
		return "", err
	}
	text, _ := r.Value.(string)
	if text == "" {
		text = string(r.GetData())
	}
	if ok, _ := r.ApplicationProperties["_AMQ_OperationSucceeded"].(bool); !ok {
		return text, fmt.Errorf("Artemis management %s %s%s: %s", resource, attr, op, text)
	}
	return text, nil
}

// createQueue creates the durable anycast queue name on the address name.
func (a *artemisAdmin) createQueue(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	conf, _ := json.Marshal(map[string]any{"name": name, "address": name, "routing-type": "ANYCAST", "durable": true})
	if _, err := a.call(ctx, "broker", "", "createQueue", string(conf), false); err != nil {
		t.Fatalf("create queue %s: %v", name, err)
	}
}

// deleteAddress removes the address name with its queues; one the broker
// removed by itself (an auto-created queue, once empty and unused) is not
// an error.
func (a *artemisAdmin) deleteAddress(ctx context.Context, t *testing.T, name string) {
	if _, err := a.call(ctx, "broker", "", "deleteAddress", name, true); err != nil && !strings.Contains(strings.ToLower(err.Error()), "does not exist") {
		t.Errorf("delete address %s: %v", name, err)
	}
}
