package endpoint

import (
	"context"
	"time"
)

// Bound returns ctx bounded by d when it has no deadline of its own, and
// Background bounded by d when it is nil. A close must be bounded even when
// its caller's context is not (go-amqp issue 310: a close the peer never
// answers blocks for ever); a context that is already done still lets the
// close begin, it just does not wait for the peer.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if ctx == nil {
		ctx = context.Background()
	}
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}
