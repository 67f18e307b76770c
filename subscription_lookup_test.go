package amqpactor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

func TestAppSubscriptionByName(t *testing.T) {
	app := amqpactor.New(inproc.New(), amqpactor.WithName("names"))
	s, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	require.Same(t, s, app.Subscription(s.Name()))
	require.Equal(t, "names.orders", s.Name())
	require.Nil(t, app.Subscription("nothing"))
	require.Nil(t, app.Subscription(""))
	var nilApp *amqpactor.App
	require.Nil(t, nilApp.Subscription("x"))

	// A Partitioned address: one subscription per partition queue, each
	// found by its own name.
	p, err := app.Subscribe(amqpactor.Partitioned("jobs", 2), func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	require.Nil(t, app.Subscription(p.Name()), "the whole runs nothing itself")
	require.NotNil(t, app.Subscription(p.Name()+".p0"))
	require.NotNil(t, app.Subscription(p.Name()+".p1"))
}
