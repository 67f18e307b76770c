package inproc

import (
	"context"
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/transport"
)

func TestMaxSessionsRefusesABeginPastTheLimitAndKeepsTheConnection(t *testing.T) {
	b := New(WithMaxSessions(2))
	ctx := context.Background()
	c, err := b.Connect(ctx)
	require.NoError(t, err)
	defer c.Close(ctx)
	require.Equal(t, 2, c.(transport.SessionLimit).MaxSessions())

	s1, err := c.NewSession(ctx)
	require.NoError(t, err)
	_, err = c.NewSession(ctx)
	require.NoError(t, err)
	_, err = c.NewSession(ctx)
	var se *amqp.SessionError
	require.ErrorAs(t, err, &se)
	require.Equal(t, amqp.ErrCondResourceLimitExceeded, se.RemoteErr.Condition)
	require.Contains(t, se.RemoteErr.Description, "at most 2 sessions")
	select {
	case <-c.Done():
		t.Fatal("a refused begin ended the connection")
	default:
	}

	// A session ended makes room for another.
	require.NoError(t, s1.Close(ctx))
	_, err = c.NewSession(ctx)
	require.NoError(t, err)
}

func TestSetMaxSessionsHoldsOpenConnectionsToTheNewLimit(t *testing.T) {
	b := New()
	ctx := context.Background()
	c, err := b.Connect(ctx)
	require.NoError(t, err)
	defer c.Close(ctx)
	require.Equal(t, 1<<16, c.(transport.SessionLimit).MaxSessions())
	_, err = c.NewSession(ctx)
	require.NoError(t, err)

	b.SetMaxSessions(1)
	_, err = c.NewSession(ctx)
	require.Error(t, err)
	require.Equal(t, 1<<16, c.(transport.SessionLimit).MaxSessions(), "an open connection keeps what it advertised")
	c2, err := b.Connect(ctx)
	require.NoError(t, err)
	defer c2.Close(ctx)
	require.Equal(t, 1, c2.(transport.SessionLimit).MaxSessions())
}
