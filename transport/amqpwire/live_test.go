package amqpwire_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// The live tests run against a RabbitMQ 4 broker named by AMQP_URL, e.g. the
// one test/broker/rabbitmq4.sh starts:
//
//	bash test/broker/rabbitmq4.sh start
//	AMQP_URL=$(bash test/broker/rabbitmq4.sh url) REQUIRE_LIVE=1 go test -race ./transport/amqpwire/

func liveURL(t *testing.T) string {
	t.Helper()
	return livetest.URL(t, "the live RabbitMQ 4 tests of transport/amqpwire")
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// connect opens a RabbitMQ4-dialect connection that the test closes.
func connect(t *testing.T) *amqpwire.Conn {
	t.Helper()
	c := amqpwire.New(amqpwire.Config{URL: liveURL(t), Dialect: address.RabbitMQ4, ContainerID: "amqpwire-test"})
	conn, err := c.Connect(testContext(t))
	must(t, err, "connect")
	t.Cleanup(func() {
		if err := conn.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return conn.(*amqpwire.Conn)
}

func session(t *testing.T, conn *amqpwire.Conn) transport.Session {
	t.Helper()
	s, err := conn.NewSession(testContext(t))
	must(t, err, "begin session")
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// queueName returns a fresh queue name and deletes the queue after the test.
func queueName(t *testing.T, conn *amqpwire.Conn) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "amqpwire-test." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(rnd[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := brokeradmin.DeleteQueue(ctx, conn.Management(), name); err != nil {
			t.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

func newSender(t *testing.T, s transport.Session, a address.Address) transport.Sender {
	t.Helper()
	snd, err := s.NewSender(testContext(t), transport.SenderOptions{Address: a})
	must(t, err, "attach sender to "+a.String())
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	return snd
}

func newReceiver(t *testing.T, s transport.Session, o transport.ReceiverOptions) transport.Receiver {
	t.Helper()
	rcv, err := s.NewReceiver(testContext(t), o)
	must(t, err, "attach receiver to "+o.Address.String())
	t.Cleanup(func() { _ = rcv.Close(context.Background()) })
	return rcv
}

func text(body string) *amqp.Message { return amqp.NewMessage([]byte(body)) }

func bodyOf(m *amqp.Message) string { return string(m.GetData()) }

func receive(t *testing.T, r transport.Receiver, within time.Duration) *amqp.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	m, err := r.Receive(ctx)
	must(t, err, "receive")
	return m
}

func TestLiveSendReceiveSettleModes(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	for _, preSettled := range []bool{false, true} {
		name := "unsettled-receiver"
		if preSettled {
			name = "settled-receiver"
		}
		t.Run(name, func(t *testing.T) {
			q := address.Queue(queueName(t, conn))
			snd := newSender(t, s, q)
			expect(t, snd.Address() == "/queues/"+url.PathEscape(q.Name()), "sender address %q", snd.Address())
			rcv := newReceiver(t, s, transport.ReceiverOptions{Address: q, Credit: 10, Settled: preSettled})
			must(t, rcv.IssueCredit(10), "issue credit")

			ctx := testContext(t)
			for i, settled := range []bool{false, true} {
				body := []string{"first", "second"}[i]
				rc, err := snd.Send(ctx, text(body), settled)
				must(t, err, "send")
				if settled {
					expect(t, rc == nil, "a settled send returned a receipt")
				} else {
					o, err := rc.Wait(ctx)
					must(t, err, "wait for the outcome")
					expect(t, o.Kind == messages.Accepted, "outcome %v, want accepted", o)
				}
				m := receive(t, rcv, 10*time.Second)
				expect(t, bodyOf(m) == body, "received %q, want %q", bodyOf(m), body)
				must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
			}
		})
	}
}

// A full queue with x-overflow reject-publish refuses the publish; the
// outcome is mapped from the broker's delivery state as it is.
func TestLiveRejectedPublishOutcome(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	name := queueName(t, conn)
	_, err := conn.Management().DeclareQueue(ctx, amqpwire.QueueSpec{Name: name, Arguments: map[string]any{
		"x-max-length": int64(1), "x-overflow": "reject-publish",
	}})
	must(t, err, "declare the bounded queue")

	s := session(t, conn)
	// The sender's own declaration (a plain quorum queue) conflicts with the
	// queue's arguments: the queue is used as it is.
	snd := newSender(t, s, address.Queue(name))
	rc, err := snd.Send(ctx, text("fits"), false)
	must(t, err, "send 1")
	o, err := rc.Wait(ctx)
	must(t, err, "outcome 1")
	expect(t, o.Kind == messages.Accepted, "first publish: %v, want accepted", o)

	// A quorum queue enforces its length once it is over the limit, so the
	// refusal may come one message late.
	refused := false
	for i := 2; i <= 4 && !refused; i++ {
		rc, err = snd.Send(ctx, text("overflows"), false)
		must(t, err, "send")
		o, err = rc.Wait(ctx)
		must(t, err, "outcome")
		t.Logf("publish %d to the full queue: %v", i, o)
		refused = o.Kind != messages.Accepted
	}
	expect(t, refused, "the full queue accepted every publish")
	// RabbitMQ 4.0 answers rejected, without an error condition.
	expect(t, o.Kind == messages.Rejected, "refused publish: %v, want rejected", o)
	info, err := conn.Management().QueueInfo(ctx, name)
	must(t, err, "queue info")
	t.Logf("queue %s holds %d messages", name, info.Messages)
}

// The receiver gets exactly the credit it granted, however much is waiting.
func TestLiveCreditBound(t *testing.T) {
	const n = 4
	conn := connect(t)
	s := session(t, conn)
	q := address.Queue(queueName(t, conn))
	snd := newSender(t, s, q)
	rcv := newReceiver(t, s, transport.ReceiverOptions{Address: q, Credit: n})
	ctx := testContext(t)

	var receipts []transport.Receipt
	for i := 0; i < 3*n; i++ {
		rc, err := snd.Send(ctx, text("m"), false)
		must(t, err, "send")
		receipts = append(receipts, rc)
	}
	for _, rc := range receipts {
		o, err := rc.Wait(ctx)
		must(t, err, "outcome")
		expect(t, o.Kind == messages.Accepted, "outcome %v", o)
	}

	must(t, rcv.IssueCredit(n), "issue the window")
	err := rcv.IssueCredit(1)
	expect(t, errors.Is(err, amqpwire.ErrCreditWindow), "credit beyond the window: %v, want ErrCreditWindow", err)

	var got []*amqp.Message
	for i := 0; i < n; i++ {
		got = append(got, receive(t, rcv, 10*time.Second))
	}
	quiet, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	m, err := rcv.Receive(quiet)
	cancel()
	expect(t, m == nil && errors.Is(err, context.DeadlineExceeded), "a transfer beyond the credit arrived (err %v)", err)
	for _, m := range got {
		must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}

	// Settling gives nothing back by itself: credit comes only from IssueCredit.
	quiet, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
	m, err = rcv.Receive(quiet)
	cancel()
	expect(t, m == nil && errors.Is(err, context.DeadlineExceeded), "a transfer arrived without credit (err %v)", err)

	must(t, rcv.IssueCredit(n), "issue the window again")
	for i := 0; i < n; i++ {
		m := receive(t, rcv, 10*time.Second)
		must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
	info, err := conn.Management().QueueInfo(ctx, q.Name())
	must(t, err, "queue info")
	expect(t, info.Messages == n, "%d messages left, want %d", info.Messages, n)
}

// RabbitMQ 4 never creates a node on attach: a raw address is not declared,
// and the broker's refusal names the address.
func TestLiveRefusedAttachNamesAddress(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	ctx := testContext(t)
	const missing = "/queues/amqpwire-test.missing"

	_, err := s.NewReceiver(ctx, transport.ReceiverOptions{Address: address.Raw(missing), Credit: 1})
	checkNotFound(t, err, missing)

	s2 := session(t, conn)
	_, err = s2.NewSender(ctx, transport.SenderOptions{Address: address.Raw(missing)})
	checkNotFound(t, err, missing)
}

func checkNotFound(t *testing.T, err error, addr string) {
	t.Helper()
	var le *transport.LinkError
	if !errors.As(err, &le) {
		t.Fatalf("attach to %s: %v, want a *transport.LinkError", addr, err)
	}
	t.Log(err)
	expect(t, le.Address == addr && le.Op == "attach", "LinkError %+v", le)
	expect(t, strings.Contains(err.Error(), addr), "the error does not name %s: %v", addr, err)
	var ae *amqp.Error
	expect(t, errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotFound, "condition: %v, want amqp:not-found", err)
}

func TestLiveBadCredentials(t *testing.T) {
	u, err := url.Parse(liveURL(t))
	must(t, err, "parse AMQP_URL")
	user := "guest"
	if u.User != nil {
		user = u.User.Username()
	}
	u.User = url.UserPassword(user, secret)
	_, err = amqpwire.New(amqpwire.Config{URL: u.String(), Dialect: address.RabbitMQ4}).Connect(testContext(t))
	if err == nil {
		t.Fatal("Connect with a wrong password succeeded")
	}
	t.Log(err)
	noSecret(t, err.Error(), secret)
	expect(t, strings.Contains(err.Error(), "authentication failed"), "the error does not say authentication failed: %v", err)
	expect(t, strings.Contains(err.Error(), u.Redacted()), "the error does not name the broker: %v", err)
}

func TestLiveDynamicReplyQueue(t *testing.T) {
	v := livetest.RabbitMQ(t, liveURL(t))
	conn := connect(t)
	expect(t, !conn.Features().DynamicSource, "RabbitMQ 4 reports dynamic sources")
	expect(t, !conn.Features().Transactions, "transactions reported")
	_, isTx := any(conn).(transport.Transactional)
	expect(t, !isTx, "Conn implements Transactional")

	s := session(t, conn)
	ctx := testContext(t)
	rcv, err := s.NewReceiver(ctx, transport.ReceiverOptions{Dynamic: true, Settled: true, Credit: 1})
	must(t, err, "attach a dynamic receiver")
	addr := rcv.Address()
	must(t, rcv.IssueCredit(1), "issue credit")
	if v.AtLeast(4, 2) {
		// RabbitMQ 4.2 and later: direct reply-to, no queue at all; a
		// reply goes through the anonymous terminus, addressed by its to.
		expect(t, conn.ReplyNode() == amqpwire.ReplyDirect, "RabbitMQ %v: reply node %s", v, conn.ReplyNode())
		expect(t, strings.HasPrefix(addr, "/queues/amq.rabbitmq.reply-to."), "RabbitMQ %v: reply address %q", v, addr)
		relay, err := s.NewSender(ctx, transport.SenderOptions{})
		must(t, err, "attach to the anonymous terminus")
		rc, err := relay.(transport.Relay).SendTo(ctx, address.Raw(addr), text("reply"), false)
		must(t, err, "send to the reply address")
		o, err := rc.Wait(ctx)
		must(t, err, "outcome")
		expect(t, o.Kind == messages.Accepted, "outcome %v", o)
		m := receive(t, rcv, 10*time.Second)
		expect(t, bodyOf(m) == "reply", "received %q", bodyOf(m))
		must(t, rcv.Close(ctx), "close the dynamic receiver")
		return
	}
	// RabbitMQ 4.0: a private classic queue the runtime declares.
	expect(t, conn.ReplyNode() == amqpwire.ReplyQueue, "RabbitMQ %v: reply node %s", v, conn.ReplyNode())
	expect(t, strings.HasPrefix(addr, "/queues/"+amqpwire.ReplyQueuePrefix), "reply address %q", addr)

	snd := newSender(t, s, address.Raw(addr))
	rc, err := snd.Send(ctx, text("reply"), false)
	must(t, err, "send to the reply queue")
	o, err := rc.Wait(ctx)
	must(t, err, "outcome")
	expect(t, o.Kind == messages.Accepted, "outcome %v", o)
	m := receive(t, rcv, 10*time.Second)
	expect(t, bodyOf(m) == "reply", "received %q", bodyOf(m))
	must(t, rcv.Close(ctx), "close the dynamic receiver")

	// Auto-delete: the queue ends with its only consumer.
	name := strings.TrimPrefix(addr, "/queues/")
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = conn.Management().QueueInfo(ctx, name)
		if amqpwire.IsStatus(err, 404) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	expect(t, amqpwire.IsStatus(err, 404), "the reply queue outlived its receiver: %v", err)
}

// Only quorum queues count modified{delivery-failed} in delivery-count.
func TestLiveModifiedRaisesDeliveryCount(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	q := address.Queue(queueName(t, conn))
	snd := newSender(t, s, q)
	rcv := newReceiver(t, s, transport.ReceiverOptions{Address: q, Credit: 1})
	ctx := testContext(t)

	rc, err := snd.Send(ctx, text("retry me"), false)
	must(t, err, "send")
	_, err = rc.Wait(ctx)
	must(t, err, "outcome")

	for attempt := uint32(0); attempt < 3; attempt++ {
		must(t, rcv.IssueCredit(1), "issue credit")
		m := receive(t, rcv, 10*time.Second)
		var count uint32
		first := true
		if m.Header != nil {
			count = m.Header.DeliveryCount
			first = m.Header.FirstAcquirer
		}
		expect(t, count == attempt, "attempt %d: delivery-count %d", attempt, count)
		if attempt > 0 {
			expect(t, !first, "attempt %d: first-acquirer still set", attempt)
		}
		outcome := messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
		if attempt == 2 {
			outcome = messages.Outcome{Kind: messages.Accepted}
		}
		must(t, rcv.Settle(ctx, m, outcome), "settle")
	}

	// Released does not count.
	rc, err = snd.Send(ctx, text("release me"), false)
	must(t, err, "send")
	_, err = rc.Wait(ctx)
	must(t, err, "outcome")
	must(t, rcv.IssueCredit(1), "issue credit")
	m := receive(t, rcv, 10*time.Second)
	must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Released}), "release")
	must(t, rcv.IssueCredit(1), "issue credit")
	m = receive(t, rcv, 10*time.Second)
	expect(t, m.Header == nil || m.Header.DeliveryCount == 0, "released raised delivery-count to %d", m.Header.DeliveryCount)
	must(t, rcv.Settle(ctx, m, messages.Outcome{Kind: messages.Rejected, Condition: "amqp:internal-error", Description: "test"}), "reject")
}

// Every subscription of a topic gets its own copy; an ephemeral one's queue
// goes with it.
func TestLiveTopicSubscriptions(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	ctx := testContext(t)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	topic := address.Topic("amqpwire-test.events." + hex.EncodeToString(rnd[:]))
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = brokeradmin.DeleteExchange(c, conn.Management(), topic.Name())
	})

	var rcvs []transport.Receiver
	for _, sub := range []string{"billing", "audit"} {
		r := newReceiver(t, s, transport.ReceiverOptions{Address: topic, Subscription: sub, Ephemeral: true, Credit: 2})
		expect(t, r.Address() == "/queues/"+url.PathEscape(topic.Name()+"."+sub), "subscription address %q", r.Address())
		must(t, r.IssueCredit(2), "issue credit")
		rcvs = append(rcvs, r)
	}
	snd := newSender(t, s, topic)
	expect(t, snd.Address() == "/exchanges/"+url.PathEscape(topic.Name()), "topic sender address %q", snd.Address())
	rc, err := snd.Send(ctx, text("event"), false)
	must(t, err, "publish")
	o, err := rc.Wait(ctx)
	must(t, err, "outcome")
	expect(t, o.Kind == messages.Accepted, "outcome %v", o)
	for _, r := range rcvs {
		m := receive(t, r, 10*time.Second)
		expect(t, bodyOf(m) == "event", "received %q", bodyOf(m))
		must(t, r.Settle(ctx, m, messages.Outcome{Kind: messages.Accepted}), "settle")
	}
}

// A durable subscription's queue is a durable quorum queue (classic with
// ClassicQueue), neither exclusive nor auto-delete: receivers on two
// connections share it, and it keeps what is published once both are gone.
func TestLiveDurableSubscription(t *testing.T) {
	for _, classic := range []bool{false, true} {
		t.Run(fmt.Sprintf("classic=%v", classic), func(t *testing.T) {
			c1, c2 := connect(t), connect(t)
			ctx := testContext(t)
			var rnd [4]byte
			_, _ = rand.Read(rnd[:])
			topic := address.Topic("amqpwire-test.durable." + hex.EncodeToString(rnd[:]))
			queue := topic.Name() + ".shared"
			t.Cleanup(func() {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := brokeradmin.DeleteQueue(c, c1.Management(), queue); err != nil {
					t.Errorf("delete queue %s: %v", queue, err)
				}
				_ = brokeradmin.DeleteExchange(c, c1.Management(), topic.Name())
			})
			o := transport.ReceiverOptions{Address: topic, Subscription: "shared", Credit: 1, ClassicQueue: classic}
			r1, r2 := newReceiver(t, session(t, c1), o), newReceiver(t, session(t, c2), o)
			expect(t, r1.Address() == "/queues/"+url.PathEscape(queue), "subscription address %q", r1.Address())
			info, err := c1.Management().QueueInfo(ctx, queue)
			must(t, err, "queue info")
			want := amqpwire.Quorum
			if classic {
				want = amqpwire.Classic
			}
			expect(t, info.Type == want && info.Durable && !info.Exclusive && !info.AutoDelete,
				"subscription queue %+v, want a durable %s queue, not exclusive, not auto-delete", info, want)
			expect(t, info.Consumers == 2, "consumers %d, want 2", info.Consumers)
			must(t, r1.Close(ctx), "close")
			must(t, r2.Close(ctx), "close")

			snd := newSender(t, session(t, c1), topic)
			rc, err := snd.Send(ctx, text("kept"), false)
			must(t, err, "publish")
			oc, err := rc.Wait(ctx)
			must(t, err, "outcome")
			expect(t, oc.Kind == messages.Accepted, "outcome %v", oc)
			info, err = c1.Management().QueueInfo(ctx, queue)
			must(t, err, "queue info")
			expect(t, info.Messages == 1, "kept %d messages with no receiver, want 1", info.Messages)
		})
	}
}

func TestLiveManagementDeclare(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	m := conn.Management()
	name := queueName(t, conn)

	info, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name})
	must(t, err, "declare")
	expect(t, info.Created && info.Type == amqpwire.Quorum && info.Durable, "first declaration: %+v", info)
	info, err = m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name})
	must(t, err, "declare again, alike")
	expect(t, !info.Created && info.Name == name, "second declaration: %+v", info)

	_, err = m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name, Type: amqpwire.Classic})
	var me *amqpwire.ManagementError
	if !errors.As(err, &me) {
		t.Fatalf("declaring a quorum queue as classic: %v, want a *ManagementError", err)
	}
	t.Log(err)
	expect(t, me.Status == 409, "status %d, want 409", me.Status)
	expect(t, strings.Contains(err.Error(), name), "the error does not name the queue: %v", err)
	expect(t, me.Message != "", "no explanation from the broker")

	_, err = m.QueueInfo(ctx, name+".absent")
	expect(t, amqpwire.IsStatus(err, 404), "info on a missing queue: %v", err)

	must(t, brokeradmin.PurgeQueue(ctx, m, name), "purge")

	x := name + ".x"
	must(t, m.DeclareExchange(ctx, amqpwire.ExchangeSpec{Name: x, Type: "fanout"}), "declare exchange")
	must(t, m.DeclareExchange(ctx, amqpwire.ExchangeSpec{Name: x, Type: "fanout"}), "declare exchange again")
	err = m.DeclareExchange(ctx, amqpwire.ExchangeSpec{Name: x, Type: "topic"})
	expect(t, amqpwire.IsStatus(err, 409), "redeclaring a fanout exchange as topic: %v", err)
	b := amqpwire.Binding{Source: x, Queue: name, Key: "k"}
	must(t, m.Bind(ctx, b), "bind")
	must(t, brokeradmin.Unbind(ctx, m, b), "unbind")
	must(t, brokeradmin.DeleteExchange(ctx, m, x), "delete exchange")
}

func TestLiveConnCloseEndsDone(t *testing.T) {
	c := amqpwire.New(amqpwire.Config{URL: liveURL(t), Dialect: address.RabbitMQ4})
	conn, err := c.Connect(testContext(t))
	must(t, err, "connect")
	select {
	case <-conn.Done():
		t.Fatal("Done closed on an open connection")
	default:
	}
	must(t, conn.Close(context.Background()), "close")
	select {
	case <-conn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done still open after Close")
	}
	expect(t, conn.Err() == nil, "Err after a clean Close: %v", conn.Err())
	_, err = conn.NewSession(testContext(t))
	expect(t, err != nil, "a session began on a closed connection")
}

// With the Artemis dialect a Dynamic receiver asks the broker for a dynamic
// node; RabbitMQ 4.0 has none and says so.
func TestLiveDynamicSourceRefusedByRabbitMQ(t *testing.T) {
	c := amqpwire.New(amqpwire.Config{URL: liveURL(t)})
	conn, err := c.Connect(testContext(t))
	must(t, err, "connect")
	defer func() { _ = conn.Close(context.Background()) }()
	expect(t, conn.Features().DynamicSource, "Artemis dialect without dynamic sources")
	s, err := conn.NewSession(testContext(t))
	must(t, err, "session")
	_, err = s.NewReceiver(testContext(t), transport.ReceiverOptions{Dynamic: true, Credit: 1})
	var le *transport.LinkError
	var ae *amqp.Error
	expect(t, errors.As(err, &le) && le.Op == "attach", "dynamic attach: %v", err)
	expect(t, errors.As(err, &ae) && ae.Condition == amqp.ErrCondNotImplemented, "condition: %v", err)
	t.Log(err)
}

// An exchange that exists with another type (an operator's fanout) is used as
// it is; a name in the amq. namespace is never declared.
func TestLiveExistingExchanges(t *testing.T) {
	conn := connect(t)
	s := session(t, conn)
	ctx := testContext(t)
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "amqpwire-test.fanout." + hex.EncodeToString(rnd[:])
	must(t, conn.Management().DeclareExchange(ctx, amqpwire.ExchangeSpec{Name: name, Type: "fanout"}), "declare fanout")
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = brokeradmin.DeleteExchange(c, conn.Management(), name)
	})
	topic := address.Topic(name)
	r := newReceiver(t, s, transport.ReceiverOptions{Address: topic, Subscription: "sub", Ephemeral: true, Credit: 1})
	must(t, r.IssueCredit(1), "issue credit")
	snd := newSender(t, s, topic)
	_, err := snd.Send(ctx, text("to the fanout"), true)
	must(t, err, "publish")
	m := receive(t, r, 10*time.Second)
	expect(t, bodyOf(m) == "to the fanout", "received %q", bodyOf(m))

	// amq.topic is the broker's own: declaring it would be refused (403).
	snd = newSender(t, s, address.Topic("amq.topic"))
	rc, err := snd.Send(ctx, text("unroutable"), false)
	must(t, err, "publish to amq.topic")
	o, err := rc.Wait(ctx)
	must(t, err, "outcome")
	t.Logf("publish to amq.topic with no binding: %v", o)
}

// TestLivePeerOffers: the guard records the capabilities RabbitMQ 4's open
// offers (it offers the anonymous relay).
func TestLivePeerOffers(t *testing.T) {
	conn := connect(t)
	expect(t, conn.PeerOffers("ANONYMOUS-RELAY"), "RabbitMQ 4 offers ANONYMOUS-RELAY")
	expect(t, !conn.PeerOffers("NO-SUCH-CAPABILITY"), "an unknown capability is not offered")
	// RabbitMQ 4's channel-max is 63 unless configured: 64 sessions.
	expect(t, conn.MaxSessions() > 0 && conn.MaxSessions() <= 65536, "the open's channel-max is read")
	t.Logf("RabbitMQ's open allows %d sessions", conn.MaxSessions())
}
