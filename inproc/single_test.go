package inproc

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
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
