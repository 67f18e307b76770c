package harness

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// Tree returns the App's tree, failing the test on error.
func Tree(t testing.TB, app *amqpactor.App) *amqpactor.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := app.Tree(ctx)
	require.NoError(t, err)
	return n
}

// TreeOr returns the App's tree, or nil if it does not answer in time: for a
// condition polled while the App may be reconnecting.
func TreeOr(app *amqpactor.App) *amqpactor.Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, _ := app.Tree(ctx)
	return n
}

// OfKind returns the nodes of n's tree of the kind, depth first.
func OfKind(n *amqpactor.Node, kind string) []*amqpactor.Node {
	if n == nil {
		return nil
	}
	var out []*amqpactor.Node
	if n.Kind == kind {
		out = append(out, n)
	}
	for _, c := range n.Children {
		out = append(out, OfKind(c, kind)...)
	}
	return out
}

// Sum adds counter over the nodes of n's tree of the kind.
func Sum(n *amqpactor.Node, kind, counter string) uint64 {
	var s uint64
	for _, k := range OfKind(n, kind) {
		s += k.Counters[counter]
	}
	return s
}

// TreeText is n's tree one node a line, indented, with its address, state,
// restarts, last error and counters (sorted), for a failure message.
func TreeText(n *amqpactor.Node) string {
	var b strings.Builder
	var walk func(n *amqpactor.Node, depth int)
	walk = func(n *amqpactor.Node, depth int) {
		keys := make([]string, 0, len(n.Counters))
		for k := range n.Counters {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		cs := make([]string, 0, len(keys))
		for _, k := range keys {
			cs = append(cs, fmt.Sprintf("%s=%d", k, n.Counters[k]))
		}
		fmt.Fprintf(&b, "%s%s [%s] address=%s state=%s restarts=%d err=%q %s\n", strings.Repeat("  ", depth), n.Name, n.Kind,
			n.Address, n.State, n.Restarts, n.LastError, strings.Join(cs, " "))
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	if n != nil {
		walk(n, 0)
	}
	return b.String()
}

// StartApp starts app (within 30 s) and stops it with StopApp when the test
// ends.
func StartApp(t testing.TB, app *amqpactor.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { StopApp(t, app) })
}

// StopApp stops app within 20 s. Stop must return by its deadline, never
// hang; an error (a bounded drain cut short by a fault) is only logged.
func StopApp(t testing.TB, app *amqpactor.App) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	err := app.Stop(ctx)
	require.Less(t, time.Since(start), 21*time.Second, "Stop returned by its deadline")
	if err != nil {
		t.Logf("Stop: %v", err)
	}
}
