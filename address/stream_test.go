package address

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStreamAddress(t *testing.T) {
	s := Stream("audit")
	require.True(t, s.IsStream())
	require.Equal(t, KindQueue, s.Kind())
	require.Equal(t, "stream:audit", s.String())
	require.NotEqual(t, Queue("audit"), s)
	require.False(t, Queue("audit").IsStream())
	require.NoError(t, s.Validate())
	require.Error(t, Stream("a::b").Validate())
	n, err := Render(RabbitMQ4, s, Receive, "x")
	require.NoError(t, err)
	require.Equal(t, "/queues/audit", n.Address)
	require.NoError(t, CheckStream(RabbitMQ4, s))
	require.ErrorContains(t, CheckStream(Artemis, s), "stream:audit")
	require.ErrorContains(t, CheckStream(ServiceBus, s), "stream:audit")
	require.NoError(t, CheckStream(Artemis, Queue("audit")))
}

func TestStreamOffsets(t *testing.T) {
	now := time.Now()
	require.Equal(t, "next", StreamOffset{}.String())
	require.Equal(t, StreamNext(), StreamOffset{})
	require.Equal(t, "first", StreamFirst().String())
	require.Equal(t, "last", StreamLast().String())
	require.Equal(t, "offset 42", StreamAt(42).String())
	require.Equal(t, int64(42), StreamAt(42).Offset())
	require.Equal(t, now, StreamSince(now).Time())
	require.Equal(t, OffsetSince, StreamSince(now).Kind())

	s := Stream("audit")
	require.NoError(t, CheckStreamOffset(s, StreamAt(0), true))
	require.ErrorContains(t, CheckStreamOffset(s, StreamAt(-1), true), "negative")
	require.ErrorContains(t, CheckStreamOffset(s, StreamSince(time.Time{}), true), "time")
	require.ErrorContains(t, CheckStreamOffset(Queue("q"), StreamFirst(), true), "queue:q")
	require.NoError(t, CheckStreamOffset(Queue("q"), StreamOffset{}, false))
}
