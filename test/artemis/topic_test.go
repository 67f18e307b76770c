package artemis

import (
	"context"
	"net/url"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
)

// TestTopicEveryServiceGetsEveryMessage: two services (Apps with different
// names, so different container ids and subscription names) on one topic
// each get all 50 messages, once: each has its own subscription queue.
func TestTopicEveryServiceGetsEveryMessage(t *testing.T) {
	topic := amqpactor.Topic(unique("events"))
	removeAddress(t, topic.Name())
	ids := harness.IDs("m", 50)
	var got [2]seen
	for i, name := range []string{unique("billing"), unique("shipping")} {
		app := newApp(t, name)
		_, err := app.Subscribe(topic, got[i].handler)
		require.NoError(t, err)
		start(t, app)
	}
	pub := newApp(t, "")
	start(t, pub)
	for _, id := range ids {
		publish(t, pub, topic, id)
	}
	for i := range got {
		eventually(t, func() bool { return got[i].n() >= len(ids) }, "service %d gets every message", i)
	}
	for i := range got {
		require.Equal(t, len(ids), got[i].distinct(), "service %d: distinct messages", i)
		require.Equal(t, len(ids), got[i].n(), "service %d: no message twice", i)
	}
	require.Len(t, newAdmin(t).queueNames(t, topic.Name()), 2, "one subscription queue per service")
}

// TestTopicReplicasShareDurableSubscription: two replicas of one service
// (same WithName, so the same subscription name NAME.TOPIC) share one
// durable subscription queue: each message is handled once across both.
// Once both have stopped, the queue is still there and keeps what is
// published meanwhile; a third replica gets all of it. The runtime
// attaches by fully qualified name (TOPIC::NAME), which Artemis treats as
// a plain queue: neither a detach nor a close of the link deletes it.
func TestTopicReplicasShareDurableSubscription(t *testing.T) {
	topic := amqpactor.Topic(unique("events"))
	removeAddress(t, topic.Name())
	service := unique("svc")
	queue := service + "." + topic.Name() // the subscription name (App.Subscribe)
	adm := newAdmin(t)

	var both seen
	var each [2]seen
	var replicas []*amqpactor.App
	var subs []*amqpactor.Subscription
	for i := range 2 {
		app := newApp(t, service)
		sub, err := app.Subscribe(topic, func(ctx context.Context, m *amqpactor.Message) error {
			each[i].add(m)
			return both.handler(ctx, m)
		})
		require.NoError(t, err)
		start(t, app)
		replicas = append(replicas, app)
		subs = append(subs, sub)
	}
	require.Equal(t, []string{queue}, adm.queueNames(t, topic.Name()), "one queue for both replicas")
	require.EqualValues(t, 2, adm.count(t, queue, "consumerCount"), "both replicas consume from it")

	pub := newApp(t, "")
	start(t, pub)
	first := harness.IDs("first", 50)
	for _, id := range first {
		publish(t, pub, topic, id)
	}
	eventually(t, func() bool { return both.n() >= len(first) }, "the replicas get every message")
	require.Equal(t, len(first), both.distinct())
	require.Equal(t, len(first), both.n(), "each message handled once across both replicas")
	t.Logf("replica 0 handled %d, replica 1 handled %d", each[0].n(), each[1].n())

	// One replica's Subscription.Close detaches its link alone.
	require.NoError(t, subs[0].Close(bound(t)))
	require.EqualValues(t, 1, adm.count(t, queue, "consumerCount"), "the queue outlives a replica's Close")
	for _, app := range replicas {
		harness.StopApp(t, app)
	}
	require.Zero(t, adm.count(t, queue, "consumerCount"), "the queue outlives both replicas")
	// Artemis auto-creates the queue on the first FQQN attach; it stays
	// because the broker's address settings (artemis create's broker.xml)
	// say auto-delete-queues false. Say so if that changes.
	autoDelete, ok := adm.queue(t, queue, "autoDelete")
	require.True(t, ok)
	require.Equal(t, false, autoDelete, "an auto-deleted subscription queue would lose what is published while the service is down")
	durable, _ := adm.queue(t, queue, "durable")
	require.Equal(t, true, durable, "the subscription queue survives a broker restart")

	second := harness.IDs("second", 50)
	for _, id := range second {
		publish(t, pub, topic, id)
	}
	eventually(t, func() bool { return adm.count(t, queue, "messageCount") == int64(len(second)) }, "the queue keeps what is published while no replica runs")

	var third seen
	app := newApp(t, service)
	_, err := app.Subscribe(topic, third.handler)
	require.NoError(t, err)
	start(t, app)
	eventually(t, func() bool { return third.n() >= len(second) }, "the third replica gets what was kept")
	require.Equal(t, len(second), third.distinct())
	for _, id := range first {
		require.Empty(t, third.of(id), "%s was handled before the stop", id)
	}
}

// TestDurableSubscriptionNaming pins the broker behaviour the Artemis
// dialect is built on, on the wire (go-amqp alone): a durable shared
// global subscription attached to the topic's address is a queue named
// after the link (LINK:global) that a link closed with no other consumer
// deletes; one attached as TOPIC::QUEUE is the plain queue QUEUE, which
// the close leaves in place.
func TestDurableSubscriptionNaming(t *testing.T) {
	topic := unique("events")
	removeAddress(t, topic)
	adm := newAdmin(t)
	u, err := url.Parse(brokerURL(t))
	require.NoError(t, err)
	pw, _ := u.User.Password()
	ctx := bound(t)
	conn, err := amqp.Dial(ctx, "amqp://"+u.Host, &amqp.ConnOptions{ContainerID: unique("container"),
		SASLType: amqp.SASLTypePlain(u.User.Username(), pw)})
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	sess, err := conn.NewSession(ctx, nil)
	require.NoError(t, err)

	attach := func(source, link string) *amqp.Receiver {
		r, err := sess.NewReceiver(ctx, source, &amqp.ReceiverOptions{Name: link,
			SourceCapabilities: []string{"topic", "shared", "global"},
			SourceDurability:   amqp.DurabilityUnsettledState, SourceExpiryPolicy: amqp.ExpiryPolicyNever})
		require.NoError(t, err, "attach %s as %s", source, link)
		return r
	}

	plain := attach(topic, "plain")
	require.Contains(t, adm.queueNames(t, topic), "plain:global", "a subscription without FQQN is named from its link")
	require.NoError(t, plain.Close(ctx))
	eventually(t, func() bool {
		_, ok := adm.queue(t, "plain:global", "messageCount")
		return !ok
	}, "closing the last link of a subscription without FQQN deletes its queue")

	fq := attach(topic+"::"+"sub", "sub")
	require.Contains(t, adm.queueNames(t, topic), "sub", "an FQQN subscription is the queue it names")
	rt, _ := adm.queue(t, "sub", "routingType")
	require.Equal(t, "MULTICAST", rt, "the FQQN subscription queue gets the topic's copies")
	require.NoError(t, fq.Close(ctx))
	// A later attach by the same name finds it: the close left it.
	fq = attach(topic+"::"+"sub", "sub")
	require.Contains(t, adm.queueNames(t, topic), "sub", "closing the link of an FQQN subscription leaves its queue")
	require.NoError(t, fq.Close(ctx))
	_, ok := adm.queue(t, "sub", "messageCount")
	require.True(t, ok, "the FQQN queue outlives its link")
}
