package inproc

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// A partition queue delivers only to the receiver attached first; when it
// detaches, the next in attach order gets what was not settled, in order,
// then the rest.
func TestSingleActiveConsumerHandsOverInOrder(t *testing.T) {
	e := newEnv(t)
	pq := address.Partitioned("orders", 4).Partition(2)
	require.True(t, pq.SingleActiveConsumer())
	a := e.sub(pq, 100)
	b := e.sub(pq, 100)
	c := e.sub(pq, 100)
	s := e.sender(pq)
	e.sendN(s, "m", 10)

	// Only a, the first attached, gets anything, although b and c have
	// credit.
	for i := range 4 {
		m := recv(t, a)
		require.Equal(t, "m"+strconv.Itoa(i), string(m.GetData()))
		if i < 2 {
			settle(t, a, m, accept)
		}
	}
	nothing(t, b)
	nothing(t, c)

	// a leaves with m2, m3 unsettled (and m4..m9 transferred to it): b,
	// attached next, becomes active and gets all of them, in order.
	require.NoError(t, a.Close(context.Background()))
	for i := 2; i < 10; i++ {
		m := recv(t, b)
		require.Equal(t, "m"+strconv.Itoa(i), string(m.GetData()))
		settle(t, b, m, accept)
	}
	nothing(t, c)

	// New messages follow b; when b leaves, c takes over.
	e.sendN(s, "n", 2)
	require.Equal(t, "n0", recvBody(t, b))
	require.NoError(t, b.Close(context.Background()))
	require.Equal(t, "n0", recvBody(t, c))
	require.Equal(t, "n1", recvBody(t, c))
}

// Without the flag a queue still round robins between its receivers.
func TestPlainQueueStillCompetes(t *testing.T) {
	e := newEnv(t)
	a := e.sub(address.Queue("orders.p2"), 10)
	b := e.sub(address.Queue("orders.p2"), 10)
	s := e.sender(address.Queue("orders.p2"))
	e.sendN(s, "m", 2)
	require.Equal(t, "m0", recvBody(t, a))
	require.Equal(t, "m1", recvBody(t, b))
}

// Each receiver of a partition queue is told whether it is the active one,
// when it attaches and when the active one before it detaches, as RabbitMQ
// 4.3 says with rabbitmq:active; Consumers counts every receiver of the
// queue, the waiting ones too.
func TestSingleActiveConsumerSaysWhoIsActive(t *testing.T) {
	e := newEnv(t)
	pq := address.Partitioned("orders", 4).Partition(1)
	var mu sync.Mutex
	said := map[string][]bool{}
	attach := func(name string) transport.Receiver {
		return e.receiver(transport.ReceiverOptions{Address: pq, Credit: 10, OnActive: func(active bool) {
			mu.Lock()
			defer mu.Unlock()
			said[name] = append(said[name], active)
		}}, 10)
	}
	saidOf := func(name string) []bool {
		mu.Lock()
		defer mu.Unlock()
		return append([]bool(nil), said[name]...)
	}
	a := attach("a")
	b := attach("b")
	c := attach("c")
	require.Equal(t, []bool{true}, saidOf("a"))
	require.Equal(t, []bool{false}, saidOf("b"))
	require.Equal(t, []bool{false}, saidOf("c"))
	n, err := b.(transport.ConsumerCounter).Consumers(context.Background())
	require.NoError(t, err)
	require.Equal(t, 3, n)

	// b is not the active one: its leaving tells nobody anything.
	require.NoError(t, b.Close(context.Background()))
	require.Equal(t, []bool{false}, saidOf("c"))
	require.NoError(t, a.Close(context.Background()))
	require.Equal(t, []bool{false, true}, saidOf("c"))
	n, err = c.(transport.ConsumerCounter).Consumers(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, n)
}
