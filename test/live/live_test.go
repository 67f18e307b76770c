// Package live holds the App-level tests that only a live broker can answer:
// settle modes on the wire, a broker's refusal of a publish, refused
// attaches and credentials at Start, and that no credential ever leaks into
// an error or a log line. They read AMQP_URL (RabbitMQ 4); without it they
// skip loudly, and under REQUIRE_LIVE=1 (CI) they fail instead.
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport"
	"github.com/amqpactor/amqpactor/transport/amqpwire"

	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func brokerURL(t *testing.T) string {
	t.Helper()
	return livetest.URL(t, "the live App tests")
}

func unique(prefix string) string { return harness.Unique(prefix) }

func bound(t *testing.T) context.Context { return harness.Bound(t, 30*time.Second) }

func newApp(t *testing.T, u string, logs *harness.LogBuffer, opts ...amqpactor.DialOption) *amqpactor.App {
	var log *slog.Logger
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts = append([]amqpactor.DialOption{amqpactor.WithDialect(amqpactor.RabbitMQ4)}, opts...)
	if log != nil {
		opts = append(opts, amqpactor.WithDialLogger(log))
	}
	return amqpactor.New(amqpactor.Dial(u, opts...), amqpactor.WithLogger(log))
}

func start(t *testing.T, app *amqpactor.App) {
	t.Helper()
	require.NoError(t, app.Start(bound(t)))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
}

// TestSettleModes: an unsettled publish waits for the broker's accept, a
// settled one returns once written, an at-most-once subscription gets
// pre-settled deliveries (a failing handler does not bring them back).
func TestSettleModes(t *testing.T) {
	u := brokerURL(t)
	q := amqpactor.Queue(unique("live.settle"))
	app := newApp(t, u, nil)
	var got atomic.Int64
	var attempts atomic.Int64
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		attempts.Add(1)
		got.Add(1)
		return errors.New("fails, but at-most-once never redelivers")
	}, amqpactor.AtMostOnce())
	require.NoError(t, err)
	start(t, app)
	ctx := bound(t)
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("unsettled")}))
	require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("settled")}, amqpactor.Settled()))
	require.Eventually(t, func() bool { return got.Load() == 2 }, 10*time.Second, 10*time.Millisecond)
	// A redelivery would arrive well within this bound; none may.
	require.Never(t, func() bool { return attempts.Load() > 2 }, 500*time.Millisecond, 20*time.Millisecond)
}

// TestPublishRejectedOutcome: a queue with max-length 1 and reject-publish
// overflow refuses a publish once full; Publish returns *OutcomeError
// carrying the rejected outcome and naming the address. RabbitMQ 4.3 also
// names the queue and the reason (maxlen) in the outcome's info, and the
// error says both; 4.0 sends no info.
func TestPublishRejectedOutcome(t *testing.T) {
	u := brokerURL(t)
	v := livetest.RabbitMQ(t, u)
	name := unique("live.full")
	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		_, err := m.DeclareQueue(ctx, amqpwire.QueueSpec{Name: name, Arguments: map[string]any{
			"x-max-length": int64(1), "x-overflow": "reject-publish"}})
		require.NoError(t, err)
	})
	t.Cleanup(func() {
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) { _ = brokeradmin.DeleteQueue(ctx, m, name) })
	})
	app := newApp(t, u, nil)
	start(t, app)
	ctx := bound(t)
	var oe *amqpactor.OutcomeError
	for i := 0; i < 5; i++ {
		err := app.Publish(ctx, amqpactor.Raw("/queues/"+name), &amqpactor.Message{Body: []byte("x")})
		if errors.As(err, &oe) {
			break
		}
		require.NoError(t, err, "publish %d", i)
	}
	require.NotNil(t, oe, "a full reject-publish queue must refuse a publish (quorum queues accept one past the limit)")
	require.Equal(t, messages.Outcome{Kind: oe.Outcome.Kind}.Kind.String(), "rejected", "outcome %s", oe.Outcome)
	require.Contains(t, oe.Error(), name, "the error names the address")
	if !v.AtLeast(4, 3) {
		require.Empty(t, oe.Queue(), "RabbitMQ %v sends no info: %s", v, oe.Outcome)
		require.Empty(t, oe.Reason(), "RabbitMQ %v sends no info: %s", v, oe.Outcome)
		return
	}
	require.Equal(t, name, oe.Queue(), "info %v", oe.Outcome.Info)
	require.Equal(t, "maxlen", oe.Reason(), "info %v", oe.Outcome.Info)
	require.Contains(t, oe.Error(), fmt.Sprintf("queue %q", name), "the error names the queue")
	require.Contains(t, oe.Error(), "maxlen", "the error says why")
}

// TestCreditBoundOnWire: with credit 8 and handlers that hold every
// delivery, the broker reports at most 8 unacknowledged messages for the
// queue's consumer, and everything else waits on the queue.
func TestCreditBoundOnWire(t *testing.T) {
	u := brokerURL(t)
	name := unique("live.credit")
	q := amqpactor.Queue(name)
	app := newApp(t, u, nil)
	release := make(chan struct{})
	var held, maxHeld atomic.Int64
	_, err := app.Subscribe(q, func(ctx context.Context, m *amqpactor.Message) error {
		n := held.Add(1)
		for {
			old := maxHeld.Load()
			if n <= old || maxHeld.CompareAndSwap(old, n) {
				break
			}
		}
		select {
		case <-release:
		case <-ctx.Done():
		}
		held.Add(-1)
		return nil
	}, amqpactor.WithCredit(8), amqpactor.WithPartitions(32))
	require.NoError(t, err)
	start(t, app)
	ctx := bound(t)
	for i := 0; i < 40; i++ {
		require.NoError(t, app.Publish(ctx, q, &amqpactor.Message{Body: []byte("x")}))
	}
	require.Eventually(t, func() bool { return held.Load() == 8 }, 10*time.Second, 10*time.Millisecond)
	// The broker's own count of ready messages: 32 wait on the queue, so
	// no more than 8 went out on credit.
	var ready uint64
	mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
		info, err := m.QueueInfo(ctx, name)
		require.NoError(t, err)
		ready = info.Messages
	})
	require.EqualValues(t, 32, ready, "messages the broker still holds ready")
	require.Never(t, func() bool { return held.Load() > 8 }, 300*time.Millisecond, 10*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool {
		var n uint64
		mgmt(t, u, func(ctx context.Context, m *amqpwire.Management) {
			info, err := m.QueueInfo(ctx, name)
			require.NoError(t, err)
			n = info.Messages
		})
		return n == 0
	}, 15*time.Second, 50*time.Millisecond)
	require.LessOrEqual(t, maxHeld.Load(), int64(8))
}

// TestStartFailsClearly: a refused attach names the address and the
// broker's condition; bad credentials say so; neither takes longer than the
// context, and neither leaks the password into the error or the logs.
func TestStartFailsClearly(t *testing.T) {
	u := brokerURL(t)
	t.Run("refused attach", func(t *testing.T) {
		logs := &harness.LogBuffer{}
		app := newApp(t, u, logs)
		missing := "/queues/" + unique("live.missing")
		_, err := app.Subscribe(amqpactor.Raw(missing), func(context.Context, *amqpactor.Message) error { return nil })
		require.NoError(t, err)
		err = app.Start(bound(t))
		require.Error(t, err)
		require.Contains(t, err.Error(), missing)
		var ae *amqp.Error
		require.True(t, errors.As(err, &ae), "the broker's *amqp.Error is reachable: %v", err)
		require.Equal(t, amqp.ErrCondNotFound, ae.Condition)
		var le *amqpactor.LinkError
		require.True(t, errors.As(err, &le))
		require.NoError(t, app.Stop(bound(t)))
		noSecret(t, u, err.Error(), logs.String())
	})
	t.Run("bad credentials", func(t *testing.T) {
		bad, err := url.Parse(u)
		require.NoError(t, err)
		const secret = "not-the-password-8c1f"
		bad.User = url.UserPassword("guest", secret)
		logs := &harness.LogBuffer{}
		app := newApp(t, bad.String(), logs)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		began := time.Now()
		err = app.Start(ctx)
		require.Error(t, err)
		require.Less(t, time.Since(began), 20*time.Second)
		require.Contains(t, strings.ToLower(err.Error()), "authentication")
		require.NotContains(t, err.Error(), secret)
		require.NotContains(t, logs.String(), secret)
		tree, terr := app.Tree(context.Background())
		require.Error(t, terr, "a failed Start leaves nothing running")
		require.Nil(t, tree)
	})
	t.Run("plain to a non-loopback host", func(t *testing.T) {
		// 192.0.2.0/24 is TEST-NET-1: refused before anything is dialled.
		app := amqpactor.New(amqpactor.Dial("amqp://guest:secret-77@192.0.2.1:5672/"))
		err := app.Start(bound(t))
		require.ErrorIs(t, err, amqpwire.ErrCleartextCredentials)
		require.NotContains(t, err.Error(), "secret-77")
		require.Contains(t, err.Error(), "InsecurePlain")
	})
}

// TestNoSecretInTreeOrLogs: a running App's tree and its logs (at debug)
// never carry the password, through a publish refused by the broker too.
func TestNoSecretInTreeOrLogs(t *testing.T) {
	u := brokerURL(t)
	logs := &harness.LogBuffer{}
	app := newApp(t, u, logs)
	start(t, app)
	ctx := bound(t)
	err := app.Publish(ctx, amqpactor.Raw("/queues/"+unique("live.nowhere")), &amqpactor.Message{Body: []byte("x")})
	require.Error(t, err)
	tree, err2 := app.Tree(ctx)
	require.NoError(t, err2)
	var all strings.Builder
	var walk func(n *amqpactor.Node)
	walk = func(n *amqpactor.Node) {
		all.WriteString(n.Address + " " + n.LastError + "\n")
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(tree)
	noSecret(t, u, err.Error(), all.String(), logs.String())
}

func noSecret(t *testing.T, u string, texts ...string) {
	t.Helper()
	p, err := url.Parse(u)
	require.NoError(t, err)
	pw, ok := p.User.Password()
	if !ok || pw == "" {
		return
	}
	for _, s := range texts {
		require.NotContains(t, s, ":"+pw+"@", "a password leaked")
	}
}

func mgmt(t *testing.T, u string, f func(ctx context.Context, m *amqpwire.Management)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := amqpwire.New(amqpwire.Config{URL: u, Dialect: amqpactor.RabbitMQ4})
	conn, err := c.Connect(ctx)
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	var tc transport.Conn = conn
	f(ctx, tc.(*amqpwire.Conn).Management())
}
