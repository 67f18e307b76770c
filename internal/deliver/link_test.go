package deliver_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// fakeLink hands out the messages in its queue and records what the
// settler does with them, in order.
type fakeLink struct {
	msgs chan *amqp.Message
	mu   sync.Mutex
	log  []string
	done chan struct{}
	once sync.Once
	// gone are the bodies the broker settled itself: Settle sends nothing
	// for them and says so.
	gone map[string]bool
}

func newFakeLink(bodies ...string) *fakeLink {
	l := &fakeLink{msgs: make(chan *amqp.Message, len(bodies)), done: make(chan struct{})}
	for _, b := range bodies {
		l.msgs <- amqp.NewMessage([]byte(b))
	}
	return l
}

func (l *fakeLink) note(s string) {
	l.mu.Lock()
	l.log = append(l.log, s)
	l.mu.Unlock()
}

func (l *fakeLink) events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.log...)
}

func (l *fakeLink) Address() string            { return "fake" }
func (l *fakeLink) IssueCredit(n uint32) error { return nil }
func (l *fakeLink) Receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case m := <-l.msgs:
		return m, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-l.done:
		return nil, &amqp.LinkError{}
	}
}

func (l *fakeLink) Settle(_ context.Context, m *amqp.Message, o messages.Outcome) error {
	if l.gone[string(m.GetData())] {
		return &transport.LinkError{Address: "fake", Op: "receive", Err: transport.ErrSettledByBroker}
	}
	l.note("settle " + string(m.GetData()) + " " + o.Kind.String())
	return nil
}

func (l *fakeLink) Close(context.Context) error {
	l.note("close")
	l.once.Do(func() { close(l.done) })
	return nil
}

// holders is the App's set of links (actors.Holders) for a test.
type holders struct {
	mu  sync.Mutex
	set map[any]struct{}
}

func (s *holders) Add(h any)    { s.mu.Lock(); s.set[h] = struct{}{}; s.mu.Unlock() }
func (s *holders) Remove(h any) { s.mu.Lock(); delete(s.set, h); s.mu.Unlock() }
func (s *holders) Range(f func(any) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range s.set {
		if !f(h) {
			return
		}
	}
}

// owner stands in for the receiver actor: it routes each batch as the
// dispatcher would, and settles verdicts one batch at a time, as the
// actor's mailbox does.
type owner struct {
	l     *deliver.Link
	route func(*protocol.Delivery)
	mu    sync.Mutex // the actor's mailbox: one Settle at a time
	idle  chan struct{}
}

func (o *owner) Settle(ds []*protocol.Delivery, _ *actor.PID) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l.Settle(ds)
}

func (o *owner) Batch() []*protocol.Delivery { return nil }
func (o *owner) Dispatch(ds []*protocol.Delivery) {
	for _, d := range ds {
		o.route(d)
	}
}
func (o *owner) Idle()       { close(o.idle) }
func (o *owner) Ended(error) {}

// link is a started Link on fl, with what a test reads of it.
type link struct {
	*deliver.Link
	counters *deliver.Counters
	hs       *holders
	wg       *sync.WaitGroup // the pump and the settler
}

// start starts a Link on fl whose deliveries go to route.
func start(t *testing.T, fl *fakeLink, credit uint32, route func(*protocol.Delivery)) link {
	t.Helper()
	hs := &holders{set: map[any]struct{}{}}
	var wg sync.WaitGroup
	counters := &deliver.Counters{}
	l := deliver.New(deliver.Config{
		Link: fl, Gen: 1, Address: "q", Credit: credit, Holders: hs, Counters: counters,
		Log: slog.New(slog.DiscardHandler), Go: wg.Go,
		CloseCtx: func(ctx context.Context) (context.Context, context.CancelFunc) {
			if _, ok := ctx.Deadline(); ok {
				return context.WithCancel(ctx)
			}
			return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		},
	})
	l.Start(&owner{l: l, route: route, idle: make(chan struct{})})
	t.Cleanup(func() { l.End(); wg.Wait() })
	return link{Link: l, counters: counters, hs: hs, wg: &wg}
}

// cut is a drain whose graceful part has run out, as the receiver actor
// does it: the pump stops, what is held goes back released, the link
// closes by ctx and the handlers' context ends. It waits for the close.
func (l link) cut(t *testing.T, ctx context.Context) {
	t.Helper()
	l.Pause()
	l.StopPump()
	done := make(chan error, 1)
	l.Cut(ctx, func(err error) { done <- err })
	l.Cancel()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the cut link was not closed by its ctx")
	}
}

// A handler's outcome for a delivery the broker settled already (RabbitMQ
// 4.3's release at a consumer timeout) is dropped: nothing more is sent,
// and it counts as late, not as the outcome it would have been. The
// deliveries around it settle as usual.
func TestOutcomeAfterTheBrokerSettledIsDropped(t *testing.T) {
	fl := newFakeLink("a", "b", "c")
	fl.gone = map[string]bool{"b": true}
	l := start(t, fl, 8, func(d *protocol.Delivery) {
		go d.Settle(messages.Outcome{Kind: messages.Accepted})
	})
	c := l.counters
	deadline := time.Now().Add(5 * time.Second)
	for c.Dropped.Load() < 1 || len(fl.events()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("accepted %d, late %d, events %v", c.ByOutcome[messages.Accepted].Load(), c.Dropped.Load(), fl.events())
		}
		time.Sleep(time.Millisecond)
	}
	if a, d := c.ByOutcome[messages.Accepted].Load(), c.Dropped.Load(); a != 2 || d != 1 {
		t.Errorf("accepted %d, late %d; want 2 and 1", a, d)
	}
	for _, e := range fl.events() {
		if e == "settle b accepted" {
			t.Errorf("b settled a second time: %v", fl.events())
		}
	}
}
