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
	"github.com/amqpactor/amqpactor/internal/brokeradmin"
	"github.com/amqpactor/amqpactor/internal/livetest"
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
