package amqpactor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// A request's generated message-id and its correlation key are spelt in one
// string: the key must be what protocol.CorrelationKey makes of the id, or
// replies would find no waiter. A long App name outgrows the stack buffer.
func TestRequestKeyIsCorrelationKeyOfID(t *testing.T) {
	for _, name := range []string{"app", strings.Repeat("n", 200)} {
		app := New(inproc.New(), WithName(name))
		for range 3 {
			key := app.requestKey()
			id := key[len(protocol.StringKeyPrefix):]
			require.True(t, strings.HasPrefix(id, name+"-"), id)
			require.Equal(t, protocol.CorrelationKey(id), key)
		}
	}
	app := New(inproc.New(), WithName("a"))
	require.Equal(t, "s:a-1", app.requestKey())
	require.Equal(t, "s:a-2", app.requestKey())
}
