package faults

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqp091"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// signer makes JWTs as an OAuth 2 server would, with an HMAC key the test
// made and the broker was given (rabbitmq4.sh oauth2 on).
type signer struct {
	kid string
	key []byte
}

// token is a JWT for the resource server "amqpactor" with every permission,
// expiring at exp.
func (s signer) token(exp time.Time) string {
	enc := base64.RawURLEncoding
	head, _ := json.Marshal(map[string]any{"alg": "HS256", "typ": "JWT", "kid": s.kid})
	claims, _ := json.Marshal(map[string]any{
		"sub":   "amqpactor-token-test",
		"aud":   []string{"amqpactor"},
		"scope": "amqpactor.configure:*/* amqpactor.write:*/* amqpactor.read:*/*",
		"iat":   time.Now().Unix(),
		"exp":   exp.Unix(),
	})
	body := enc.EncodeToString(head) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, s.key)
	mac.Write([]byte(body))
	return body + "." + enc.EncodeToString(mac.Sum(nil))
}

// oauth2Broker gives the RabbitMQ test broker a signing key made here and
// lets it take tokens signed with it, until the test ends. It needs root
// and a broker that can renew a token on a live connection (4.1+: the 4.3
// test broker).
func oauth2Broker(t *testing.T) (string, signer) {
	t.Helper()
	u := livetest.URL(t, "the token tests")
	if v := scriptOut(t, "version"); v != "4.3" {
		t.Skipf("RabbitMQ %s cannot take a new token on a live connection; the token tests run on the 4.3 test broker (make test-live43)", v)
	}
	needRoot(t)
	requireScriptNode(t, u)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s := signer{kid: harness.Unique("amqpactor-test-key"), key: key}
	jwk, _ := json.Marshal(map[string]string{"kty": "oct", "alg": "HS256", "k": base64.RawURLEncoding.EncodeToString(key)})
	brokerCtl(t, "oauth2", "on", s.kid, string(jwk))
	t.Cleanup(func() { brokerCtl(t, "oauth2", "off") })
	// The token is the only credential: the URL keeps no userinfo.
	pu, err := url.Parse(u)
	require.NoError(t, err)
	pu.User = nil
	return pu.String(), s
}

func scriptOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("bash", append([]string{"../broker/rabbitmq4.sh"}, args...)...).Output()
	require.NoError(t, err, "rabbitmq4.sh %s", strings.Join(args, " "))
	return strings.TrimSpace(string(out))
}

// The broker really ends a connection whose token expires: without it the
// long test below would prove nothing. A source that calls its tokens
// everlasting is never asked to renew them.
func TestTokenExpiryEndsUnrenewedConnection(t *testing.T) {
	u, s := oauth2Broker(t)
	cfg := amqpwire.Config{URL: u, Dialect: amqpactor.RabbitMQ4,
		TokenSource: func(context.Context) (string, time.Time, error) {
			return s.token(time.Now().Add(3 * time.Second)), time.Time{}, nil
		}}
	for name, c := range map[string]transport.Connector{"amqp10": amqpwire.New(cfg), "amqp091": amqp091.New(cfg)} {
		t.Run(name, func(t *testing.T) {
			conn, err := c.Connect(harness.Bound(t, 30*time.Second))
			require.NoError(t, err, "the broker takes the token")
			defer func() { _ = conn.Close(context.Background()) }()
			select {
			case <-conn.Done():
				t.Logf("the broker ended the connection: %v", conn.Err())
			case <-time.After(30 * time.Second):
				t.Fatal("the broker kept a connection whose token expired")
			}
		})
	}
}

// A token that expires every 30 s, renewed through WithTokenSource, keeps
// one connection up for 3 minutes with traffic, with no reconnect.
func TestTokenRefreshKeepsConnection(t *testing.T) {
	if testing.Short() && os.Getenv("REQUIRE_LIVE") != "1" {
		t.Skip("three minutes long: skipped by -short outside REQUIRE_LIVE=1")
	}
	tokenRefreshScenario(t, amqpactor.Dial, 30*time.Second, 3*time.Minute)
}

// The same over AMQP 0-9-1, where the token is renewed by
// connection.update-secret: tokens of 10 s for 45 s.
func TestTokenRefreshKeepsConnection091(t *testing.T) {
	tokenRefreshScenario(t, amqpactor.Dial091, 10*time.Second, 45*time.Second)
}

// tokenRefreshScenario publishes and consumes for run on one connection
// dialled with tokens living life, and checks it was never lost.
func tokenRefreshScenario(t *testing.T, dial func(string, ...amqpactor.DialOption) amqpactor.Connector, life, run time.Duration) {
	u, s := oauth2Broker(t)
	var issued atomic.Int64
	var lastTok atomic.Value
	src := func(context.Context) (string, time.Time, error) {
		issued.Add(1)
		exp := time.Now().Add(life)
		tok := s.token(exp)
		lastTok.Store(tok)
		return tok, exp, nil
	}
	log, logs := harness.NewLog(t)
	var mu sync.Mutex
	var conn []amqpactor.StateChange
	app := amqpactor.New(dial(u, amqpactor.WithDialect(amqpactor.RabbitMQ4), amqpactor.WithTokenSource(src)),
		amqpactor.WithLogger(log), amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second),
		amqpactor.WithStateChanges(func(c amqpactor.StateChange) {
			if c.Kind == "connection" {
				mu.Lock()
				conn = append(conn, c)
				mu.Unlock()
			}
		}))
	q := rabbitMQ(t).queue(t, "faults.tokens")
	got := harness.NewTally()
	_, err := app.Subscribe(q, func(_ context.Context, m *amqpactor.Message) error { got.Add(m.MessageID.(string)); return nil })
	require.NoError(t, err)
	harness.StartApp(t, app)

	ctx := harness.Bound(t, run+time.Minute)
	var sent []string
	for end := time.Now().Add(run); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		id := fmt.Sprintf("t-%d", len(sent))
		require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{MessageID: id, Durable: true}), "publish %s", id)
		sent = append(sent, id)
	}
	require.Eventually(t, func() bool { return len(got.Missing(sent)) == 0 }, 30*time.Second, 10*time.Millisecond,
		"every message delivered")
	require.NoError(t, app.Health())

	mu.Lock()
	defer mu.Unlock()
	var states []string
	for _, c := range conn {
		states = append(states, c.From+"→"+c.To)
		require.NoError(t, c.Err, "the connection never lost: %v", c)
	}
	require.Equal(t, []string{"→attaching", "attaching→attached"}, states, "one connection, never reconnected")
	// A token at connect, and one renewal per three quarters of a life.
	minIssued := int64(run / (life * 3 / 4))
	require.GreaterOrEqual(t, issued.Load(), minIssued, "renewed on the live connection")
	text := logs.String()
	require.NotContains(t, text, lastTok.Load().(string), "no token in the log")
	require.NotContains(t, text, "token refresh failed")
	t.Logf("FIGURES %s: published=%d tokens_issued=%d connection_states=%v", t.Name(), len(sent), issued.Load(), states)
}
