package amqpactor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
)

// The AsyncAPI document of an App on Dial091 names AMQP 0.9.1, and holds
// no credentials.
func TestAsyncAPIDial091(t *testing.T) {
	const password = "s3cret-Pa55"
	app := amqpactor.New(amqpactor.Dial091("amqps://svc-user:"+password+"@broker.test:5671/prod"), amqpactor.WithName("billing"))
	raw, err := app.AsyncAPI()
	require.NoError(t, err)
	require.NotContains(t, string(raw), password)
	require.NotContains(t, string(raw), "svc-user")
	doc := asyncDoc(t, app)
	require.Equal(t, "amqps", get(doc, "servers", "broker", "protocol"))
	require.Equal(t, "0.9.1", get(doc, "servers", "broker", "protocolVersion"))
	require.Equal(t, "broker.test:5671", get(doc, "servers", "broker", "host"))
}
