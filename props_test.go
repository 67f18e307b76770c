package amqpactor_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// decisions records what a parent's supervisor strategy was asked about.
type decisions struct {
	mu      sync.Mutex
	reasons []any
	got     chan struct{}
}

func newDecisions() *decisions { return &decisions{got: make(chan struct{}, 16)} }

func (d *decisions) decide(reason any) actor.Directive {
	d.mu.Lock()
	d.reasons = append(d.reasons, reason)
	d.mu.Unlock()
	d.got <- struct{}{}
	return actor.StopDirective
}

// failure waits, within d, for the parent's supervisor to see a failure,
// and returns the first reason it saw, which must be an error.
func (d *decisions) failure(t *testing.T, within time.Duration) error {
	t.Helper()
	select {
	case <-d.got:
	case <-time.After(within):
		t.Fatal("the parent's supervisor saw no failure")
	}
	reasons := d.all()
	rerr, ok := reasons[0].(error)
	require.True(t, ok, "reason %T %v", reasons[0], reasons[0])
	return rerr
}

// stoppedWithParent poisons parent and requires app to have stopped with it.
func stoppedWithParent(t *testing.T, sys *actor.ActorSystem, parent *actor.PID, app *amqpactor.App) {
	t.Helper()
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
	require.ErrorIs(t, app.Publish(context.Background(), amqpactor.Queue("x"), &amqpactor.Message{}), amqpactor.ErrStopped)
}

func (d *decisions) all() []any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]any(nil), d.reasons...)
}

// spawnOwner spawns a parent actor with a recording one-for-one strategy
// that spawns app.Props() as its child; it returns the parent and the child.
func spawnOwner(t *testing.T, sys *actor.ActorSystem, app *amqpactor.App, d *decisions) (parent, child *actor.PID) {
	t.Helper()
	children := make(chan *actor.PID, 1)
	props := actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			children <- c.Spawn(app.Props())
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(1, time.Second, d.decide)))
	parent = sys.Root.Spawn(props)
	// A test that fails before it stops the App must not leave the App's
	// goroutines to the leak checks of the tests after it.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = app.Stop(ctx)
	})
	return parent, <-children
}

// Spawned under a user's actor, App.Props starts the App there: the tree
// hangs under the app actor, publishes and consumes work (also through
// App.Publisher), and poisoning the parent stops the App.
func TestPropsOwnsTheApp(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	got := make(chan string, 10)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	_, err := app.Subscribe(amqpactor.Queue("props"), func(_ context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil
	})
	require.NoError(t, err)
	d := newDecisions()
	parent, child := spawnOwner(t, sys, app, d)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tree *amqpactor.Node
	require.Eventually(t, func() bool {
		tree, err = app.Tree(ctx)
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, "connection", tree.Kind)
	require.True(t, strings.HasPrefix(tree.ActorPID().Id, child.Id+"/"), "connection %s is not a child of the app actor %s", tree.ActorPID().Id, child.Id)

	require.NoError(t, app.Publish(ctx, amqpactor.Queue("props"), &amqpactor.Message{Body: []byte("direct")}))
	res, err := sys.Root.RequestFuture(app.Publisher(), &amqpactor.PublishRequest{
		Address: amqpactor.Queue("props"), Message: &amqpactor.Message{Body: []byte("actor")},
	}, 10*time.Second).Result()
	require.NoError(t, err)
	require.NoError(t, res.(*amqpactor.PublishResult).Err)
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case b := <-got:
			seen[b] = true
		case <-ctx.Done():
			t.Fatalf("handled only %v", seen)
		}
	}

	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
	err = app.Publish(ctx, amqpactor.Queue("props"), &amqpactor.Message{Body: []byte("late")})
	require.ErrorIs(t, err, amqpactor.ErrStopped)
	require.Empty(t, d.all(), "no failure expected")
}

// A Start that fails (a refused attach) makes the app actor fail: the
// parent's supervisor sees Start's error, and the App is stopped.
func TestPropsStartFailureReachesTheSupervisor(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	broker := inproc.New()
	broker.RefuseAttach(amqpactor.Queue("refused"), "amqp:unauthorized-access", "not for you")
	app := amqpactor.New(broker, amqpactor.WithActorSystem(sys))
	_, err := app.Subscribe(amqpactor.Queue("refused"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	d := newDecisions()
	parent, _ := spawnOwner(t, sys, app, d)
	rerr := d.failure(t, 20*time.Second)
	require.Len(t, d.all(), 1)
	require.Contains(t, rerr.Error(), "refused")
	require.Contains(t, rerr.Error(), "App.Props")
	stoppedWithParent(t, sys, parent, app)
}

// Props on an App that has already stopped fails at once, saying so.
func TestPropsOnAStoppedApp(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	require.NoError(t, app.Stop(context.Background()))
	d := newDecisions()
	parent, _ := spawnOwner(t, sys, app, d)
	rerr := d.failure(t, 10*time.Second)
	require.True(t, errors.Is(rerr, amqpactor.ErrStopped), "%v", rerr)
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}

// refusedCreds is a dial error that retrying will not cure.
type refusedCreds struct{}

func (refusedCreds) Error() string  { return "credentials refused" }
func (refusedCreds) Terminal() bool { return true }

// refusingConnector connects once, then refuses every later dial.
type refusingConnector struct {
	*inproc.Broker
	mu     sync.Mutex
	dialed bool
}

func (c *refusingConnector) Connect(ctx context.Context) (transport.Conn, error) {
	c.mu.Lock()
	again := c.dialed
	c.dialed = true
	c.mu.Unlock()
	if again {
		return nil, refusedCreds{}
	}
	return c.Broker.Connect(ctx)
}

// A connection that goes failed (it gave up reconnecting) makes the app
// actor fail: the parent's supervisor sees the connection's last error.
func TestPropsFailedConnectionEscalates(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	broker := inproc.New()
	conn := &refusingConnector{Broker: broker}
	app := amqpactor.New(conn, amqpactor.WithActorSystem(sys), amqpactor.WithBackoff(time.Millisecond, 5*time.Millisecond))
	d := newDecisions()
	parent, _ := spawnOwner(t, sys, app, d)
	// Once connected: a drop while the first dial is still under way drops
	// nothing, and that dial then succeeds, so nothing would fail.
	require.Eventually(t, func() bool {
		tree, err := app.Tree(context.Background())
		return err == nil && tree.State == "attached"
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 1, broker.DropConnections(errors.New("cut")))
	rerr := d.failure(t, 20*time.Second)
	require.Contains(t, rerr.Error(), "connection failed")
	require.True(t, errors.As(rerr, new(refusedCreds)), "%v", rerr)
	stoppedWithParent(t, sys, parent, app)
}

// The connection actor stopping under a running App makes the app actor
// fail too.
func TestPropsLostTreeEscalates(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	// The drain goes to a root that is gone: Stop ends at its bound.
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithCloseTimeout(time.Second))
	d := newDecisions()
	parent, _ := spawnOwner(t, sys, app, d)
	var tree *amqpactor.Node
	// Once connected: a root stopped while Start still dials fails the
	// Start instead, which is another failure than the one this test is for.
	require.Eventually(t, func() bool {
		var err error
		tree, err = app.Tree(context.Background())
		return err == nil && tree.State == "attached"
	}, 10*time.Second, 10*time.Millisecond)
	sys.Root.Stop(tree.ActorPID())
	rerr := d.failure(t, 20*time.Second)
	require.Contains(t, rerr.Error(), "connection actor")
	stoppedWithParent(t, sys, parent, app)
}

// A subscription its supervisor gives up on (issue 26) is a failure that
// reaches the top: under App.Props the parent's strategy receives it.
func TestPropsFailedSubscriptionEscalates(t *testing.T) {
	noLeaks(t)
	sys := sharedSystem(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys), amqpactor.WithName("props-sub-failed"))
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(context.Context, *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	d := newDecisions()
	parent, _ := spawnOwner(t, sys, app, d)
	var sub *actor.PID
	require.Eventually(t, func() bool {
		tree, err := app.Tree(context.Background())
		if err != nil {
			return false
		}
		n := find(tree, "subscription", "orders")
		if n == nil || n.State != "attached" {
			return false
		}
		sub = n.ActorPID()
		return true
	}, 10*time.Second, 10*time.Millisecond)
	for range 12 {
		sys.Root.Send(sub, &testhook.Crash{Reason: "test"})
	}
	rerr := d.failure(t, 20*time.Second)
	require.Contains(t, rerr.Error(), "subscription:props-sub-failed.orders")
	require.NoError(t, sys.Root.PoisonFuture(parent).Wait())
}
