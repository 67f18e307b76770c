package amqpactor_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/fleettest"
)

// Three replicas, 16 groups × 500 messages, the busiest replica stopped
// mid-stream and a fourth started: nothing lost, no group out of order, no
// partition queue handled by two replicas at once.
func TestPartitionedFleetInProcess(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	res := fleettest.Run(t, fleettest.Config{
		Addr:    amqpactor.Partitioned("orders-fleet", 8),
		AppName: "orders-svc",
		NewApp:  func(name string) *amqpactor.App { return amqpactor.New(b, amqpactor.WithName(name)) },
	})
	fleettest.RequireSound(t, res, 8000)
	require.Positive(t, res.Handovers, "the stopped replica held partitions: "+res.String())
}

// Publish routes by FNV-1a(group-id) mod n; a message without a group-id
// goes round robin.
func TestPartitionedPublishRoutesByGroup(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	b := inproc.New()
	addr := amqpactor.Partitioned("routed", 4)
	app := amqpactor.New(b)
	var mu sync.Mutex
	got := map[string][]string{} // partition queue → group-ids
	sub, err := app.Subscribe(addr, func(ctx context.Context, m *amqpactor.Message) error {
		mu.Lock()
		defer mu.Unlock()
		q := protocol.PartitionFrom(ctx).Address.Name()
		got[q] = append(got[q], m.GroupID)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, addr, sub.Address())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	for i := range 40 {
		require.NoError(t, app.Publish(ctx, addr, &amqpactor.Message{GroupID: "c-" + strconv.Itoa(i)}))
	}
	for range 8 {
		require.NoError(t, app.Publish(ctx, addr, &amqpactor.Message{}))
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range got {
			n += len(v)
		}
		return n
	}
	require.Eventually(t, func() bool { return count() == 48 }, 5*time.Second, time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for q, groups := range got {
		none := 0
		for _, g := range groups {
			if g == "" {
				none++
				continue
			}
			require.Equal(t, addr.Partition(addr.PartitionFor(g)).Name(), q, "group %s", g)
		}
		require.Equal(t, 2, none, "round robin: two messages without group-id on %s", q)
	}
	require.Len(t, got, 4)
}

// The tree shows one subscription per partition queue, named after it.
func TestPartitionedTreeNamesQueues(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	app := amqpactor.New(inproc.New(), amqpactor.WithName("svc"))
	_, err := app.Subscribe(amqpactor.Partitioned("orders", 3), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	subs := map[string]string{}
	for _, c := range tree.Children {
		if c.Kind == "subscription" {
			subs[c.Name] = c.Address
		}
	}
	require.Equal(t, map[string]string{
		"subscription:svc.orders.p0": "queue:orders.p0",
		"subscription:svc.orders.p1": "queue:orders.p1",
		"subscription:svc.orders.p2": "queue:orders.p2",
	}, subs)
}

// A Partitioned address out of range fails Subscribe and Publish, naming it.
func TestPartitionedAddressValidated(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	app := amqpactor.New(inproc.New())
	for _, n := range []int{0, -1, 1025} {
		_, err := app.Subscribe(amqpactor.Partitioned("orders", n), func(context.Context, *amqpactor.Message) error { return nil })
		require.ErrorContains(t, err, "partitioned:orders")
		require.ErrorContains(t, err, "out of range 1..1024")
		var ae *amqpactor.AddressError
		require.ErrorAs(t, err, &ae)
	}
	_, err := app.Subscribe(amqpactor.Partitioned("", 8), func(context.Context, *amqpactor.Message) error { return nil })
	require.ErrorContains(t, err, "empty name")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	err = app.Publish(ctx, amqpactor.Partitioned("orders", 2000), &amqpactor.Message{GroupID: "g"})
	require.ErrorContains(t, err, "partitioned:orders")
}

// Request and Tx.Publish route to the group-id's partition as Publish does.
func TestPartitionedRequestAndTransaction(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	addr := amqpactor.Partitioned("rpc-parts", 4)
	app := amqpactor.New(inproc.New())
	_, err := app.Subscribe(addr, amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte(protocol.PartitionFrom(ctx).Address.Name())}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	for _, g := range []string{"a", "b", "c", "d", "e"} {
		rep, err := app.Request(ctx, addr, &amqpactor.Message{GroupID: g})
		require.NoError(t, err)
		require.Equal(t, addr.Partition(addr.PartitionFor(g)).Name(), string(rep.Body), g)
	}
	// A transaction's publish lands on the group's partition queue too
	// (the responder answers it; its reply goes nowhere).
	require.NoError(t, app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		return tx.Publish(ctx, addr, &amqpactor.Message{GroupID: "a"})
	}))
}

func ExamplePartitioned() {
	broker := inproc.New()
	orders := amqpactor.Partitioned("orders", 8) // queues orders.p0 … orders.p7
	handled := make(chan string, 1)
	// Every replica (App of one name) subscribes alike; each partition
	// queue delivers to one replica at a time.
	app := amqpactor.New(broker, amqpactor.WithName("order-service"))
	_, _ = app.Subscribe(orders, func(ctx context.Context, m *amqpactor.Message) error {
		handled <- m.GroupID + " on " + protocol.PartitionFrom(ctx).Address.Name()
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() { _ = app.Stop(ctx) }()
	_ = app.Publish(ctx, orders, &amqpactor.Message{GroupID: "customer-7", Body: []byte("order 1")})
	fmt.Println(<-handled)
	fmt.Println("partition of customer-7:", orders.PartitionFor("customer-7"))
	// Output:
	// customer-7 on orders.p1
	// partition of customer-7: 1
}
