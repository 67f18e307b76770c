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
)

// fakeLink hands out the messages in its queue and records what the
// settler does with them, in order.
type fakeLink struct {
	msgs chan *amqp.Message
	mu   sync.Mutex
	log  []string
	done chan struct{}
	once sync.Once
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
	hs *holders
	wg *sync.WaitGroup // the pump and the settler
}

// start starts a Link on fl whose deliveries go to route.
func start(t *testing.T, fl *fakeLink, credit uint32, route func(*protocol.Delivery)) link {
	t.Helper()
	hs := &holders{set: map[any]struct{}{}}
	var wg sync.WaitGroup
	l := deliver.New(deliver.Config{
		Link: fl, Gen: 1, Address: "q", Credit: credit, Holders: hs, Counters: &deliver.Counters{},
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
	return link{Link: l, hs: hs, wg: &wg}
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
