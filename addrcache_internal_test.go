package amqpactor

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/inproc"
)

// The addresses an App has checked are remembered up to a bound: a
// Responder answers whatever reply-to its peers name, so an unbounded cache
// would grow with every new one. Past the bound checks still answer.
func TestCheckedAddressesAreBounded(t *testing.T) {
	app := New(inproc.New())
	for i := range maxCheckedAddresses + 1000 {
		require.NoError(t, app.checkAddress(Raw(fmt.Sprint("reply-", i)), address.Send))
	}
	require.Equal(t, int64(maxCheckedAddresses), app.addrN.Load())
	n := 0
	app.addrCache.Range(func(_, _ any) bool { n++; return true })
	require.Equal(t, maxCheckedAddresses, n)
	require.Error(t, app.checkAddress(Queue(""), address.Send), "a bad address past the bound")
	require.NoError(t, app.checkAddress(Raw("reply-0"), address.Send), "a remembered one")
}
