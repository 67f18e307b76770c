package conformance

import (
	"context"
	"fmt"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// testTree: App.Tree shows the connection, the publisher with one sender per
// address, each subscription (named after it) with one receiver and one
// dispatcher that has exactly one partition node per partition, and the
// requests and txn nodes; closing a subscription takes its nodes away.
func testTree(e *env) {
	q := e.queue("tree")
	tp := e.topic("tree-events")
	rec := &recorder{}
	h := func(ctx context.Context, m *amqpactor.Message) error { rec.add("h", m); return nil }
	app := e.startedApp()
	subQ := e.subscribe(app, q, h, amqpactor.WithPartitions(3), amqpactor.WithSubscriptionName(e.unique("orders-sub")))
	subT := e.subscribe(app, tp, h, amqpactor.WithPartitions(1), amqpactor.WithCredit(17))
	e.publish(app, q, msg("q1"))
	e.publish(app, tp, msg("t1"))
	e.eventually(func() bool { return rec.n() == 2 }, "both messages")

	root := e.tree(app)
	dump := treeText(root)
	require.Equal(e, "connection", root.Kind, dump)
	require.Equal(e, "attached", root.State, dump)

	top := map[string]int{}
	for _, c := range root.Children {
		top[c.Kind]++
	}
	require.Equal(e, map[string]int{"publisher": 1, "requests": 1, "txn": 1, "subscription": 2}, top, dump)

	pub := childrenOf(root, "publisher")[0]
	senders := childrenOf(pub, "sender")
	require.Len(e, senders, 2, "one sender per address:\n%s", dump)
	addrs := map[string]bool{}
	for _, s := range senders {
		require.Equal(e, "attached", s.State, "sender %s:\n%s", s.Name, dump)
		require.EqualValues(e, 1, s.Counters["confirmed"], "sender %s:\n%s", s.Name, dump)
		addrs[s.Address] = true
	}
	require.True(e, containsPrefix(addrs, q.String()), "no sender for %s:\n%s", q, dump)
	require.True(e, containsPrefix(addrs, tp.String()), "no sender for %s:\n%s", tp, dump)

	for _, tc := range []struct {
		sub        *amqpactor.Subscription
		partitions int
		credit     uint64
	}{{subQ, 3, amqpactor.DefaultCredit}, {subT, 1, 17}} {
		s := subNode(root, tc.sub)
		require.NotNil(e, s, "no node named subscription:%s:\n%s", tc.sub.Name(), dump)
		require.Equal(e, tc.sub.Address().String(), s.Address, dump)
		require.Equal(e, "attached", s.State, dump)
		require.Equal(e, tc.credit, s.Counters["credit"], dump)
		require.Len(e, s.Children, 2, "a subscription has a receiver and a dispatcher:\n%s", dump)
		rs := childrenOf(s, "receiver")
		require.Len(e, rs, 1, dump)
		require.Equal(e, "attached", rs[0].State, dump)
		require.EqualValues(e, 1, rs[0].Counters["delivered"], dump)
		require.EqualValues(e, 1, rs[0].Counters["accepted"], dump)
		ds := childrenOf(s, "dispatcher")
		require.Len(e, ds, 1, dump)
		parts := ds[0].Children
		require.Len(e, parts, tc.partitions, "partition nodes of %s:\n%s", tc.sub.Name(), dump)
		for i, p := range parts {
			require.Equal(e, "partition", p.Kind, dump)
			require.Equal(e, fmt.Sprintf("partition-%d", i), p.Name, dump)
			require.Empty(e, p.Children, dump)
		}
	}

	ctx, cancel := context.WithTimeout(e.ctx, waitFor)
	defer cancel()
	require.NoError(e, subT.Close(ctx))
	root = e.tree(app)
	require.Nil(e, subNode(root, subT), "a closed subscription stays in the tree:\n%s", treeText(root))
	require.NotNil(e, subNode(root, subQ), treeText(root))
	require.Len(e, ofKind(root, "partition"), 3, treeText(root))
}

func containsPrefix(set map[string]bool, prefix string) bool {
	for s := range set {
		if len(s) >= len(prefix) && s[:len(prefix)] == prefix {
			return true
		}
	}
	return false
}
