package amqpactor_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secretParts lists every substring of length 3 or more of pw and of its
// percent-decoded form.
func secretParts(pw string) []string {
	forms := []string{pw}
	if d, err := url.PathUnescape(pw); err == nil && d != pw {
		forms = append(forms, d)
	}
	var out []string
	for _, f := range forms {
		for i := range len(f) {
			for j := i + 3; j <= len(f); j++ {
				out = append(out, f[i:j])
			}
		}
	}
	return out
}

// TestRedactionEverywhere: a URL whose password holds characters that end
// a URL's authority ('/', '?', '#'), a broken escape, an '@' or a ':' never
// shows any part of the password: not in Start's error, not in later
// errors, not in the connector's String (the tree's connection node), not
// in the AsyncAPI document, not in the App's or the connector's log; and
// the same when the URL is a failover endpoint (WithFailover).
func TestRedactionEverywhere(t *testing.T) {
	defer goleak.VerifyNone(t, ignoreThrottle)
	passwords := []string{
		"Kq7/Zv9Wm",   // '/' ended the authority: host "user", port "Kq7"
		"4817/2930xQ", // ... and with digits the URL parsed: port 4817, path "/2930xQ@…"
		"Kq7#Zv9Wm",   // '#' starts a fragment
		"Kq7?Zv9Wm",   // '?' starts a query
		"Kq7%zzZv9Wm", // not an escape: the parse error quoted "%zz"
		"Kq7@Zv9Wm",   // '@' inside the password
		"Kq7:Zv9Wm",   // ':' inside the password
		"Kq/7#Z?v%zz9@W:m",
		"Kq7%2FZv9Wm", // escaped properly: decodes to Kq7/Zv9Wm
	}
	shapes := []struct {
		name, url string
		dialled   string // the host:port the error must name, if any
	}{
		{"refused", "amqp://user:%s@127.0.0.1:1/vh", "127.0.0.1:1"},
		{"tls", "amqps://user:%s@127.0.0.1:1/", "127.0.0.1:1"},
		{"plain-remote", "amqp://user:%s@192.0.2.1:5672/", ""},
		{"bad-host", "amqp://user:%s@[::1/", ""},
		{"bad-path", "amqp://user:%s@127.0.0.1:1/%%zy", ""},
		{"no-scheme", "user:%s@127.0.0.1:1", ""},
	}
	for _, pw := range passwords {
		for _, sh := range shapes {
			for _, failover := range []bool{false, true} {
				name := sh.name
				if failover {
					name += "-failover"
				}
				t.Run(name+"/"+strings.NewReplacer("/", "_", "%", "pct", "#", "hash", "?", "q").Replace(pw), func(t *testing.T) {
					raw := fmt.Sprintf(sh.url, pw)
					log := &syncBuffer{}
					// No time stamps and a fixed name: digits of either could
					// match a digit run of a password by chance.
					logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug,
						ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
							if a.Key == slog.TimeKey && len(groups) == 0 || a.Key == "id" {
								return slog.Attr{} // the actor system's random id, likewise
							}
							return a
						}}))
					dial := amqpactor.Dial(raw, amqpactor.WithDialLogger(logger))
					if failover {
						// A refused Dial URL with the same password, then raw.
						dial = amqpactor.Dial(fmt.Sprintf("amqp://other:%s@127.0.0.1:1/", pw), amqpactor.WithDialLogger(logger),
							amqpactor.WithFailover(raw))
					}
					app := amqpactor.New(dial, amqpactor.WithLogger(logger), amqpactor.WithName("redaction"))
					_, err := app.Subscribe(amqpactor.Queue("q"), func(context.Context, *amqpactor.Message) error { return nil })
					require.NoError(t, err)
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					startErr := app.Start(ctx)
					require.Error(t, startErr, "Start")
					pubErr := app.Publish(ctx, amqpactor.Queue("q"), &amqpactor.Message{})
					_, reqErr := app.Request(ctx, amqpactor.Queue("q"), &amqpactor.Message{})
					_, treeErr := app.Tree(ctx)
					doc, docErr := app.AsyncAPI()
					require.NoError(t, docErr)
					require.NoError(t, app.Stop(ctx))
					seen := map[string]string{
						"Start":     fmt.Sprintf("%v %+v %#v", startErr, startErr, startErr.Error()),
						"Publish":   fmt.Sprint(pubErr),
						"Request":   fmt.Sprint(reqErr),
						"Tree":      fmt.Sprint(treeErr),
						"String":    app.Connector().String(),
						"AsyncAPI":  string(doc),
						"log":       log.String(),
						"Connector": fmt.Sprintf("%v %+v", app.Connector(), app.Connector()),
					}
					for where, text := range seen {
						for _, part := range secretParts(pw) {
							require.NotContains(t, text, part, "%s shows part of the password %q", where, pw)
						}
					}
					if sh.dialled != "" {
						require.Contains(t, startErr.Error(), "dial tcp "+sh.dialled, "the right host was dialled")
					}
					t.Log(startErr)
					t.Log(app.Connector().String())
				})
			}
		}
	}
}
