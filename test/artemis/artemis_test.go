package artemis

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

func brokerURL(t *testing.T) string {
	t.Helper()
	return livetest.ArtemisURL(t, "the Artemis behaviour tests")
}

// unique names a node no other test (nor an earlier run: the broker keeps
// what durable subscriptions leave) has used.
func unique(prefix string) string { return harness.Unique("artemis." + prefix) }

func bound(t *testing.T) context.Context { return harness.Bound(t, 60*time.Second) }

// newApp is an App on the Artemis broker with the default dialect, named
// when name is set.
func newApp(t *testing.T, name string) *amqpactor.App {
	t.Helper()
	log, _ := harness.NewLog(t)
	opts := []amqpactor.Option{amqpactor.WithLogger(log)}
	if name != "" {
		opts = append(opts, amqpactor.WithName(name))
	}
	return amqpactor.New(amqpactor.Dial(brokerURL(t)), opts...)
}

func start(t *testing.T, app *amqpactor.App) { t.Helper(); harness.StartApp(t, app) }

func publish(t *testing.T, app *amqpactor.App, a amqpactor.Address, id string) {
	t.Helper()
	require.NoError(t, app.Publish(bound(t), a, &amqpactor.Message{MessageID: id, Body: []byte("body of " + id)}), "publish %s to %s", id, a)
}

func eventually(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 10*time.Millisecond, append([]any{what}, args...)...)
}

// seen records the message-ids a handler got, in order, with how often.
type seen struct {
	mu  sync.Mutex
	ids []string
	by  map[string][]*amqpactor.Message
}

func (s *seen) add(m *amqpactor.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = map[string][]*amqpactor.Message{}
	}
	id := fmt.Sprint(m.MessageID)
	s.ids = append(s.ids, id)
	s.by[id] = append(s.by[id], m)
}

func (s *seen) n() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.ids) }

func (s *seen) distinct() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.by) }

func (s *seen) of(id string) []*amqpactor.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*amqpactor.Message(nil), s.by[id]...)
}

func (s *seen) order() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

func (s *seen) handler(ctx context.Context, m *amqpactor.Message) error { s.add(m); return nil }

// admin reads and removes, through the broker's management address
// (amqpwire.ArtemisManagement), what the runtime cannot see: queues, their
// flags and counts; it removes what the tests leave on the shared broker.
type admin struct{ m *amqpwire.ArtemisManagement }

func newAdmin(t *testing.T) *admin {
	t.Helper()
	conn, err := amqpwire.New(amqpwire.Config{URL: brokerURL(t), Dialect: address.Artemis}).Connect(bound(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	})
	return &admin{m: conn.(*amqpwire.Conn).ArtemisManagement()}
}

// queue reads an attribute of the queue name; false when there is no such
// queue.
func (a *admin) queue(t *testing.T, name, attr string) (any, bool) {
	t.Helper()
	v, err := a.m.Attribute(bound(t), "queue."+name, attr)
	if err != nil {
		return nil, false
	}
	return v, true
}

// count reads a numeric attribute of the queue name (messageCount,
// consumerCount), failing the test when there is no such queue.
func (a *admin) count(t *testing.T, name, attr string) int64 {
	t.Helper()
	v, ok := a.queue(t, name, attr)
	require.True(t, ok, "queue %s exists", name)
	n, err := strconv.ParseInt(fmt.Sprint(v), 10, 64)
	require.NoError(t, err, "%s of %s: %v", attr, name, v)
	return n
}

// queueNames lists the queues bound to the address name.
func (a *admin) queueNames(t *testing.T, name string) []string {
	t.Helper()
	v, err := a.m.Attribute(bound(t), "address."+name, "queueNames")
	require.NoError(t, err)
	var out []string
	if vs, ok := v.([]any); ok {
		for _, x := range vs {
			out = append(out, fmt.Sprint(x))
		}
	}
	sort.Strings(out)
	return out
}

// removeAddress deletes the address name and its queues when the test
// ends, so that durable nodes do not pile up on the shared broker.
func removeAddress(t *testing.T, name string) {
	t.Cleanup(func() {
		a := newAdmin(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// A test may have left nothing (AMQ229203: no such address).
		if _, err := a.m.Invoke(ctx, "broker", "deleteAddress", name, true); err != nil && !amqpwire.IsArtemisCode(err, "AMQ229203") {
			t.Logf("cleanup of address %s: %v", name, err)
		}
	})
}

// counters returns the counters of sub's receiver (outcomes sent:
// accepted, rejected, modified, released), nil while it has none.
func counters(app *amqpactor.App, sub *amqpactor.Subscription) map[string]uint64 {
	root := harness.TreeOr(app)
	for _, s := range harness.OfKind(root, "subscription") {
		if s.Name != "subscription:"+sub.Name() {
			continue
		}
		for _, r := range harness.OfKind(s, "receiver") {
			return r.Counters
		}
	}
	return nil
}
