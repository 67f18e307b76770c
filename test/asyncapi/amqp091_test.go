package asyncapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// The document of an App on Dial091 (server protocol amqp 0.9.1) passes
// the official parser too.
func TestDial091DocumentPassesTheParser(t *testing.T) {
	node := needParser(t)
	app := amqpactor.New(amqpactor.Dial091("amqp://ops:hunter2-secret@127.0.0.1:5672/"), amqpactor.WithName("shipping-091"))
	_, err := app.Subscribe(amqpactor.Queue("shipments"), func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	doc, err := app.AsyncAPI()
	require.NoError(t, err)
	require.Contains(t, string(doc), `"protocolVersion": "0.9.1"`)
	v := validate(t, node, doc)
	requireValid(t, v)
	require.Equal(t, []string{"queue-shipments"}, v.Channels)
}
