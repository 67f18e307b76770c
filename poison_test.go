package amqpactor_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/transport"
)

// nodeOf finds the first node of kind in the tree.
func nodeOf(n *amqpactor.Node, kind string) *amqpactor.Node {
	if n.Kind == kind {
		return n
	}
	for _, c := range n.Children {
		if r := nodeOf(c, kind); r != nil {
			return r
		}
	}
	return nil
}

func receiverNode(n *amqpactor.Node) *amqpactor.Node { return nodeOf(n, "receiver") }

// TestPoisonReplyIsNotDelivered: a reply marked poison never reaches its
// caller, who waits out its context; the reply pump counts it.
func TestPoisonReplyIsNotDelivered(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	app := amqpactor.New(inproc.New())
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		m := &amqpactor.Message{Body: []byte("pong")}
		if string(req.Body) == "poison" {
			m.DeliveryAnnotations = map[string]any{transport.PoisonAnnotation: "set by the responder"}
		}
		return m, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()

	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer rcancel()
	_, err = app.Request(rctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("poison")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	require.Equal(t, "pong", string(rep.Body))

	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	rn := nodeOf(tree, "requests")
	require.NotNil(t, rn)
	require.EqualValues(t, 1, rn.Counters["poison"])
}

// TestPoisonIsRejectedAlone: a delivery marked poison (here by the peer
// itself, which the runtime treats the same as the guard's mark) never
// reaches the handler; it is rejected with amqp:decode-error and the reason,
// counted and logged without its payload, and every other message is
// handled once, the link never ending.
func TestPoisonIsRejectedAlone(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	b := inproc.New()
	logs := &syncWriter{w: &bytes.Buffer{}}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	app := amqpactor.New(b, amqpactor.WithLogger(log))
	var handled, redelivered atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("in"), func(ctx context.Context, m *amqpactor.Message) error {
		if _, ok := m.DeliveryAnnotations[transport.PoisonAnnotation]; ok {
			t.Errorf("a poison message reached the handler")
		}
		if m.DeliveryCount != 0 {
			redelivered.Add(1)
		}
		handled.Add(1)
		return nil
	}, amqpactor.WithCredit(4))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))

	const normal = 20
	for i := 0; i < normal; i++ {
		if i == 3 {
			require.NoError(t, b.Publish(amqpactor.Queue("in"), &amqp.Message{
				DeliveryAnnotations: amqp.Annotations{transport.PoisonAnnotation: "char value in application-properties"},
				Data:                [][]byte{[]byte("SECRET-PAYLOAD")},
			}))
		}
		require.NoError(t, b.Publish(amqpactor.Queue("in"), &amqp.Message{Data: [][]byte{[]byte("ok")}}))
	}
	require.Eventually(t, func() bool { return handled.Load() == normal && len(b.DeadLetters("in")) == 1 },
		5*time.Second, 5*time.Millisecond)

	dead := b.DeadLetters("in")[0]
	require.Equal(t, "amqp:decode-error", dead.Annotations["x-opt-inproc-condition"])
	require.Contains(t, dead.Annotations["x-opt-inproc-description"], "char value in application-properties")

	var rn *amqpactor.Node
	require.Eventually(t, func() bool {
		tree, err := app.Tree(ctx)
		if err != nil {
			return false
		}
		rn = receiverNode(tree)
		return rn != nil && rn.Counters["rejected"] == 1 && rn.Counters["accepted"] == normal
	}, 5*time.Second, 5*time.Millisecond)
	require.EqualValues(t, 1, rn.Counters["poison"])
	require.EqualValues(t, normal+1, rn.Counters["delivered"])
	require.Zero(t, rn.Restarts)
	require.Zero(t, redelivered.Load())
	require.NoError(t, app.Stop(ctx))

	text := logs.String()
	require.Contains(t, text, "poison message rejected")
	require.Contains(t, text, "char value in application-properties")
	require.NotContains(t, text, "SECRET-PAYLOAD")
}

// syncWriter lets the logger write from several goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
