package amqpactor_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

func TestSmoke(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
	app := amqpactor.New(inproc.New())
	var got atomic.Int64
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		got.Add(1)
		return nil
	})
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	}))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	for i := 0; i < 100; i++ {
		require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return got.Load() == 100 }, 5*time.Second, 5*time.Millisecond)
	rep, err := app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	require.Equal(t, "re:ping", string(rep.Body))
	tree, err := app.Tree(ctx)
	require.NoError(t, err)
	b, _ := json.MarshalIndent(tree, "", "  ")
	t.Log(string(b))
	require.NoError(t, app.Stop(ctx))
}
