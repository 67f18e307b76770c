package amqpactor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// An actor consumes a queue: each delivery arrives as a *Delivery request
// and its answer, Done(err), decides the outcome as a Handler's return does.
func ExampleActorHandler() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()

	got := make(chan string, 3)
	worker := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if d, ok := c.Message().(*amqpactor.Delivery); ok {
			body := string(d.Message.Body)
			got <- fmt.Sprintf("%s from %s, delivery-count %d", body, d.Address, d.Message.DeliveryCount)
			if body == "fail" && d.Message.DeliveryCount == 0 {
				c.Respond(amqpactor.Done(errors.New("not yet"))) // modified: redelivered
				return
			}
			c.Respond(amqpactor.Done(nil)) // accepted
		}
	}))

	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	if _, err := app.Subscribe(amqpactor.Queue("work"), amqpactor.ActorHandler(worker)); err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	// One group-id: the actor gets them one at a time, in order.
	for _, body := range []string{"hello", "fail"} {
		if err := app.Publish(ctx, amqpactor.Queue("work"), &amqpactor.Message{Body: []byte(body), GroupID: "g"}); err != nil {
			fmt.Println(err)
			return
		}
	}
	for range 3 {
		fmt.Println(<-got)
	}
	// Output:
	// hello from queue:work, delivery-count 0
	// fail from queue:work, delivery-count 0
	// fail from queue:work, delivery-count 1
}

// An actor publishes through the App's Publisher actor: it asks with
// ctx.Request, goes on with its own messages, and gets a *PublishResult once
// the broker has settled the message.
func ExampleApp_Publisher() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()

	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer stop(app)

	publisher := app.Publisher()
	results := make(chan error, 1)
	sender := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		switch m := c.Message().(type) {
		case string:
			c.Request(publisher, &amqpactor.PublishRequest{
				Address: amqpactor.Queue("events"), Message: &amqpactor.Message{Body: []byte(m)},
			})
		case *amqpactor.PublishResult:
			results <- m.Err
		}
	}))
	sys.Root.Send(sender, "order placed")
	fmt.Println("published:", <-results == nil)
	// Output: published: true
}

// A user's actor owns the App: App.Props starts it under that actor, whose
// supervisor sees its failures; stopping the actor stops the App.
func ExampleApp_Props() {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()

	app := amqpactor.New(inproc.New(), amqpactor.WithActorSystem(sys))
	got := make(chan string, 1)
	if _, err := app.Subscribe(amqpactor.Queue("owned"), func(_ context.Context, m *amqpactor.Message) error {
		got <- string(m.Body)
		return nil
	}); err != nil {
		fmt.Println(err)
		return
	}
	service := sys.Root.Spawn(actor.PropsFromFunc(func(c actor.Context) {
		if _, ok := c.Message().(*actor.Started); ok {
			c.Spawn(app.Props()) // starts the App; its tree hangs under this actor
		}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(1, time.Second, func(reason any) actor.Directive {
		fmt.Println("the App failed:", reason)
		return actor.StopDirective
	}))))

	// A publish waits for a Start in progress; before the app actor has
	// begun it, the App is not started yet.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		err := app.Publish(ctx, amqpactor.Queue("owned"), &amqpactor.Message{Body: []byte("hello")})
		if err == nil {
			break
		}
		if !errors.Is(err, amqpactor.ErrNotStarted) {
			fmt.Println(err)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println(<-got)

	_ = sys.Root.PoisonFuture(service).Wait() // stops the App
	err := app.Publish(ctx, amqpactor.Queue("owned"), &amqpactor.Message{Body: []byte("late")})
	fmt.Println(errors.Is(err, amqpactor.ErrStopped))
	// Output:
	// hello
	// true
}
