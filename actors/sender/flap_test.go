package sender_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/faketransport"
	"github.com/amqpactor/amqpactor/transport"
)

// flappingSession attaches links that the broker detaches at once (every
// send fails) while flapping is set.
type flappingSession struct {
	flapping atomic.Bool
	mu       sync.Mutex
	attaches int
	sent     []string
}

func (s *flappingSession) NewSender(context.Context, transport.SenderOptions) (transport.Sender, error) {
	s.mu.Lock()
	s.attaches++
	s.mu.Unlock()
	return &flappingLink{s: s, detached: s.flapping.Load()}, nil
}

func (s *flappingSession) NewReceiver(context.Context, transport.ReceiverOptions) (transport.Receiver, error) {
	return nil, fmt.Errorf("fake: no receivers")
}

func (s *flappingSession) Close(context.Context) error { return nil }

func (s *flappingSession) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attaches
}

type flappingLink struct {
	s        *flappingSession
	detached bool
}

func (l *flappingLink) Send(_ context.Context, m *amqp.Message, _ bool) (transport.Receipt, error) {
	if l.detached {
		return nil, &transport.LinkError{Address: "q", Op: "send",
			Err: &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondDetachForced, Description: "flapping"}}}
	}
	l.s.mu.Lock()
	l.s.sent = append(l.s.sent, string(m.GetData()))
	l.s.mu.Unlock()
	return accepted{}, nil
}

func (l *flappingLink) Address() string             { return "fake" }
func (l *flappingLink) Close(context.Context) error { return nil }

// A link detached right after every attach: the re-attach backoff grows
// (5 ms doubling up to 200 ms) instead of starting again after each
// short-lived attach, so a second of flapping is a dozen attaches, not
// hundreds; once the link stays, the publish that waited goes out.
func TestFlappingLinkBacksOffMore(t *testing.T) {
	sys, env := faketransport.NewSystem(t)
	env.Backoff = actors.Backoff{Initial: 5 * time.Millisecond, Max: 200 * time.Millisecond}
	sess := &flappingSession{}
	sess.flapping.Store(true)
	ready := make(chan *actor.PID, 1)
	ppid := sys.Root.Spawn(env.Props(func() actor.Actor { return &parent{env: env, sess: sess, ready: ready} }))
	<-ready
	ctx, cancel := context.WithTimeout(context.Background(), faketransport.Bound)
	defer cancel()
	done := make(chan error, 1)
	sys.Root.Send(ppid, &protocol.Publish{Ctx: ctx, Address: address.Queue("q"), Message: amqp.NewMessage([]byte("m")), Done: done})
	time.Sleep(time.Second) // the flapping lasts a second: its attaches are counted after
	n := sess.count()
	t.Logf("attaches in 1 s of flapping: %d", n)
	require.Less(t, n, 30, "the backoff starts again after each short-lived attach")
	sess.flapping.Store(false)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the publish was never answered")
	}
	require.Equal(t, []string{"m"}, sess.sent)
	require.NoError(t, sys.Root.PoisonFuture(ppid).Wait())
}
