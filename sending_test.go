package amqpactor_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/test/harness"
)

// The bounds of sending under test: a short idle time so that retirement
// is seen within the test, and the slack of goroutines over the baseline
// that the runtime may have at any moment (timers firing, the test's own
// sampler): each sender link holds two goroutines (writer and confirmer),
// and one more while it attaches or retires.
const (
	testIdle       = 200 * time.Millisecond
	goroutineSlack = 16
)

// treeTimeout bounds a Tree: a sender that stops between its publisher's
// answer and the ask for its own node is waited for until the deadline
// (and then listed as gone), which retiring senders make common here.
const treeTimeout = 500 * time.Millisecond

// senders counts the sender nodes of app's tree and returns the
// publishers' counters, "publisher." and "replies." prefixed.
func senders(t *testing.T, app *amqpactor.App) (int, map[string]uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), treeTimeout)
	defer cancel()
	root, err := app.Tree(ctx)
	require.NoError(t, err)
	n, counters := 0, map[string]uint64{}
	var walk func(*amqpactor.Node)
	walk = func(x *amqpactor.Node) {
		if x.Kind == "sender" {
			n++
		}
		if x.Kind == "publisher" {
			for k, v := range x.Counters {
				counters[x.Name+"."+k] = v
			}
		}
		for _, c := range x.Children {
			walk(c)
		}
	}
	walk(root)
	return n, counters
}

// baseline is the goroutine count once the App has worked (its partition
// workers and sessions are up) and every sender has retired.
func baseline(t *testing.T, app *amqpactor.App) int {
	t.Helper()
	require.Eventually(t, func() bool {
		n, _ := senders(t, app)
		return n == 0
	}, 10*time.Second, 10*time.Millisecond, "the warm-up's senders retire")
	return runtime.NumGoroutine()
}

// warmUp answers one request, so that the baseline is taken with the
// subscription's workers and the replies session up.
func warmUp(t *testing.T, b *inproc.Broker) {
	t.Helper()
	b.DeclareQueue("warm-up")
	request(t, b, -1, "warm-up")
	require.Eventually(t, func() bool { return b.QueueDepth("warm-up") == 1 }, 10*time.Second, 10*time.Millisecond)
}

// backToBaseline waits until every sender has retired and the goroutines
// are back to base.
func backToBaseline(t *testing.T, app *amqpactor.App, base int) {
	t.Helper()
	ok := assertEventually(func() bool {
		n, _ := senders(t, app)
		return n == 0 && runtime.NumGoroutine() <= base
	}, 10*time.Second)
	n, c := senders(t, app)
	if !ok {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("senders did not retire, or goroutines did not return to the baseline of %d: %d sender nodes, %d goroutines, counters %v\n%s",
			base, n, runtime.NumGoroutine(), c, buf)
	}
	t.Logf("after idle: %d sender nodes, %d goroutines (baseline %d), publisher counters %v", n, runtime.NumGoroutine(), base, c)
}

// assertEventually is require.Eventually that reports instead of failing.
func assertEventually(cond func() bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// request publishes a request to rpc from outside the App, as another
// client would, with the reply-to given.
func request(t *testing.T, b *inproc.Broker, id int, replyTo string) {
	t.Helper()
	m := amqp.NewMessage([]byte("req-" + strconv.Itoa(id)))
	m.Properties = &amqp.MessageProperties{MessageID: "req-" + strconv.Itoa(id), ReplyTo: &replyTo}
	require.NoError(t, b.Publish(amqpactor.Queue("rpc"), m))
}

func echo(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
	return &amqpactor.Message{Body: req.Body}, nil
}

// TestRepliesToManyAddressesStayBounded: a Responder answering requests
// from 2,000 distinct reply-to addresses keeps its sender links and
// goroutines bounded, and all of them go once idle. With the anonymous
// relay every reply goes through one link; without it, through at most
// the bound of dedicated links, the least recently used making room.
func TestRepliesToManyAddressesStayBounded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []inproc.Option
		maxSenders int
		bound      int // sender nodes at most
	}{
		{"relay", nil, 0, 1},
		{"no-relay", []inproc.Option{inproc.WithoutAnonymousRelay()}, 8, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			b := inproc.New(tc.opts...)
			app, _ := startResponder(t, b, echo, amqpactor.WithSenderLimits(tc.maxSenders, testIdle))
			warmUp(t, b)
			base := baseline(t, app)
			const n = 2000
			for i := range n {
				b.DeclareQueue("reply." + strconv.Itoa(i))
			}
			pk := harness.SamplePeaks(app, 5*time.Millisecond, treeTimeout)
			for i := range n {
				request(t, b, i, "reply."+strconv.Itoa(i))
			}
			require.Eventually(t, func() bool {
				for i := range n {
					if b.QueueDepth("reply."+strconv.Itoa(i)) != 1 {
						return false
					}
				}
				return true
			}, 30*time.Second, 20*time.Millisecond, "every reply arrives once")
			pk.Stop()
			require.Empty(t, b.DeadLetters("rpc"), "no request failed")
			require.Equal(t, 0, b.QueueDepth("rpc"))
			t.Logf("%s: peak %d sender nodes (bound %d), peak %d goroutines (baseline %d)",
				tc.name, pk.Senders.Load(), tc.bound, pk.Goroutines.Load(), base)
			require.LessOrEqual(t, int(pk.Senders.Load()), tc.bound)
			require.LessOrEqual(t, int(pk.Goroutines.Load()), base+3*tc.bound+goroutineSlack)
			backToBaseline(t, app, base)
		})
	}
}

// TestRepliesNeverShareFateWithOwnPublishes: 10,000 requests from
// distinct reply-to addresses, a third of them queues that do not exist,
// while the App publishes 10,000 messages to its own queue: none of its own
// publishes fails, each reply to a missing queue fails alone (its request
// is rejected, the queue is never created), the others all arrive, and
// links and goroutines stay bounded and go once idle.
func TestRepliesNeverShareFateWithOwnPublishes(t *testing.T) {
	noLeaks(t)
	b := inproc.New()
	app, ctx := startResponder(t, b, echo, amqpactor.WithSenderLimits(0, testIdle))
	warmUp(t, b)
	const n = 10000
	reply := func(i int) string { return "reply." + strconv.Itoa(i) }
	missing := func(i int) bool { return i%3 == 0 }
	for i := range n {
		if !missing(i) {
			b.DeclareQueue(reply(i))
		}
	}
	own := amqpactor.Queue("own")
	b.DeclareQueue("own")
	require.NoError(t, app.Publish(ctx, own, &amqpactor.Message{Body: []byte("warm-up")}))
	base := baseline(t, app)

	pk := harness.SamplePeaks(app, 5*time.Millisecond, treeTimeout)
	var wg sync.WaitGroup
	var ownErrs atomic.Int64
	var firstErr atomic.Value
	const publishers = 8
	for w := range publishers {
		wg.Go(func() {
			for i := w; i < n; i += publishers {
				if err := app.Publish(ctx, own, &amqpactor.Message{Body: []byte(strconv.Itoa(i))}); err != nil {
					ownErrs.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	for i := range n {
		request(t, b, i, reply(i))
	}
	wg.Wait()
	require.Zero(t, ownErrs.Load(), "own publishes failed, first: %v", firstErr.Load())
	require.Equal(t, n+1, b.QueueDepth("own"))
	wantRejected := 0
	for i := range n {
		if missing(i) {
			wantRejected++
		}
	}
	require.Eventually(t, func() bool { return len(b.DeadLetters("rpc")) == wantRejected },
		30*time.Second, 20*time.Millisecond, "each request whose reply-to is missing is rejected once")
	for i := range n {
		if missing(i) {
			require.False(t, b.HasQueue(reply(i)), "a missing reply-to is never created")
		} else {
			require.Equal(t, 1, b.QueueDepth(reply(i)), "reply %d", i)
		}
	}
	pk.Stop()
	const bound = 2 // the dedicated sender of "own" and the anonymous one of replies
	t.Logf("peak %d sender nodes (bound %d), peak %d goroutines (baseline %d)", pk.Senders.Load(), bound, pk.Goroutines.Load(), base)
	require.LessOrEqual(t, int(pk.Senders.Load()), bound)
	require.LessOrEqual(t, int(pk.Goroutines.Load()), base+3*bound+goroutineSlack+publishers)
	backToBaseline(t, app, base)
}

// TestPublishToManyQueuesInTurn: publishing to 1,000 distinct queues in
// turn works; the dedicated senders stay within their bound, the rest
// goes through the anonymous link, or, without the relay, the least
// recently used sender makes room.
func TestPublishToManyQueuesInTurn(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []inproc.Option
		maxSenders int
		bound      int
	}{
		{"relay", nil, 0, amqpactor.DefaultMaxSenders + 1},
		{"no-relay", []inproc.Option{inproc.WithoutAnonymousRelay()}, 16, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			b := inproc.New(tc.opts...)
			app := amqpactor.New(b, amqpactor.WithSenderLimits(tc.maxSenders, testIdle))
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			t.Cleanup(func() { require.NoError(t, app.Stop(context.Background())) })
			b.DeclareQueue("warm-up")
			require.NoError(t, app.Publish(ctx, amqpactor.Queue("warm-up"), &amqpactor.Message{}))
			base := baseline(t, app)
			const n = 1000
			for i := range n {
				b.DeclareQueue(fmt.Sprintf("many.%d", i))
			}
			pk := harness.SamplePeaks(app, 5*time.Millisecond, treeTimeout)
			for round := range 2 {
				for i := range n {
					require.NoError(t, app.Publish(ctx, amqpactor.Queue(fmt.Sprintf("many.%d", i)),
						&amqpactor.Message{Body: []byte(strconv.Itoa(round))}))
				}
			}
			pk.Stop()
			for i := range n {
				require.Equal(t, 2, b.QueueDepth(fmt.Sprintf("many.%d", i)), "queue %d", i)
			}
			t.Logf("%s: peak %d sender nodes (bound %d), peak %d goroutines (baseline %d)",
				tc.name, pk.Senders.Load(), tc.bound, pk.Goroutines.Load(), base)
			require.LessOrEqual(t, int(pk.Senders.Load()), tc.bound)
			require.LessOrEqual(t, int(pk.Goroutines.Load()), base+3*tc.bound+goroutineSlack)
			backToBaseline(t, app, base)
		})
	}
}

// TestPublishRacingRetirement: senders that retire after a millisecond
// unused, with publishes to 40 addresses from 8 goroutines: every publish
// lands exactly once, though senders retire under them all the time.
func TestPublishRacingRetirement(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []inproc.Option
	}{
		{"relay", nil},
		{"no-relay", []inproc.Option{inproc.WithoutAnonymousRelay()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			b := inproc.New(tc.opts...)
			app := amqpactor.New(b, amqpactor.WithSenderLimits(8, time.Millisecond))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			t.Cleanup(func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, app.Stop(sctx))
			})
			const addrs, workers, each = 40, 8, 500
			for i := range addrs {
				b.DeclareQueue("race." + strconv.Itoa(i))
			}
			var wg sync.WaitGroup
			errs := make(chan error, workers*each)
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						a := amqpactor.Queue("race." + strconv.Itoa((w*each+i*7)%addrs))
						if err := app.Publish(ctx, a, &amqpactor.Message{Body: []byte("x")}); err != nil {
							errs <- err
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			total := 0
			for i := range addrs {
				total += b.QueueDepth("race." + strconv.Itoa(i))
			}
			require.Equal(t, workers*each, total, "every publish landed exactly once")
			_, c := senders(t, app)
			t.Logf("%s: senders retired meanwhile: %d publisher, %d replies", tc.name, c["publisher.retired"], c["replies.retired"])
			require.NotZero(t, c["publisher.retired"], "senders retired under the publishes")
		})
	}
}
