package address

import (
	"errors"
	"hash/fnv"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPartitionedQueues(t *testing.T) {
	a := Partitioned("orders", 8)
	require.NoError(t, a.Validate())
	require.Equal(t, KindPartitioned, a.Kind())
	require.Equal(t, "partitioned:orders", a.String())
	require.Equal(t, 8, a.Partitions())
	require.Equal(t, 0, Queue("orders").Partitions())
	for i := range 8 {
		p := a.Partition(i)
		require.Equal(t, KindQueue, p.Kind())
		require.Equal(t, "orders.p"+strconv.Itoa(i), p.Name())
		require.True(t, p.SingleActiveConsumer())
		require.NoError(t, p.Validate())
	}
	require.True(t, a.Partition(8).IsZero())
	require.True(t, a.Partition(-1).IsZero())
	require.True(t, Queue("orders").Partition(0).IsZero())
	require.False(t, Queue("orders.p0").SingleActiveConsumer())
}

// The hash is FNV-1a (32 bit) of the group-id modulo n: fixed, so any
// publisher in any process agrees.
func TestPartitionForIsFNV1a(t *testing.T) {
	a := Partitioned("orders", 8)
	for _, g := range []string{"", "customer-7", "customer-8", "ü", "a much longer group id with spaces"} {
		h := fnv.New32a()
		_, _ = h.Write([]byte(g))
		require.Equal(t, int(h.Sum32()%8), a.PartitionFor(g), g)
	}
	// Known values, so a change of hash cannot pass unseen.
	require.Equal(t, 0, Partitioned("x", 1).PartitionFor("anything"))
	require.Equal(t, int(uint32(0x811c9dc5)%1024), Partitioned("x", 1024).PartitionFor(""))
	require.Equal(t, -1, Queue("x").PartitionFor("g"))
	require.Equal(t, -1, Partitioned("x", 0).PartitionFor("g"))

	// Groups spread over every partition.
	seen := map[int]int{}
	for i := range 1000 {
		seen[a.PartitionFor("customer-"+strconv.Itoa(i))]++
	}
	require.Len(t, seen, 8)
	for p, n := range seen {
		require.Greater(t, n, 60, "partition %d", p)
	}
}

func TestPartitionedValidation(t *testing.T) {
	for _, tc := range []struct {
		a      Address
		reason string
	}{
		{Partitioned("orders", 0), "partition count 0 out of range 1..1024"},
		{Partitioned("orders", -3), "partition count -3 out of range"},
		{Partitioned("orders", 1025), "partition count 1025 out of range"},
		{Partitioned("", 8), "empty name"},
		{Partitioned("a b", 8), "whitespace"},
		{Partitioned("a::b", 8), "address::queue"},
	} {
		for _, d := range []Dialect{Artemis, RabbitMQ4, ServiceBus} {
			_, err := Render(d, tc.a, Send, "s")
			var ae *Error
			require.True(t, errors.As(err, &ae), "want *address.Error, got %v", err)
			require.Equal(t, tc.a, ae.Address)
			require.Contains(t, err.Error(), tc.reason)
			require.Contains(t, err.Error(), tc.a.String(), "the error names the address")
		}
	}
	require.NoError(t, Partitioned("orders", 1).Validate())
	require.NoError(t, Partitioned("orders", 1024).Validate())
}

func TestRenderPartitionQueues(t *testing.T) {
	p := Partitioned("orders", 4).Partition(3)
	for _, tc := range []struct {
		d    Dialect
		role Role
		want Node
	}{
		{Artemis, Send, Node{Address: "orders.p3", Capabilities: []string{"queue"}, Exclusive: true}},
		{Artemis, Receive, Node{Address: "orders.p3", Capabilities: []string{"queue"}, Exclusive: true}},
		{RabbitMQ4, Send, Node{Address: "/queues/orders.p3"}},
		{RabbitMQ4, Receive, Node{Address: "/queues/orders.p3"}},
		{ServiceBus, Send, Node{Address: "orders.p3"}},
	} {
		got, err := Render(tc.d, p, tc.role, "s")
		require.NoError(t, err)
		require.Equal(t, tc.want, got, "%s %d", tc.d, tc.role)
	}
	_, err := Render(ServiceBus, p, Receive, "s")
	require.ErrorContains(t, err, "single active consumer")
	// The partitioned address renders as its partitions do; an error names it.
	_, err = Render(ServiceBus, Partitioned("orders", 4), Receive, "s")
	require.ErrorContains(t, err, "partitioned:orders")
	n, err := Render(RabbitMQ4, Partitioned("orders", 4), Receive, "s")
	require.NoError(t, err)
	require.Equal(t, "/queues/orders.p0", n.Address)
}
