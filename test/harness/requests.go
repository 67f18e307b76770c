package harness

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// RemoteErrors makes n requests of body to q one after the other, each
// bounded by 30 s, and requires each to fail with a *RemoteError (no reply)
// before its deadline. It returns those errors, as *RemoteError and as
// returned, and the time each request took.
func RemoteErrors(t testing.TB, app *amqpactor.App, q amqpactor.Address, body string, n int) ([]*amqpactor.RemoteError, []error, []time.Duration) {
	t.Helper()
	res := make([]*amqpactor.RemoteError, 0, n)
	errs := make([]error, 0, n)
	took := make([]time.Duration, 0, n)
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		begin := time.Now()
		rep, err := app.Request(ctx, q, &amqpactor.Message{Body: []byte(body)})
		took = append(took, time.Since(begin))
		require.Nil(t, rep)
		var re *amqpactor.RemoteError
		require.ErrorAs(t, err, &re, "request %d: want a *RemoteError, not a timeout", i)
		require.NoError(t, ctx.Err())
		cancel()
		res, errs = append(res, re), append(errs, err)
	}
	return res, errs, took
}

// Latencies describes the time each of a series of requests took: the first
// apart (it attaches the reply link), then the rest.
func Latencies(took []time.Duration) string {
	rest := slices.Clone(took[1:])
	slices.Sort(rest)
	n := len(rest)
	return fmt.Sprintf("first %v; the other %d: min %v, median %v, p90 %v, max %v",
		took[0].Round(time.Microsecond), n, rest[0].Round(time.Microsecond), rest[n/2].Round(time.Microsecond),
		rest[n*9/10].Round(time.Microsecond), rest[n-1].Round(time.Microsecond))
}
