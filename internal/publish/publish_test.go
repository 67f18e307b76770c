package publish

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const bound = 5 * time.Second

// fakeLink records what it sends. Its receipts wait for an outcome the test
// gives (resolve) or for the link to die (kill), which also fails every
// later Send.
type fakeLink struct {
	mu       sync.Mutex
	sent     []string
	receipts []*fakeReceipt
	dead     chan struct{}
	deadErr  error
	relay    bool
	sentTo   []address.Address
}

func newFakeLink() *fakeLink { return &fakeLink{dead: make(chan struct{})} }

type fakeReceipt struct {
	link    *fakeLink
	outcome chan messages.Outcome
}

func (r *fakeReceipt) Wait(ctx context.Context) (messages.Outcome, error) {
	select {
	case o := <-r.outcome:
		return o, nil
	case <-r.link.dead:
		return messages.Outcome{}, r.link.deadErr
	case <-ctx.Done():
		return messages.Outcome{}, ctx.Err()
	}
}

func (l *fakeLink) Send(_ context.Context, m *amqp.Message, _ bool) (transport.Receipt, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.dead:
		return nil, l.deadErr
	default:
	}
	l.sent = append(l.sent, string(m.GetData()))
	r := &fakeReceipt{link: l, outcome: make(chan messages.Outcome, 1)}
	l.receipts = append(l.receipts, r)
	return r, nil
}

func (l *fakeLink) SendTo(ctx context.Context, a address.Address, m *amqp.Message, settled bool) (transport.Receipt, error) {
	l.mu.Lock()
	l.sentTo = append(l.sentTo, a)
	l.mu.Unlock()
	return l.Send(ctx, m, settled)
}

func (l *fakeLink) Address() string             { return "fake" }
func (l *fakeLink) Close(context.Context) error { return nil }

// kill ends the link: outstanding receipts and later sends fail with a
// link error.
func (l *fakeLink) kill() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deadErr = &amqp.LinkError{}
	close(l.dead)
}

// resolve gives the i-th sent transfer its outcome.
func (l *fakeLink) resolve(i int, o messages.Outcome) {
	l.mu.Lock()
	r := l.receipts[i]
	l.mu.Unlock()
	r.outcome <- o
}

func (l *fakeLink) sentBodies() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.sent...)
}

func pub(ctx context.Context, body string) (*protocol.Publish, chan error) {
	done := make(chan error, 1)
	return &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte(body)), Done: done}, done
}

func answer(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		t.Fatal("never answered")
		return nil
	}
}

// harness starts one Link on a fakeLink and collects what it hands back.
type harness struct {
	link   *fakeLink
	lane   *Lane
	counts Counts
	ended  chan *Ended
	wg     sync.WaitGroup
	k      *Link
}

func start(t *testing.T, w *Waiting, anonymous bool) *harness {
	h := &harness{link: newFakeLink(), lane: NewLane(), ended: make(chan *Ended, 4)}
	h.k = Start(Config{Link: h.link, Gen: 7, Anonymous: anonymous, Lane: h.lane, Counts: &h.counts,
		Ended: func(e *Ended) { h.ended <- e },
		Go: func(f func()) {
			h.wg.Add(1)
			go func() { defer h.wg.Done(); f() }()
		}}, w)
	t.Cleanup(h.wg.Wait)
	return h
}

// finish lets the Link finish and waits for its marker.
func (h *harness) finish(t *testing.T) error {
	done := make(chan error, 1)
	h.k.Finish(done)
	return answer(t, done)
}

func TestStartSendsWhatWaitedFirst(t *testing.T) {
	ctx := context.Background()
	var w Waiting
	lane := NewLane()
	p1, d1 := pub(ctx, "pending")
	p2, d2 := pub(ctx, "resend")
	w.Add(p1)
	w.Keep([]*protocol.Publish{p2}, true)
	h := &harness{link: newFakeLink(), lane: lane, ended: make(chan *Ended, 4)}
	p3, d3 := pub(ctx, "parked")
	ok, wake := lane.Park(p3)
	require.True(t, ok)
	require.True(t, wake)
	require.False(t, lane.Offer(p3), "a lane is closed until Start")
	h.k = Start(Config{Link: h.link, Gen: 1, Lane: lane, Counts: &h.counts,
		Ended: func(e *Ended) { h.ended <- e }, Go: func(f func()) { h.wg.Go(f) }}, &w)
	t.Cleanup(h.wg.Wait)
	require.Zero(t, w.Len(), "Start takes everything that waits")
	p4, d4 := pub(ctx, "offered")
	require.True(t, lane.Offer(p4))
	require.Equal(t, uint64(1), lane.Used())

	require.Eventually(t, func() bool { return len(h.link.sentBodies()) == 4 }, bound, time.Millisecond)
	require.Equal(t, []string{"resend", "pending", "parked", "offered"}, h.link.sentBodies())
	require.Equal(t, uint64(1), h.counts.Resent.Load())
	for i := range 4 {
		h.link.resolve(i, messages.Outcome{Kind: messages.Accepted})
	}
	for _, d := range []chan error{d1, d2, d3, d4} {
		require.NoError(t, answer(t, d))
	}
	require.NoError(t, h.finish(t))
	require.False(t, lane.Offer(p4), "Finish closes the lane")
	require.Equal(t, uint64(4), h.counts.Published.Load())
	require.Equal(t, uint64(4), h.counts.Confirmed.Load())
}

func TestRejectedOutcomeFailsThatPublish(t *testing.T) {
	ctx := context.Background()
	h := start(t, &Waiting{}, false)
	p, done := pub(ctx, "x")
	h.k.Push(p)
	require.Eventually(t, func() bool { return len(h.link.sentBodies()) == 1 }, bound, time.Millisecond)
	h.link.resolve(0, messages.Outcome{Kind: messages.Rejected})
	var oe *messages.OutcomeError
	require.ErrorAs(t, answer(t, done), &oe)
	require.Equal(t, uint64(1), h.counts.Failed.Load())
	require.NoError(t, h.finish(t))
}

// A link that dies hands back what was written but never confirmed (from
// the confirmer, Written) and what was never written (from the writer).
func TestDeadLinkHandsBack(t *testing.T) {
	ctx := context.Background()
	h := start(t, &Waiting{}, false)
	written, _ := pub(ctx, "written")
	h.k.Push(written)
	require.Eventually(t, func() bool { return len(h.link.sentBodies()) == 1 }, bound, time.Millisecond)
	h.link.kill()

	var e *Ended
	select {
	case e = <-h.ended:
	case <-time.After(bound):
		t.Fatal("the confirmer handed nothing back")
	}
	require.Equal(t, uint64(7), e.Gen)
	require.True(t, e.Written)
	require.Equal(t, []*protocol.Publish{written}, e.Unsent)
	require.True(t, linkGone(e.Err))

	unsent, _ := pub(ctx, "unsent")
	h.k.Push(unsent)
	select {
	case e = <-h.ended:
	case <-time.After(bound):
		t.Fatal("the writer handed nothing back")
	}
	require.False(t, e.Written)
	require.Equal(t, []*protocol.Publish{unsent}, e.Unsent)

	// The writer has returned: Stop takes nothing more, and closes the lane.
	var w Waiting
	h.k.Stop(&w)
	require.Zero(t, w.Len())
	require.False(t, h.lane.Offer(unsent))
	select {
	case <-h.k.Done():
	case <-time.After(bound):
		t.Fatal("the confirmer never returned")
	}
}

// Stop takes back what the writer has not taken yet.
func TestStopTakesBackTheQueue(t *testing.T) {
	h := &harness{link: newFakeLink(), lane: NewLane(), ended: make(chan *Ended, 4)}
	var held []func()
	h.k = Start(Config{Link: h.link, Gen: 1, Lane: h.lane, Counts: &h.counts,
		Ended: func(e *Ended) { h.ended <- e },
		// The goroutines start only once the queue is stopped.
		Go: func(f func()) { held = append(held, f) }}, &Waiting{})
	p, done := pub(context.Background(), "x")
	require.True(t, h.lane.Offer(p))
	var w Waiting
	h.k.Stop(&w)
	require.Equal(t, 1, w.Len())
	for _, f := range held {
		h.wg.Go(f)
	}
	h.wg.Wait()
	require.Empty(t, h.link.sentBodies())
	select {
	case err := <-done:
		t.Fatalf("a publish taken back was answered: %v", err)
	default:
	}
}

// The anonymous terminus sends each publish to its own address; one the
// transport cannot send to fails that publish only.
func TestAnonymousSendsToEachAddress(t *testing.T) {
	h := start(t, &Waiting{}, true)
	p, done := pub(context.Background(), "x")
	p.Address = address.Queue("elsewhere")
	p.Settled = true
	h.k.Push(p)
	require.Eventually(t, func() bool { return len(h.link.sentBodies()) == 1 }, bound, time.Millisecond)
	h.link.resolve(0, messages.Outcome{Kind: messages.Accepted})
	require.NoError(t, answer(t, done))
	h.link.mu.Lock()
	require.Equal(t, []address.Address{address.Queue("elsewhere")}, h.link.sentTo)
	h.link.mu.Unlock()
	require.NoError(t, h.finish(t))
}

func TestLaneParkAndShut(t *testing.T) {
	l := NewLane()
	p1, _ := pub(context.Background(), "1")
	p2, _ := pub(context.Background(), "2")
	ok, wake := l.Park(p1)
	require.True(t, ok && wake)
	ok, wake = l.Park(p2)
	require.True(t, ok)
	require.False(t, wake, "one wake for what is parked until it is taken")
	require.Equal(t, []*protocol.Publish{p1, p2}, l.Shut())
	ok, _ = l.Park(p1)
	require.False(t, ok, "a shut lane parks nothing")
}

func TestWaitingOrder(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var w Waiting
	a, _ := pub(context.Background(), "a")
	b, _ := pub(context.Background(), "b")
	c, _ := pub(context.Background(), "c")
	gone, goneDone := pub(ctx, "gone")
	w.Add(c, gone)
	w.Keep([]*protocol.Publish{b}, false) // unsent: before what waited
	w.Keep([]*protocol.Publish{a}, true)  // unconfirmed: first of all
	cancel()
	w.Prune()
	require.ErrorIs(t, <-goneDone, context.Canceled)
	var got []string
	w.Hand(func(p *protocol.Publish) { got = append(got, string(p.Message.GetData())) })
	require.Equal(t, []string{"a", "b", "c"}, got)
	require.Zero(t, w.Len())
}

// linkGone is actors.LinkGone's test; the two must agree.
func TestLinkGoneAgreesWithActors(t *testing.T) {
	for _, err := range []error{
		nil, errors.New("x"), context.Canceled, &amqp.LinkError{}, &amqp.SessionError{}, &amqp.ConnError{},
		&amqp.Error{Condition: amqp.ErrCondNotFound}, &transport.LinkError{Op: "send", Err: &amqp.LinkError{}},
	} {
		require.Equal(t, actors.LinkGone(err), linkGone(err), "%v", err)
	}
}
