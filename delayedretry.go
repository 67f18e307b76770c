package amqpactor

import (
	"fmt"
	"maps"
	"time"

	"github.com/amqpactor/amqpactor/transport"
)

// delayedRetryArgs checks a subscription's RetryPolicy.BrokerDelay and
// returns its queue arguments with RabbitMQ 4.3's delayed retry added
// (transport.DelayedRetryType and its bounds). Without BrokerDelay it
// returns qargs as they are.
func (a *App) delayedRetryArgs(addr Address, c *subConfig, qargs map[string]any) (map[string]any, error) {
	p := c.retry
	if p.BrokerDelay == 0 && p.MaxBrokerDelay == 0 {
		return qargs, nil
	}
	fail := func(why string) error {
		return fmt.Errorf("amqpactor: Subscribe %s: RetryPolicy.BrokerDelay: %s", addr, why)
	}
	switch {
	case p.BrokerDelay <= 0 || p.MaxBrokerDelay < 0:
		return nil, fail(fmt.Sprintf("delays %v, %v: BrokerDelay must be positive, MaxBrokerDelay not negative", p.BrokerDelay, p.MaxBrokerDelay))
	case p.Backoff > 0:
		return nil, fail("with Backoff: a failure is retried either in place or by the broker")
	case !p.RetryAddress.IsZero():
		return nil, fail("with RetryAddress: the broker delays the failure on its own queue")
	case c.classic:
		return nil, fail("a classic queue has no delayed retry (quorum queues do)")
	case c.settled:
		return nil, fail("an at-most-once subscription has no retries")
	}
	if d, ok := a.Connector().(transport.DelayedRetrier); !ok || !d.DelayedRetry() {
		return nil, fmt.Errorf("amqpactor: Subscribe %s: RetryPolicy.BrokerDelay: %w: the broker's delayed retry is RabbitMQ 4.3's, over AMQP 1.0",
			addr, ErrNotSupported)
	}
	for _, k := range []string{transport.DelayedRetryType, transport.DelayedRetryMin, transport.DelayedRetryMax} {
		if _, set := qargs[k]; set {
			return nil, fail(fmt.Sprintf("queue argument %q is set by WithQueueArguments too", k))
		}
	}
	limit := p.MaxBrokerDelay
	if limit == 0 {
		limit = DefaultMaxBackoff
	}
	limit = max(limit, p.BrokerDelay)
	out := make(map[string]any, len(qargs)+3)
	maps.Copy(out, qargs)
	out[transport.DelayedRetryType] = "failed"
	out[transport.DelayedRetryMin] = millis(p.BrokerDelay)
	out[transport.DelayedRetryMax] = millis(limit)
	return out, nil
}

// millis is d in whole milliseconds, at least one: the broker's unit.
func millis(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }
