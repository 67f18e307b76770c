package amqpactor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Failures are logged at warn with the address, message-id, delivery-count
// and outcome, never the body; past failureBurst in a second the rest are
// counted, and the count is logged when the next second begins.
func TestFailureLogRateLimited(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	f := &failureLog{log: slog.New(slog.NewTextHandler(&buf, nil)), addr: "orders", now: func() time.Time { return clock }}
	m := &Message{MessageID: "m-1", Body: []byte("secret body")}
	for range failureBurst + 15 {
		f.warn(m, 2, "modified (the broker redelivers it)", errors.New("boom"))
	}
	out := buf.String()
	require.Equal(t, failureBurst, strings.Count(out, "handler failed"), out)
	require.Contains(t, out, "level=WARN")
	require.Contains(t, out, "address=orders")
	require.Contains(t, out, "message-id=m-1")
	require.Contains(t, out, "delivery-count=2")
	require.Contains(t, out, `outcome="modified (the broker redelivers it)"`)
	require.NotContains(t, out, "secret body")
	require.NotContains(t, out, "not logged")

	buf.Reset()
	clock = clock.Add(time.Second)
	f.warn(m, 3, "rejected", errors.New("boom"))
	out = buf.String()
	require.Contains(t, out, "handler failures not logged")
	require.Contains(t, out, "count=15")
	require.Equal(t, 1, strings.Count(out, "handler failed"), out)
}

// RetryPolicy defaults apply only with a Backoff.
func TestRetryPolicyEffective(t *testing.T) {
	require.Equal(t, RetryPolicy{}, RetryPolicy{}.effective())
	p := RetryPolicy{Backoff: time.Minute}.effective()
	require.EqualValues(t, DefaultMaxDeliveries, p.MaxDeliveries)
	require.Equal(t, time.Minute, p.MaxBackoff, "MaxBackoff is at least Backoff")
	p = RetryPolicy{Backoff: time.Millisecond, MaxDeliveries: 2}.effective()
	require.EqualValues(t, 2, p.MaxDeliveries)
	require.Equal(t, DefaultMaxBackoff, p.MaxBackoff)
	require.True(t, retryable(errors.New("x")))
	require.False(t, retryable(Reject(errors.New("x"))))
	require.False(t, retryable(Release()))
	require.False(t, retryable(Undeliverable(nil)))
	require.False(t, retryable(nil))
}
