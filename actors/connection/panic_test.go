package connection_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/actors/connection"
	"github.com/amqpactor/amqpactor/inproc"
)

// The connection actor panics in the middle of handling a lost connection
// (at its start, and after the children heard ConnDown) and in the middle
// of handling a dial's answer (before adopting the connection, and after
// telling the children ConnUp), while messages flow: after it is resumed
// it reconciles (the dead connection is treated as lost, the half-done
// dial is redone), the App is attached again on one connection, and every
// message published is handled.
func TestPanicMidLostOrDialedRecovers(t *testing.T) {
	for _, point := range []string{"lost:begin", "lost:told", "dialed:taken", "dialed:told"} {
		t.Run(point, func(t *testing.T) { panicMidStream(t, point) })
	}
}

func panicMidStream(t *testing.T, point string) {
	var armed atomic.Bool
	var hit atomic.Int64
	restore := connection.SetPanicAt(func(p string) {
		if p == point && armed.CompareAndSwap(true, false) {
			hit.Add(1)
			panic("test: panic at " + p)
		}
	})
	defer restore()

	sys := actor.NewActorSystem()
	defer sys.Shutdown()
	broker := inproc.New()
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys), amqpactor.WithName("panic-"+point),
		amqpactor.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	const n = 2000
	var mu sync.Mutex
	seen := map[int]bool{}
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(_ context.Context, m *amqpactor.Message) error {
		id, _ := strconv.Atoi(string(m.Body))
		mu.Lock()
		seen[id] = true
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { _ = app.Stop(context.Background()) }()
	handled := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}

	errs := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
				errs <- err
				return
			}
		}
	})
	require.Eventually(t, func() bool { return handled() >= n/4 }, 30*time.Second, time.Millisecond)
	armed.Store(true)
	require.Equal(t, 1, broker.DropConnections(errors.New("test: cut")))
	require.Eventually(t, func() bool { return hit.Load() == 1 }, 10*time.Second, time.Millisecond,
		"the connection actor never reached %s", point)
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)
	require.Eventually(t, func() bool { return handled() == n }, 30*time.Second, time.Millisecond,
		"every published message handled: %d of %d", handled(), n)
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		return err == nil && tree.State == "attached" && broker.Conns() == 1
	}, 10*time.Second, time.Millisecond, "attached again on one connection")
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, tree.Counters["panics"])
	t.Logf("%s: published %d, lost %d, connections %d", point, n, n-handled(), broker.Conns())
	require.NoError(t, app.Stop(ctx))
}
