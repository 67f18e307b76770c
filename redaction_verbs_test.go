package amqpactor_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqp091"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// TestRedactionEveryVerb: no formatting verb of any value that holds a URL
// (the connectors of Dial and Dial091, amqpwire.Config, the App, and what
// Start returns) shows a piece of the password of three characters or
// more, for every URL form (raw, escaped, failover). %#v of a connector used
// to print the Config whole.
func TestRedactionEveryVerb(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T", "%10.40v", "%-#v"}
	// Every window of three characters holds a symbol, so that no random
	// identifier (an actor system's id) or address printed with the App can
	// match a piece of the password by chance.
	for _, pw := range []string{"Kq/7Z:v9/Wm", "K%2F%3A%2F%40", "Kq@7Z:v9#Wm", "Kq%zz:9?W"} {
		raw := "amqp://user:" + pw + "@127.0.0.1:1/vh"
		other := "amqp://other:" + pw + "@127.0.0.1:1/"
		cfg := amqpwire.Config{URL: raw, Failover: []string{other}}
		values := map[string]any{
			"Dial":             amqpactor.Dial(raw),
			"Dial failover":    amqpactor.Dial(other, amqpactor.WithFailover(raw)),
			"Dial091":          amqpactor.Dial091(raw),
			"amqpwire.Config":  cfg,
			"*amqpwire.Config": &cfg,
			"amqp091.Config":   amqp091.Config(cfg),
			"amqpwire.New":     amqpwire.New(cfg),
			"amqp091.New":      amqp091.New(cfg),
		}
		for _, dial := range []amqpactor.Connector{amqpactor.Dial(raw), amqpactor.Dial091(raw)} {
			app := amqpactor.New(dial, amqpactor.WithName("redaction"))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := app.Start(ctx)
			require.Error(t, err)
			values[fmt.Sprintf("App on %T", dial)] = app
			values[fmt.Sprintf("Start error on %T", dial)] = err
			require.NoError(t, app.Stop(ctx))
			cancel()
		}
		for name, v := range values {
			for _, verb := range verbs {
				text := fmt.Sprintf(verb, v)
				for _, part := range secretParts(pw) {
					require.NotContains(t, text, part, "%s of %s shows part of the password %q: %s", verb, name, pw, text)
					require.NotContains(t, strings.ToLower(text), hex.EncodeToString([]byte(part)), "%s of %s shows part of the password %q in hex", verb, name, pw)
				}
			}
		}
	}
	// The redacted forms still say what they are.
	require.Contains(t, fmt.Sprintf("%#v", amqpwire.Config{URL: "amqp://u:secret@h/", ContainerID: "c1"}),
		`amqpwire.Config{URL:"amqp://u:xxxxx@h/"`)
	require.Contains(t, fmt.Sprintf("%#v", amqpactor.Dial("amqp://u:secret@h/")), `URL:"amqp://u:xxxxx@h/"`)
	require.Equal(t, "amqp://u:xxxxx@h/", fmt.Sprintf("%v", amqpactor.Dial091("amqp://u:secret@h/")))
}
