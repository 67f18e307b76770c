package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// ignoreThrottle: protoactor's dead-letter log throttle, which ends by
// itself a second after an actor system's first dead letter.
var ignoreThrottle = goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")

// establishedTo counts this process's ESTABLISHED TCP connections to port
// (IPv4 and IPv6), from /proc/self/net/tcp{,6} and the socket inodes among
// this process's file descriptors: the connections the broker sees from us.
func establishedTo(t *testing.T, port int) int {
	t.Helper()
	mine := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, "socket:[") {
			mine[strings.TrimSuffix(strings.TrimPrefix(target, "socket:["), "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		f, err := os.Open(table)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		require.NoError(t, err)
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, rport, ok := strings.Cut(fields[2], ":")
			if !ok {
				continue
			}
			p, err := strconv.ParseUint(rport, 16, 16)
			if err == nil && int(p) == port && mine[fields[9]] {
				n++
			}
		}
		require.NoError(t, sc.Err())
		_ = f.Close()
	}
	return n
}

func brokerPort(t *testing.T, u string) int {
	pu, err := url.Parse(u)
	require.NoError(t, err)
	p, err := strconv.Atoi(pu.Port())
	require.NoError(t, err)
	return p
}

// TestLiveCancelledStarts: 40 Starts on a live broker whose context is
// cancelled before or while they run, or ends after a few milliseconds,
// each followed by Stop: no connection to the broker is left ESTABLISHED
// (counted in /proc for this process), and no goroutine is left.
func TestLiveCancelledStarts(t *testing.T) { eachBroker(t, cancelledStarts) }

func cancelledStarts(t *testing.T, b liveBroker) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	port := brokerPort(t, b.url)
	baseline := establishedTo(t, port)
	const pairs = 40
	failed, maxLeft := 0, 0
	for i := range pairs {
		app, _ := b.app(t, b.url)
		_, err := app.Subscribe(b.queue(t, "faults.cancelled"), func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		// Cancelled before Start, while it runs, or a deadline within the
		// dial, the AMQP open or the attach.
		ctx, cancel := harness.EarlyEnd(i, time.Duration(1+i%10)*time.Millisecond)
		if app.Start(ctx) != nil {
			failed++
		}
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		require.NoError(t, app.Stop(sctx), "pair %d: Stop", i)
		scancel()
		left := establishedTo(t, port) - baseline
		maxLeft = max(maxLeft, left)
		require.Zero(t, left, "pair %d: connections to the broker left ESTABLISHED", i)
	}
	t.Logf("FIGURES %s: pairs=%d starts_failed=%d connections_left_max=%d", t.Name(), pairs, failed, maxLeft)
}

// cutThenStop runs the cut-then-Stop scenario `runs` times: an App (from
// setup, with the cut for its connection) publishes from 4 goroutines, the
// connection is cut, the App reconnects and publishes again, the publishers
// stop, and then Stop, given a deadline of stopBound, must return before
// it: a Stop that waits out its deadline is a goroutine that never ends (a
// sender left with two writers after a second attach did, about 1 run in
// 10). It returns the slowest Stop.
func cutThenStop(t *testing.T, runs int, q amqpactor.Address, setup func() (*amqpactor.App, func() int)) time.Duration {
	const stopBound = 2 * time.Second
	var slowest time.Duration
	for i := range runs {
		app, cut := setup()
		_, err := app.Subscribe(q, func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
		require.NoError(t, app.Start(sctx), "run %d: Start", i)
		scancel()

		// Publishers keep publishing through the cut (their failures are
		// the point, not an error of the test) until told to stop.
		pubCtx, stopPublishing := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var mu sync.Mutex
		confirmed := 0
		for w := range 4 {
			wg.Go(func() {
				for n := 0; pubCtx.Err() == nil; n++ {
					ctx, cancel := context.WithTimeout(pubCtx, 5*time.Second)
					err := app.Publish(ctx, q, &amqpactor.Message{MessageID: fmt.Sprintf("%d-%d-%d", i, w, n)})
					cancel()
					if err == nil {
						mu.Lock()
						confirmed++
						mu.Unlock()
					}
				}
			})
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return confirmed }
		require.Eventually(t, func() bool { return count() >= 20 }, 20*time.Second, time.Millisecond, "run %d: publishes before the cut", i)
		require.NotZero(t, cut(), "run %d: connections cut", i)
		require.Eventually(t, func() bool { return connected(app, 1) }, 20*time.Second, 5*time.Millisecond, "run %d: reconnected", i)
		before := count()
		require.Eventually(t, func() bool { return count() >= before+20 }, 20*time.Second, time.Millisecond, "run %d: publishes after the cut", i)
		stopPublishing()
		wg.Wait()

		ctx, cancel := context.WithTimeout(context.Background(), stopBound)
		begin := time.Now()
		err = app.Stop(ctx)
		took := time.Since(begin)
		hit := ctx.Err()
		cancel()
		slowest = max(slowest, took)
		require.NoError(t, hit, "run %d: Stop waited out its %v deadline (took %v): %v", i, stopBound, took, err)
		require.NoError(t, err, "run %d: Stop", i)
	}
	return slowest
}

// TestInprocCutThenStop: the cut-then-Stop scenario 50 times on the
// in-process broker (DropConnections).
func TestInprocCutThenStop(t *testing.T) {
	const runs = 50
	slowest := cutThenStop(t, runs, amqpactor.Queue("cutstop"), func() (*amqpactor.App, func() int) {
		b := inproc.New()
		app, _ := inprocApp(t, b)
		return app, func() int { return b.DropConnections(errors.New("fault injection: cut")) }
	})
	t.Logf("FIGURES %s: runs=%d stop_deadline=2s stop_max=%s", t.Name(), runs, slowest.Round(time.Millisecond))
}

// TestLiveCutThenStop: the cut-then-Stop scenario 50 times on a live
// broker, through the fault proxy. Goroutines are checked by TestMain (the
// proxies end with the test).
func TestLiveCutThenStop(t *testing.T) {
	eachBroker(t, func(t *testing.T, b liveBroker) {
		const runs = 50
		q := b.queue(t, "faults.cutstop")
		slowest := cutThenStop(t, runs, q, func() (*amqpactor.App, func() int) {
			p, pu := viaProxy(t, b.url)
			app, _ := b.app(t, pu)
			return app, p.Cut
		})
		t.Logf("FIGURES %s: runs=%d stop_deadline=2s stop_max=%s", t.Name(), runs, slowest.Round(time.Millisecond))
	})
}

// TestInprocEstablishedCount checks the /proc count the live tests rely on
// against a listener of the test's own: one connection counted while it is
// open, none once it is closed.
func TestInprocEstablishedCount(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	port := ln.Addr().(*net.TCPAddr).Port
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	require.Zero(t, establishedTo(t, port))
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server := <-accepted
	defer func() { _ = server.Close() }()
	require.Equal(t, 1, establishedTo(t, port), "the open connection")
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return establishedTo(t, port) == 0 }, 5*time.Second, time.Millisecond, "none once closed")
}
