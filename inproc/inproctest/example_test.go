package inproctest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc/inproctest"
)

// exampleTB stands in for the *testing.T that a test passes to inproctest.Start:
// an Example function has none. It runs the cleanups Start registers when
// the example calls finish, and reports failures on stdout, where the
// example's Output check catches them. In a test, pass the test's t.
type exampleTB struct {
	testing.TB // nil: only the methods below may be called
	cleanups   []func()
}

func (tb *exampleTB) Helper()                   {}
func (tb *exampleTB) Cleanup(f func())          { tb.cleanups = append(tb.cleanups, f) }
func (tb *exampleTB) Log(args ...any)           { fmt.Println(args...) }
func (tb *exampleTB) Logf(f string, a ...any)   { fmt.Printf(f+"\n", a...) }
func (tb *exampleTB) Errorf(f string, a ...any) { fmt.Printf("error: "+f+"\n", a...) }
func (tb *exampleTB) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf("fatal: "+f, a...))
}

// finish runs the cleanups, last registered first, as testing does.
func (tb *exampleTB) finish() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// An App built for a live broker runs in a test on a fresh in-process
// broker: Start replaces its connector, starts it, and stops it when the
// test ends. In a test it reads:
//
//	func TestOrders(t *testing.T) {
//		app := orders.NewApp(amqpactor.Dial(url))
//		broker := inproctest.Start(t, app)
//		...
//	}
func ExampleStart() {
	t := &exampleTB{} // in a test: the test's t
	defer t.finish()

	// The service, as production builds it (nothing is dialled: Start
	// swaps the connector before the App connects).
	app := amqpactor.New(amqpactor.Dial("amqp://svc:secret@broker.invalid:5672/", amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	got := make(chan string, 1)
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}

	broker := inproctest.Start(t, app)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("order-1")}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("handled:", <-got)
	fmt.Println("running on:", app.Connector(), "- queue exists:", broker.HasQueue("orders"))
	// Output:
	// handled: order-1
	// running on: inproc - queue exists: true
}

// The same with a real *testing.T: Start's cleanup stops the App.
func TestStartRunsAnAppBuiltForALiveBroker(t *testing.T) {
	app := amqpactor.New(amqpactor.Dial("amqp://svc:secret@broker.invalid:5672/"))
	got := make(chan string, 1)
	_, err := app.Subscribe(amqpactor.Queue("orders"), func(ctx context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil
	})
	require.NoError(t, err)
	broker := inproctest.Start(t, app)
	require.Same(t, broker, app.Connector())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, amqpactor.Queue("orders"), &amqpactor.Message{Body: []byte("order-1")}))
	select {
	case b := <-got:
		require.Equal(t, "order-1", b)
	case <-ctx.Done():
		t.Fatal("the handler never ran")
	}
}
