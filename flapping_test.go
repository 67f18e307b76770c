package amqpactor_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// A broker that detaches a receiver's link right after every attach (every
// 5 ms for 10 s): the backoff grows across the short-lived links instead of
// starting again after each, Ready is not nil all along, nothing published
// meanwhile is lost, and the App is ready again soon after the broker stops.
func TestDetachFlappingLinkBacksOff(t *testing.T) {
	if testing.Short() {
		t.Skip("flaps for 10 s")
	}
	defer goleak.VerifyNone(t, ignoreThrottle)
	sys := sharedSystem(t)
	const (
		flapFor = 10 * time.Second
		name    = "flapping"
		rcvPath = "connection/subscription:flapping/receiver"
	)
	q := amqpactor.Queue("flaps")
	b := inproc.New()
	log, _ := harness.NewLog(t)
	var mu sync.Mutex
	var attaches []time.Time
	app := amqpactor.New(b, amqpactor.WithActorSystem(sys), amqpactor.WithName(name), amqpactor.WithLogger(log),
		amqpactor.WithStateChanges(func(sc amqpactor.StateChange) {
			if sc.Path == rcvPath && sc.To == "attaching" {
				mu.Lock()
				attaches = append(attaches, sc.At)
				mu.Unlock()
			}
		}))
	tally := harness.NewTally()
	_, err := app.Subscribe(q, func(_ context.Context, m *amqpactor.Message) error {
		tally.Add(string(m.Body))
		return nil
	}, amqpactor.WithSubscriptionName(name))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() {
		t0 := time.Now()
		require.NoError(t, app.Stop(ctx))
		require.Less(t, time.Since(t0), time.Second, "Stop after the flapping")
	}()
	require.Eventually(t, func() bool { return app.Ready() == nil }, 10*time.Second, time.Millisecond)

	var ids []string
	publish := func() {
		id := fmt.Sprintf("m-%d", len(ids))
		ids = append(ids, id)
		// On the broker: the App's sender to the queue would flap too,
		// and the sender is not what is tried here.
		require.NoError(t, b.Publish(q, amqp.NewMessage([]byte(id))))
	}
	start := time.Now()
	mu.Lock()
	before := len(attaches)
	mu.Unlock()
	stop := make(chan struct{})
	detached := make(chan struct{})
	go func() {
		defer close(detached)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				b.DetachLinks(q, "amqp:link:detach-forced", "flapping")
			}
		}
	}()
	// One detach soon after an attach is an ordinary event; from the
	// second in a row the receiver is degraded, and stays not ready.
	require.Eventually(t, func() bool {
		err := app.Ready()
		return err != nil && strings.Contains(err.Error(), "degraded")
	}, 5*time.Second, time.Millisecond, "degraded once the link keeps being detached: %v", app.Ready())
	var readyWhileFlapping int
	var lastNotReady error
	for time.Since(start) < flapFor {
		if err := app.Ready(); err == nil {
			readyWhileFlapping++
		} else {
			lastNotReady = err
		}
		if len(ids) < 1000 {
			publish()
		}
		time.Sleep(2 * time.Millisecond) // the pace of the samples and publishes
	}
	close(stop)
	<-detached
	mu.Lock()
	during := len(attaches) - before
	mu.Unlock()
	stoppedAt := time.Now()
	t.Logf("%d attaches in %s of flapping; not ready meanwhile: %v", during, flapFor, lastNotReady)
	require.LessOrEqual(t, during, 30, "attaches while the broker detached every 5 ms")
	require.Zero(t, readyWhileFlapping, "Ready was nil while the link kept being detached")
	require.Contains(t, lastNotReady.Error(), "receiver")

	publish()
	require.Eventually(t, func() bool { return app.Ready() == nil }, 30*time.Second, 5*time.Millisecond,
		"ready again after the broker stopped detaching: %v", app.Ready())
	t.Logf("ready again %s after the broker stopped detaching", time.Since(stoppedAt).Round(time.Millisecond))
	require.Eventually(t, func() bool { return tally.Distinct() == len(ids) }, 10*time.Second, 5*time.Millisecond,
		"lost: %v", harness.First(tally.Missing(ids), 10))
	require.Empty(t, tally.Missing(ids))
	require.NoError(t, app.Health())
}
