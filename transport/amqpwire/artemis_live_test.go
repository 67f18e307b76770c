package amqpwire_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// The Artemis tests run against the ActiveMQ Artemis broker named by
// ARTEMIS_URL (bash test/broker/artemis.sh start; … url).

// connectArtemis opens an Artemis-dialect connection that the test closes.
func connectArtemis(t *testing.T) *amqpwire.Conn {
	t.Helper()
	u := livetest.ArtemisURL(t, "the live Artemis tests of transport/amqpwire")
	conn, err := amqpwire.New(amqpwire.Config{URL: u, Dialect: address.Artemis, ContainerID: "amqpwire-test"}).Connect(testContext(t))
	must(t, err, "connect")
	t.Cleanup(func() {
		if err := conn.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return conn.(*amqpwire.Conn)
}

// artemisName returns a fresh name; the queues of that name and of each
// suffix given are destroyed after the test.
func artemisName(t *testing.T, conn *amqpwire.Conn, suffixes ...string) string {
	t.Helper()
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := "amqpwire-test." + strings.ReplaceAll(t.Name(), "/", ".") + "." + hex.EncodeToString(rnd[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, s := range append([]string{""}, suffixes...) {
			if err := brokeradmin.DestroyArtemisQueue(ctx, conn.ArtemisManagement(), name+s); err != nil {
				t.Errorf("destroy queue %s: %v", name+s, err)
			}
		}
	})
	return name
}

// TestLiveArtemisManagement: createQueue makes an exclusive queue, a second
// createQueue fails with the broker's code naming the queue, updateQueue
// changes exclusivity, consumerCount counts a receiver, and a missing
// queue's attribute is an *ArtemisError naming the resource.
func TestLiveArtemisManagement(t *testing.T) {
	conn := connectArtemis(t)
	m := conn.ArtemisManagement()
	ctx := testContext(t)
	q := artemisName(t, conn)

	must(t, m.CreateQueue(ctx, amqpwire.ArtemisQueue{Name: q, Exclusive: true}), "create queue")
	excl, err := m.QueueExclusive(ctx, q)
	must(t, err, "exclusive")
	expect(t, excl, "created exclusive, reads %v", excl)

	err = m.CreateQueue(ctx, amqpwire.ArtemisQueue{Name: q, Exclusive: true})
	expect(t, amqpwire.IsArtemisCode(err, "AMQ229019"), "create it again: %v", err)
	expect(t, err != nil && strings.Contains(err.Error(), q), "the error names the queue: %v", err)

	must(t, m.SetExclusive(ctx, q, false), "update queue")
	excl, err = m.QueueExclusive(ctx, q)
	must(t, err, "exclusive")
	expect(t, !excl, "updated not exclusive, reads %v", excl)

	n, err := m.ConsumerCount(ctx, q)
	must(t, err, "consumer count")
	expect(t, n == 0, "consumers %d before any attach", n)
	s := session(t, conn)
	newReceiver(t, s, transport.ReceiverOptions{Address: address.Queue(q), Credit: 1})
	n, err = m.ConsumerCount(ctx, q)
	must(t, err, "consumer count")
	expect(t, n == 1, "consumers %d with one receiver", n)

	_, err = m.ConsumerCount(ctx, q+".missing")
	var ae *amqpwire.ArtemisError
	expect(t, errors.As(err, &ae) && ae.Resource == "queue."+q+".missing", "a missing queue: %v", err)
}

// TestLiveArtemisPartitionQueueExclusive: a receiver of a partition queue
// has it created exclusive; of two receivers only the first gets messages,
// and when it detaches the second gets what it had not settled, in order.
// A plain queue of a partition's name (auto-created by a sender) is made
// exclusive by the next attach. The census count reads every consumer.
func TestLiveArtemisPartitionQueueExclusive(t *testing.T) {
	conn := connectArtemis(t)
	s := session(t, conn)
	ctx := testContext(t)
	m := conn.ArtemisManagement()
	base := artemisName(t, conn, ".p0", ".p1")
	pa := address.Partitioned(base, 2)
	p0 := pa.Partition(0)

	first := newReceiver(t, s, transport.ReceiverOptions{Address: p0, Credit: 10})
	excl, err := m.QueueExclusive(ctx, p0.Name())
	must(t, err, "exclusive")
	expect(t, excl, "the partition queue is not exclusive")
	expect(t, first.Address() == p0.Name(), "attached to %q", first.Address())
	second := newReceiver(t, s, transport.ReceiverOptions{Address: p0, Credit: 10})
	must(t, first.IssueCredit(10), "credit")
	must(t, second.IssueCredit(10), "credit")
	cc, ok := second.(transport.ConsumerCounter)
	expect(t, ok, "an Artemis receiver counts no consumers")
	if ok {
		n, err := cc.Consumers(ctx)
		must(t, err, "consumers")
		expect(t, n == 2, "consumers %d, want 2", n)
	}

	oneActiveThenHandOver(t, newSender(t, s, p0), first, second)

	// A sender to a plain queue of that name has Artemis auto-create it
	// without exclusive; a partition queue's attach makes it exclusive.
	p1 := pa.Partition(1)
	plain := newSender(t, s, address.Queue(p1.Name()))
	rc, err := plain.Send(ctx, text("x"), false)
	must(t, err, "send")
	_, err = rc.Wait(ctx)
	must(t, err, "outcome")
	excl, err = m.QueueExclusive(ctx, p1.Name())
	must(t, err, "exclusive")
	expect(t, !excl, "Artemis auto-created the queue exclusive")
	newReceiver(t, s, transport.ReceiverOptions{Address: p1, Credit: 1})
	excl, err = m.QueueExclusive(ctx, p1.Name())
	must(t, err, "exclusive")
	expect(t, excl, "the attach did not make the queue exclusive")
}

// TestLiveArtemisRelayPartitionQueue: the anonymous relay sends to a
// partition queue nothing consumes yet and leaves it exclusive, as a
// dedicated sender's attach does; a plain queue it sends to stays plain.
func TestLiveArtemisRelayPartitionQueue(t *testing.T) {
	conn := connectArtemis(t)
	expect(t, conn.Features().AnonymousRelay, "Artemis offers ANONYMOUS-RELAY")
	s := session(t, conn)
	ctx := testContext(t)
	m := conn.ArtemisManagement()
	base := artemisName(t, conn, ".p0")
	snd, err := s.NewSender(ctx, transport.SenderOptions{})
	must(t, err, "attach to the anonymous terminus")
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	r, ok := snd.(transport.Relay)
	if !ok {
		t.Fatalf("the anonymous sender %T is no Relay", snd)
	}
	for _, a := range []address.Address{address.Partitioned(base, 1).Partition(0), address.Queue(base)} {
		rc, err := r.SendTo(ctx, a, text("x"), false)
		must(t, err, "send to "+a.String())
		o, err := rc.Wait(ctx)
		must(t, err, "outcome")
		expect(t, o.Kind == messages.Accepted, "outcome %v", o)
		excl, err := m.QueueExclusive(ctx, a.Name())
		must(t, err, "exclusive")
		expect(t, excl == a.SingleActiveConsumer(), "%s: exclusive %v", a, excl)
	}
}
