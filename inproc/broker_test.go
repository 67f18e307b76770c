package inproc

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestConnectorIdentity(t *testing.T) {
	e := newEnv(t)
	require.Equal(t, address.Artemis, e.b.Dialect())
	require.Equal(t, "inproc", e.b.String())
	require.Equal(t, transport.Features{DynamicSource: true, Transactions: true, AnonymousRelay: true}, e.conn.Features())
	_, ok := e.conn.(transport.Transactional)
	require.True(t, ok)
	require.Equal(t, 1, e.b.Conns())
}

func TestQueueKeepsMessageUntilReceiverTakesIt(t *testing.T) {
	e := newEnv(t)
	e.b.DeclareQueue("orders")
	s := e.sender(address.Queue("orders"))
	require.Equal(t, "orders", s.Address())
	e.sendN(s, "m", 3)
	require.Equal(t, 3, e.b.QueueDepth("orders"))

	r := e.sub(address.Queue("orders"), 10)
	require.Equal(t, "orders", r.Address())
	for i := range 3 {
		m := recv(t, r)
		require.Equal(t, "m"+strconv.Itoa(i), string(m.GetData()))
		settle(t, r, m, accept)
	}
	require.Equal(t, 0, e.b.QueueDepth("orders"))
	require.Equal(t, 0, e.b.Unsettled("orders"))
}

func TestMessageToNoNodeIsDroppedButAccepted(t *testing.T) {
	e := newEnv(t)
	s := e.sender(address.Queue("nobody"))
	e.send(s, "lost") // accepted even though nothing keeps it
	require.False(t, e.b.HasQueue("nobody"))

	// A receiver attaching later does not see it.
	r := e.sub(address.Queue("nobody"), 1)
	nothing(t, r)

	// A topic without subscriptions drops too.
	ts := e.sender(address.Topic("events"))
	e.send(ts, "lost")
	tr := e.sub(address.Topic("events"), 1)
	nothing(t, tr)
}

func TestSubscribingCreatesQueue(t *testing.T) {
	e := newEnv(t)
	r := e.sub(address.Queue("jobs"), 0)
	require.True(t, e.b.HasQueue("jobs"))
	s := e.sender(address.Queue("jobs"))
	e.send(s, "a")
	// no credit yet: kept on the queue
	require.Equal(t, 1, e.b.QueueDepth("jobs"))
	require.NoError(t, r.Close(context.Background()))
	// a queue outlives its receivers
	e.send(s, "b")
	require.Equal(t, 2, e.b.QueueDepth("jobs"))
}

func TestRawAndQueueNameTheSameAnycastNode(t *testing.T) {
	e := newEnv(t)
	r := e.sub(address.Raw("jobs"), 5)
	e.send(e.sender(address.Queue("jobs")), "via-queue")
	e.send(e.sender(address.Raw("jobs")), "via-raw")
	require.Equal(t, "via-queue", recvBody(t, r))
	require.Equal(t, "via-raw", recvBody(t, r))
}

func TestFullyQualifiedQueueIsItsOwnNode(t *testing.T) {
	e := newEnv(t)
	billing := e.sub(address.Queue("orders::billing"), 5)
	plain := e.sub(address.Queue("orders"), 5)
	e.send(e.sender(address.Queue("orders::billing")), "fq")
	require.Equal(t, "fq", recvBody(t, billing))
	nothing(t, plain)
	e.send(e.sender(address.Queue("orders")), "plain")
	require.Equal(t, "plain", recvBody(t, plain))
	nothing(t, billing)
}

func TestInvalidAddressFailsAttach(t *testing.T) {
	e := newEnv(t)
	_, err := e.sess.NewSender(context.Background(), transport.SenderOptions{Address: address.Queue("")})
	var ae *address.Error
	require.ErrorAs(t, err, &ae)
	_, err = e.sess.NewReceiver(context.Background(), transport.ReceiverOptions{Address: address.Topic("a::b")})
	require.ErrorAs(t, err, &ae)
}

func TestCompetingReceiversGetEachMessageOnce(t *testing.T) {
	e := newEnv(t)
	const n = 200
	a := address.Queue("work")
	r1 := e.sub(a, n)
	r2 := e.sub(a, n)
	s := e.sender(a)
	e.sendN(s, "m", n)

	var mu sync.Mutex
	seen := map[string]int{}
	counts := [2]int{}
	var wg sync.WaitGroup
	for i, r := range []transport.Receiver{r1, r2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ctx, cancel := context.WithTimeout(context.Background(), quiet)
				m, err := r.Receive(ctx)
				cancel()
				if err != nil {
					return
				}
				if r.Settle(context.Background(), m, accept) != nil {
					return
				}
				mu.Lock()
				seen[string(m.GetData())]++
				counts[i]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, n)
	for k, c := range seen {
		require.Equal(t, 1, c, k)
	}
	// round robin between receivers with credit
	require.Equal(t, n/2, counts[0])
	require.Equal(t, n/2, counts[1])
	require.Equal(t, 0, e.b.Unsettled("work"))
}

func TestRoundRobinSkipsReceiversWithoutCredit(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("rr")
	r1 := e.sub(a, 1)
	r2 := e.sub(a, 10)
	e.sendN(e.sender(a), "m", 4)
	require.Equal(t, "m0", recvBody(t, r1))
	nothing(t, r1)
	require.Equal(t, "m1", recvBody(t, r2))
	require.Equal(t, "m2", recvBody(t, r2))
	require.Equal(t, "m3", recvBody(t, r2))
}

func TestTopicGivesEveryReceiverItsOwnCopy(t *testing.T) {
	e := newEnv(t)
	a := address.Topic("events")
	rs := []transport.Receiver{e.sub(a, 10), e.sub(a, 10), e.sub(a, 10)}
	require.Equal(t, 3, e.b.Subscriptions("events"))
	for _, r := range rs {
		require.Equal(t, "events", r.Address())
	}
	s := e.sender(a)
	e.sendN(s, "e", 3)

	var got []*amqp.Message
	for _, r := range rs {
		for i := range 3 {
			m := recv(t, r)
			require.Equal(t, "e"+strconv.Itoa(i), string(m.GetData()))
			require.True(t, m.Header.FirstAcquirer)
			settle(t, r, m, accept)
			got = append(got, m)
		}
	}
	// receivers never share objects
	require.NotSame(t, got[0], got[3])
	got[0].Data[0][0] = 'X'
	require.Equal(t, "e0", string(got[3].GetData()))

	// a subscription lives as long as its link
	require.NoError(t, rs[0].Close(context.Background()))
	require.Equal(t, 2, e.b.Subscriptions("events"))
	e.send(s, "after")
	require.Equal(t, "after", recvBody(t, rs[1]))
	require.Equal(t, "after", recvBody(t, rs[2]))

	// the topic is not a queue
	require.False(t, e.b.HasQueue("events"))
}

// A named subscription is durable and shared: its receivers compete, it
// keeps what is published while none is attached, it outlives detaches and
// dropped connections, and an ephemeral one beside it is still private.
func TestTopicDurableSubscription(t *testing.T) {
	e := newEnv(t)
	a := address.Topic("orders")
	named := transport.ReceiverOptions{Address: a, Subscription: "billing", Credit: 10}
	r1, r2 := e.receiver(named, 10), e.receiver(named, 10)
	eph := e.receiver(transport.ReceiverOptions{Address: a, Subscription: "billing", Ephemeral: true, Credit: 10}, 10)
	require.Equal(t, 2, e.b.Subscriptions("orders"), "one shared node and one private one")
	require.True(t, e.b.HasQueue("orders::billing"))
	s := e.sender(a)
	e.sendN(s, "m", 4)
	take := func(r transport.Receiver) string {
		m := recv(t, r)
		settle(t, r, m, accept)
		return string(m.GetData())
	}
	// Round robin between the competing receivers; the private one gets all.
	require.Equal(t, "m0", take(r1))
	require.Equal(t, "m1", take(r2))
	require.Equal(t, "m2", take(r1))
	require.Equal(t, "m3", take(r2))
	for i := range 4 {
		require.Equal(t, "m"+strconv.Itoa(i), take(eph))
	}

	// Nothing attached: kept.
	require.NoError(t, r1.Close(context.Background()))
	require.Equal(t, 3, e.b.DetachLinks(a, "amqp:internal-error", "test"), "r2, the ephemeral receiver and the sender")
	s = e.sender(a)
	require.Equal(t, 1, e.b.Subscriptions("orders"), "the ephemeral node went with its link")
	e.send(s, "kept")
	require.Equal(t, 1, e.b.QueueDepth("orders::billing"))
	require.Equal(t, 1, e.b.DropConnections(nil))

	c, err := e.b.Connect(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	sess, err := c.NewSession(context.Background())
	require.NoError(t, err)
	r3, err := sess.NewReceiver(context.Background(), named)
	require.NoError(t, err)
	require.NoError(t, r3.IssueCredit(1))
	require.Equal(t, "kept", recvBody(t, r3))

	_, err = sess.NewReceiver(context.Background(), transport.ReceiverOptions{Address: a, Subscription: "a::b"})
	op, cond, _ := remoteCond(t, err)
	require.Equal(t, "attach", op)
	require.Equal(t, amqp.ErrCondInvalidField, cond)
}

func TestTopicSubscriptionIsNotDurable(t *testing.T) {
	e := newEnv(t)
	a := address.Topic("ticks")
	s := e.sender(a)
	r := e.sub(a, 0)
	e.send(s, "while-attached")
	require.NoError(t, r.Close(context.Background()))
	e.send(s, "while-detached")
	r2 := e.sub(a, 5)
	nothing(t, r2)
}

func TestCreditBoundsTransfers(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("credit")
	r := e.sub(a, 0)
	s := e.sender(a)
	e.sendN(s, "m", 10)
	nothing(t, r) // credit starts at 0

	require.NoError(t, r.IssueCredit(3))
	require.Equal(t, 3, e.b.Unsettled("credit"))
	require.Equal(t, 7, e.b.QueueDepth("credit"))
	var held []*amqp.Message
	for range 3 {
		held = append(held, recv(t, r))
	}
	nothing(t, r) // credit used up, even though messages wait
	require.Equal(t, 7, e.b.QueueDepth("credit"))

	// settling does not grant credit: only IssueCredit does
	for _, m := range held {
		settle(t, r, m, accept)
	}
	nothing(t, r)
	require.NoError(t, r.IssueCredit(2))
	require.Equal(t, "m3", recvBody(t, r))
	require.Equal(t, "m4", recvBody(t, r))
	nothing(t, r)
	require.Equal(t, 5, e.b.QueueDepth("credit"))
}

func TestCreditNeverExceededUnderConcurrentPublish(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("bound")
	const window = 8
	r := e.sub(a, window)
	s := e.sender(a)
	const n = 500
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			_, err := s.Send(context.Background(), amqp.NewMessage([]byte(strconv.Itoa(i))), true)
			if err != nil {
				return
			}
		}
	}()
	granted := window
	for got := 0; got < n; got++ {
		m := recv(t, r)
		require.LessOrEqual(t, e.b.Unsettled("bound"), window)
		require.Equal(t, strconv.Itoa(got), string(m.GetData()), "FIFO")
		settle(t, r, m, accept)
		if got+1 == granted && granted < n {
			require.NoError(t, r.IssueCredit(window))
			granted += window
		}
	}
	<-done
}

func TestDeliveryCountAndFirstAcquirer(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("dc")
	r := e.sub(a, 10)
	e.send(e.sender(a), "x")

	m := recv(t, r)
	require.True(t, m.Header.FirstAcquirer)
	require.Zero(t, m.Header.DeliveryCount)

	settle(t, r, m, release) // released: not a failed attempt
	m = recv(t, r)
	require.False(t, m.Header.FirstAcquirer)
	require.Zero(t, m.Header.DeliveryCount)

	settle(t, r, m, failed) // modified{delivery-failed}: counted
	m = recv(t, r)
	require.False(t, m.Header.FirstAcquirer)
	require.EqualValues(t, 1, m.Header.DeliveryCount)

	settle(t, r, m, failed)
	m = recv(t, r)
	require.EqualValues(t, 2, m.Header.DeliveryCount)

	settle(t, r, m, messages.Outcome{Kind: messages.Modified}) // modified without delivery-failed
	m = recv(t, r)
	require.EqualValues(t, 2, m.Header.DeliveryCount)
	settle(t, r, m, accept)
	require.Equal(t, 0, e.b.QueueDepth("dc")+e.b.Unsettled("dc"))
}

func TestPublishedDeliveryCountIsKept(t *testing.T) {
	// A retry copy republished with delivery-count n arrives with n.
	e := newEnv(t)
	a := address.Queue("retry")
	r := e.sub(a, 1)
	m := amqp.NewMessage([]byte("again"))
	m.Header = &amqp.MessageHeader{DeliveryCount: 3, Durable: true, Priority: 7, FirstAcquirer: false}
	_, err := e.sender(a).Send(context.Background(), m, true)
	require.NoError(t, err)
	got := recv(t, r)
	require.EqualValues(t, 3, got.Header.DeliveryCount)
	require.True(t, got.Header.FirstAcquirer)
	require.True(t, got.Header.Durable)
	require.EqualValues(t, 7, got.Header.Priority)
}

func TestReleasedGoesBackToHead(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("head")
	r := e.sub(a, 1)
	e.sendN(e.sender(a), "m", 3)
	m := recv(t, r)
	require.Equal(t, "m0", string(m.GetData()))
	settle(t, r, m, release)
	require.NoError(t, r.IssueCredit(1))
	require.Equal(t, "m0", recvBody(t, r))
}

// Deliveries released one by one, in the order they came (as the runtime's
// drain gives back what its handlers had not settled), come again in that
// order: each goes back to its place among the others, not to the front.
func TestReleasedOneByOneKeepOrder(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("order")
	r := e.sub(a, 3)
	e.sendN(e.sender(a), "m", 5)
	var got []*amqp.Message
	for range 3 {
		got = append(got, recv(t, r))
	}
	for _, m := range got {
		settle(t, r, m, release)
	}
	require.NoError(t, r.IssueCredit(5))
	var bodies []string
	for range 5 {
		bodies = append(bodies, recvBody(t, r))
	}
	require.Equal(t, []string{"m0", "m1", "m2", "m3", "m4"}, bodies)
}

func TestUndeliverableHereSkipsThatReceiver(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("uh")
	r1 := e.sub(a, 5)
	e.sendN(e.sender(a), "m", 2)
	m := recv(t, r1)
	require.Equal(t, "m0", string(m.GetData()))
	settle(t, r1, m, notHere)

	// r1 still gets the next message, never m0 again
	m1 := recv(t, r1)
	require.Equal(t, "m1", string(m1.GetData()))
	nothing(t, r1)
	require.Equal(t, 1, e.b.QueueDepth("uh"))

	// another receiver gets it, with the failure counted
	r2 := e.sub(a, 5)
	m = recv(t, r2)
	require.Equal(t, "m0", string(m.GetData()))
	require.EqualValues(t, 1, m.Header.DeliveryCount)
	require.False(t, m.Header.FirstAcquirer)
}

func TestUndeliverableHereForgottenWhenReceiverDetaches(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("uh2")
	r1 := e.sub(a, 5)
	e.send(e.sender(a), "m0")
	settle(t, r1, recv(t, r1), notHere)
	require.NoError(t, r1.Close(context.Background()))
	r2 := e.sub(a, 5)
	require.Equal(t, "m0", recvBody(t, r2))
}

func TestRejectedIsDeadLettered(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("dl")
	r := e.sub(a, 5)
	e.sendN(e.sender(a), "m", 2)
	settle(t, r, recv(t, r), rejected)
	settle(t, r, recv(t, r), accept)
	require.Equal(t, 0, e.b.QueueDepth("dl"))
	require.Equal(t, 0, e.b.Unsettled("dl"))
	dead := e.b.DeadLetters("dl")
	require.Len(t, dead, 1)
	require.Equal(t, "m0", string(dead[0].GetData()))
	require.Equal(t, "app:bad", dead[0].Annotations["x-opt-inproc-condition"])
	require.Equal(t, "bad order", dead[0].Annotations["x-opt-inproc-description"])
	require.Nil(t, e.b.DeadLetters("none"))
}

func TestSettleTwiceOrForeignMessageFails(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("twice")
	r := e.sub(a, 5)
	e.send(e.sender(a), "x")
	m := recv(t, r)
	settle(t, r, m, accept)
	require.ErrorIs(t, r.Settle(context.Background(), m, accept), ErrUnknownDelivery)
	require.ErrorIs(t, r.Settle(context.Background(), amqp.NewMessage(nil), accept), ErrUnknownDelivery)
}

func TestDetachReturnsUnsettledInOrder(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("detach")
	r := e.sub(a, 10)
	e.sendN(e.sender(a), "m", 5)
	// take m0..m2 unsettled; m3, m4 transferred but not yet received
	var held []*amqp.Message
	for range 3 {
		held = append(held, recv(t, r))
	}
	settle(t, r, held[1], accept)
	require.Equal(t, 4, e.b.Unsettled("detach"))

	require.NoError(t, r.Close(context.Background()))
	require.Equal(t, 0, e.b.Unsettled("detach"))
	require.Equal(t, 4, e.b.QueueDepth("detach"))

	_, err := r.Receive(context.Background())
	var le *transport.LinkError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "receive", le.Op)
	var ale *amqp.LinkError
	require.ErrorAs(t, err, &ale)
	require.Nil(t, ale.RemoteErr, "a local close carries no remote error")
	require.Error(t, r.IssueCredit(1))

	r2 := e.sub(a, 10)
	for _, want := range []struct {
		body  string
		first bool
	}{{"m0", false}, {"m2", false}, {"m3", true}, {"m4", true}} {
		m := recv(t, r2)
		require.Equal(t, want.body, string(m.GetData()))
		require.Equal(t, want.first, m.Header.FirstAcquirer, want.body)
		require.Zero(t, m.Header.DeliveryCount, "a detach is not a failed attempt")
	}
}

func TestLateSettleAfterDetachIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("late")
	r := e.sub(a, 1)
	e.send(e.sender(a), "x")
	m := recv(t, r)
	require.NoError(t, r.Close(context.Background()))
	require.Equal(t, 1, e.b.QueueDepth("late"))

	for _, o := range []messages.Outcome{accept, rejected, failed} {
		err := r.Settle(context.Background(), m, o)
		var le *transport.LinkError
		require.ErrorAs(t, err, &le)
		require.Equal(t, "settle", le.Op)
		require.ErrorIs(t, err, ErrLinkEnded)
	}
	require.Equal(t, 1, e.b.QueueDepth("late"))
	require.Empty(t, e.b.DeadLetters("late"))

	r2 := e.sub(a, 1)
	m = recv(t, r2)
	require.Zero(t, m.Header.DeliveryCount)
	require.False(t, m.Header.FirstAcquirer)
}

func TestOtherReceiverGetsDetachedDeliveries(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("handover")
	r1 := e.sub(a, 5)
	r2 := e.sub(a, 0)
	e.sendN(e.sender(a), "m", 2)
	recv(t, r1)
	require.NoError(t, r2.IssueCredit(5))
	require.NoError(t, r1.Close(context.Background()))
	require.Equal(t, "m0", recvBody(t, r2))
	require.Equal(t, "m1", recvBody(t, r2))
}

func TestSettledReceiverIsSettledOnTransfer(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("presettled")
	r := e.receiver(transport.ReceiverOptions{Address: a, Settled: true}, 5)
	e.sendN(e.sender(a), "m", 2)
	m := recv(t, r)
	require.Equal(t, 1, e.b.Unsettled("presettled"), "the one not yet received")
	require.NoError(t, r.Settle(context.Background(), m, failed), "no-op")
	recv(t, r)
	require.Equal(t, 0, e.b.Unsettled("presettled"))
	require.NoError(t, r.Close(context.Background()))
	require.Equal(t, 0, e.b.QueueDepth("presettled"), "nothing comes back")
}

func TestDynamicReplyNode(t *testing.T) {
	e := newEnv(t)
	r := e.receiver(transport.ReceiverOptions{Dynamic: true}, 1)
	name := r.Address()
	require.True(t, strings.HasPrefix(name, "$inproc.reply."), name)
	require.True(t, e.b.HasQueue(name))

	other := e.receiver(transport.ReceiverOptions{Dynamic: true}, 1)
	require.NotEqual(t, name, other.Address())

	req := amqp.NewMessage([]byte("reply"))
	req.Properties = &amqp.MessageProperties{CorrelationID: "c1"}
	s := e.sender(address.Raw(name))
	_, err := s.Send(context.Background(), req, false)
	require.NoError(t, err)
	m := recv(t, r)
	require.Equal(t, "reply", string(m.GetData()))
	require.Equal(t, "c1", m.Properties.CorrelationID)
	nothing(t, other)
	require.Equal(t, 2, e.b.Links(address.Raw(name)), "the receiver and the sender")

	// it is exclusive to its link
	_, err = e.sess.NewReceiver(context.Background(), transport.ReceiverOptions{Address: address.Raw(name)})
	_, cond, _ := remoteCond(t, err)
	require.Equal(t, amqp.ErrCondResourceLocked, cond)

	// the node dies with its link
	require.NoError(t, r.Close(context.Background()))
	require.False(t, e.b.HasQueue(name))
	e.send(s, "dropped")
	require.Equal(t, 0, e.b.QueueDepth(name))
}

func TestDynamicReplyPrefixOption(t *testing.T) {
	e := newEnv(t, WithReplyPrefix("reply-"))
	r := e.receiver(transport.ReceiverOptions{Dynamic: true}, 1)
	require.True(t, strings.HasPrefix(r.Address(), "reply-"))
}

// A sender link's transfers are settled or not one by one (mixed mode).
func TestSenderSettledAndUnsettledTransfers(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("modes")
	r := e.sub(a, 10)
	ctx := context.Background()

	mixed := e.sender(a)
	rc, err := mixed.Send(ctx, amqp.NewMessage([]byte("settled")), true)
	require.NoError(t, err)
	require.Nil(t, rc)
	rc, err = mixed.Send(ctx, amqp.NewMessage([]byte("unsettled")), false)
	require.NoError(t, err)
	o, err := rc.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, messages.Outcome{Kind: messages.Accepted}, o)

	for _, want := range []string{"settled", "unsettled"} {
		require.Equal(t, want, recvBody(t, r))
	}
	nothing(t, r)
}

func TestSendOfUnencodableMessageFails(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("enc")
	e.b.DeclareQueue("enc")
	s := e.sender(a)
	bad := &amqp.Message{Value: make(chan int)}
	rc, err := s.Send(context.Background(), bad, false)
	require.Error(t, err)
	require.Nil(t, rc)
	require.Equal(t, 0, e.b.QueueDepth("enc"))
}

func TestMessageSectionsSurviveTheWire(t *testing.T) {
	e := newEnv(t)
	a := address.Queue("sections")
	r := e.sub(a, 1)
	created := time.UnixMilli(1_700_000_000_000).UTC()
	m := &amqp.Message{
		Header:                &amqp.MessageHeader{Durable: true, Priority: 4},
		Annotations:           amqp.Annotations{"x-opt-k": "v"},
		Properties:            &amqp.MessageProperties{MessageID: "id-1", Subject: ptr("s"), CreationTime: &created, GroupID: ptr("g")},
		ApplicationProperties: map[string]any{"h": int64(1)},
		Data:                  [][]byte{[]byte("body")},
	}
	_, err := e.sender(a).Send(context.Background(), m, false)
	require.NoError(t, err)
	m.Data[0][0] = 'X' // the broker holds its own copy
	got := recv(t, r)
	require.NotSame(t, m, got)
	require.Equal(t, "body", string(got.GetData()))
	require.Equal(t, "id-1", got.Properties.MessageID)
	require.Equal(t, "g", *got.Properties.GroupID)
	require.True(t, created.Equal(*got.Properties.CreationTime))
	require.Equal(t, int64(1), got.ApplicationProperties["h"])
	require.Equal(t, "v", got.Annotations["x-opt-k"])
	require.True(t, got.Header.Durable)
}

func ptr[T any](v T) *T { return &v }

func TestReceiveHonoursContext(t *testing.T) {
	e := newEnv(t)
	r := e.sub(address.Queue("ctx"), 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := r.Receive(ctx)
		errc <- err
	}()
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(wait):
		t.Fatal("Receive ignored its context")
	}

	// a cancelled Receive loses nothing
	e.send(e.sender(address.Queue("ctx")), "kept")
	require.Equal(t, "kept", recvBody(t, r))
}

func TestReceiveReturnsWhenLinkCloses(t *testing.T) {
	e := newEnv(t)
	r := e.sub(address.Queue("closing"), 1)
	errc := make(chan error, 1)
	go func() {
		_, err := r.Receive(context.Background())
		errc <- err
	}()
	require.NoError(t, r.Close(context.Background()))
	select {
	case err := <-errc:
		var le *transport.LinkError
		require.ErrorAs(t, err, &le)
	case <-time.After(wait):
		t.Fatal("Receive did not return on Close")
	}
	require.NoError(t, r.Close(context.Background()), "Close is idempotent")
}

func TestSessionAndConnCloseEndLinks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	a := address.Queue("sc")
	r := e.sub(a, 5)
	e.sendN(e.sender(a), "m", 1)
	recv(t, r) // unsettled
	require.NoError(t, e.sess.Close(ctx))
	_, err := r.Receive(ctx)
	var se *amqp.SessionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 1, e.b.QueueDepth("sc"))
	_, err = e.sess.NewReceiver(ctx, transport.ReceiverOptions{Address: a})
	require.ErrorAs(t, err, &se)
	require.Equal(t, 0, e.b.Links(a))

	s2, err := e.conn.NewSession(ctx)
	require.NoError(t, err)
	r2, err := s2.NewReceiver(ctx, transport.ReceiverOptions{Address: a})
	require.NoError(t, err)
	snd, err := s2.NewSender(ctx, transport.SenderOptions{Address: a})
	require.NoError(t, err)
	require.NoError(t, e.conn.Close(ctx))
	select {
	case <-e.conn.Done():
	default:
		t.Fatal("Done not closed by Close")
	}
	require.NoError(t, e.conn.Err(), "a clean Close has no error")
	_, err = r2.Receive(ctx)
	var ce *amqp.ConnError
	require.ErrorAs(t, err, &ce)
	_, err = snd.Send(ctx, amqp.NewMessage(nil), true)
	require.ErrorAs(t, err, &ce)
	_, err = e.conn.NewSession(ctx)
	require.Error(t, err)
	require.Equal(t, 0, e.b.Conns())
}

func TestMixedOutcomesUnderConcurrency(t *testing.T) {
	// Every message is eventually accepted exactly once, whatever happens
	// to it in between, with receivers attaching and detaching.
	e := newEnv(t)
	a := address.Queue("stress")
	e.b.DeclareQueue("stress") // the sender may start before any receiver
	const n = 2000
	var wg sync.WaitGroup
	var mu sync.Mutex
	accepted := map[string]int{}
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := e.sess.NewReceiver(context.Background(), transport.ReceiverOptions{Address: a})
				if err != nil {
					return
				}
				_ = r.IssueCredit(16)
				for i := range 40 {
					ctx, cancel := context.WithTimeout(context.Background(), quiet)
					m, err := r.Receive(ctx)
					cancel()
					if err != nil {
						break
					}
					var o messages.Outcome
					switch (i + w + round) % 5 {
					case 0:
						o = release
					case 1:
						o = failed
					default:
						o = accept
					}
					if r.Settle(context.Background(), m, o) == nil && o.Kind == messages.Accepted {
						mu.Lock()
						accepted[string(m.GetData())]++
						mu.Unlock()
					}
					if i%7 == 6 {
						_ = r.IssueCredit(7)
					}
				}
				_ = r.Close(context.Background())
			}
		}()
	}
	s := e.sender(a)
	for i := range n {
		_, err := s.Send(context.Background(), amqp.NewMessage([]byte(strconv.Itoa(i))), i%2 == 0)
		require.NoError(t, err)
	}
	progress := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("accepted %d of %d; depth %d, unsettled %d", len(accepted), n, e.b.QueueDepth("stress"), e.b.Unsettled("stress"))
	}
	if !assert.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepted) == n
	}, 20*time.Second, 5*time.Millisecond) {
		close(stop)
		wg.Wait()
		t.Fatal(progress())
	}
	close(stop)
	wg.Wait()
	for k, c := range accepted {
		require.Equal(t, 1, c, k)
	}
	require.Equal(t, 0, e.b.QueueDepth("stress"))
	require.Equal(t, 0, e.b.Unsettled("stress"))
}

func TestBrokerPublishHelper(t *testing.T) {
	e := newEnv(t)
	e.b.DeclareQueue("direct")
	require.NoError(t, e.b.Publish(address.Queue("direct"), amqp.NewMessage([]byte("x"))))
	require.Equal(t, 1, e.b.QueueDepth("direct"))
	require.Error(t, e.b.Publish(address.Queue(""), amqp.NewMessage(nil)))
	require.Error(t, e.b.Publish(address.Queue("direct"), &amqp.Message{Value: func() {}}))
}
