package faketransport

import (
	"context"
	"sync/atomic"
)

// Gate holds the first attach through it until Release is closed, then
// answers it with First (nil lets it attach); every later attach passes at
// once. A nil Release holds nothing. Tests use it to let an attach answer
// late, after the actor that asked has moved on.
type Gate struct {
	Calls   atomic.Int64
	Release chan struct{}
	First   error
}

// Pass is called at the start of an attach; a non-nil error fails it.
func (g *Gate) Pass(ctx context.Context) error {
	if g.Calls.Add(1) != 1 || g.Release == nil {
		return nil
	}
	select {
	case <-g.Release:
		return g.First
	case <-ctx.Done():
		return ctx.Err()
	}
}
