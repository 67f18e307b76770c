// Actors: amqpactor inside a protoactor-go service. A service actor owns
// the App through App.Props (its supervisor sees the App's failures, and
// stopping it stops the App); a consumer actor handles a queue through
// ActorHandler on 4 ordered partitions; producer actors publish through
// App.Publisher with ctx.Request and go on when the PublishResult arrives;
// every state change of the tree is logged (WithStateChanges).
//
//	go run ./examples/actors                      # the in-process broker
//	go run ./examples/actors -url amqp://guest:guest@127.0.0.1:5673/
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/examples/internal/cli"
)

const (
	groups     = 8  // customers: each one's messages carry it as group-id
	perGroup   = 25 // messages per group, published in order
	partitions = 4
)

func main() { cli.Main("actors", run) }

// Messages between the example's actors.
type (
	connected   struct{}                 // the connection attached: publishing can begin
	published   struct{ group string }   // a producer published all its messages
	handledAll  struct{ outOfOrder int } // the consumer saw every message
	failedActor struct{ reason any }     // a child of the service failed
)

func run(broker *cli.Broker) error {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	defer sys.Shutdown()

	var service atomic.Pointer[actor.PID]
	var sawConnected atomic.Bool
	app, err := broker.App("actors-example",
		amqpactor.WithActorSystem(sys), // the App's actors and ours share a system
		amqpactor.WithCloseTimeout(5*time.Second),
		amqpactor.WithStateChanges(func(ch amqpactor.StateChange) {
			line := fmt.Sprintf("actors: state %-40s %s -> %s", ch.Path, orNone(ch.From), ch.To)
			if ch.Err != nil {
				line += " (" + ch.Err.Error() + ")"
			}
			fmt.Println(line)
			if ch.Kind == "connection" && ch.To == "attached" && !sawConnected.Swap(true) {
				if pid := service.Load(); pid != nil {
					sys.Root.Send(pid, &connected{})
				}
			}
		}),
	)
	if err != nil {
		return err
	}
	addr := amqpactor.Queue("examples.actors")

	// The consumer: one actor, answering each Delivery with Done. Deliveries
	// of one group-id come from one partition, one at a time, in order.
	total := groups * perGroup
	results := make(chan any, 4)
	consumer := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &consumerActor{next: map[string]int{}, total: total, report: results}
	}))
	defer func() { _ = sys.Root.StopFuture(consumer).Wait() }()
	if _, err := app.Subscribe(addr, amqpactor.ActorHandler(consumer), amqpactor.WithPartitions(partitions), amqpactor.WithCredit(32)); err != nil {
		return err
	}

	// The service: it owns the App and spawns the producers once connected.
	svc := sys.Root.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &serviceActor{app: app, addr: addr}
	}, actor.WithSupervisor(actor.NewOneForOneStrategy(1, time.Second, func(reason any) actor.Directive {
		results <- &failedActor{reason: reason}
		return actor.StopDirective
	}))))
	service.Store(svc)
	if sawConnected.Load() {
		sys.Root.Send(svc, &connected{}) // attached before the service was known
	}

	var outcome error
	select {
	case r := <-results:
		switch r := r.(type) {
		case *handledAll:
			if r.outOfOrder > 0 {
				outcome = fmt.Errorf("%d messages out of their group's order", r.outOfOrder)
			} else {
				fmt.Printf("actors: %d messages of %d groups handled on %d partitions, per-group order kept\n", total, groups, partitions)
			}
		case *failedActor:
			outcome = fmt.Errorf("the App failed: %v", r.reason)
		}
	case <-time.After(20 * time.Second):
		outcome = errors.New("not every message was handled within 20 s")
	}

	// Stopping the service stops the App: its Stopping runs App.Stop.
	if err := sys.Root.PoisonFuture(svc).Wait(); err != nil {
		return err
	}
	err = app.Publish(context.Background(), addr, &amqpactor.Message{Body: []byte("late")})
	fmt.Printf("actors: service stopped; a publish now: %v\n", err)
	if outcome == nil && !errors.Is(err, amqpactor.ErrStopped) {
		outcome = fmt.Errorf("publish after the service stopped: %v, want ErrStopped", err)
	}
	return outcome
}

func orNone(s string) string {
	if s == "" {
		return "(new)"
	}
	return s
}

// serviceActor owns the App (App.Props is its child) and the producers.
type serviceActor struct {
	app   *amqpactor.App
	addr  amqpactor.Address
	spawn bool
	done  int
}

func (s *serviceActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		ctx.Spawn(s.app.Props()) // starts the App; its tree hangs under this actor
	case *connected:
		if s.spawn {
			return
		}
		s.spawn = true
		for g := range groups {
			ctx.Spawn(actor.PropsFromProducer(func() actor.Actor {
				return &producerActor{publisher: s.app.Publisher(), addr: s.addr, group: fmt.Sprintf("customer-%d", g)}
			}))
		}
	case *published:
		s.done++
		if s.done == groups {
			fmt.Printf("actors: %d producers published %d messages each through App.Publisher\n", groups, perGroup)
		}
	}
}

// producerActor publishes its group's messages one after another: each
// PublishRequest goes out when the previous PublishResult came back, so
// the group's order on the queue is its publish order. It never blocks.
type producerActor struct {
	publisher *actor.PID
	addr      amqpactor.Address
	group     string
	seq       int
}

func (p *producerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.next(ctx)
	case *amqpactor.PublishResult:
		if m.Err != nil {
			panic(fmt.Errorf("%s: publish %d: %w", p.group, p.seq, m.Err)) // the service's supervisor sees it
		}
		if p.seq == perGroup {
			ctx.Send(ctx.Parent(), &published{group: p.group})
			ctx.Stop(ctx.Self())
			return
		}
		p.next(ctx)
	}
}

func (p *producerActor) next(ctx actor.Context) {
	p.seq++
	body := fmt.Sprintf("%s %d", cli.RunID(), p.seq)
	ctx.Request(p.publisher, &amqpactor.PublishRequest{
		Address: p.addr, Message: &amqpactor.Message{Body: []byte(body), GroupID: p.group},
	})
}

// consumerActor checks that each group's messages arrive in order.
type consumerActor struct {
	next       map[string]int
	seen       int
	outOfOrder int
	total      int
	report     chan<- any
}

func (c *consumerActor) Receive(ctx actor.Context) {
	d, ok := ctx.Message().(*amqpactor.Delivery)
	if !ok {
		return
	}
	run, seqText, _ := strings.Cut(string(d.Message.Body), " ")
	if run != cli.RunID() {
		ctx.Respond(amqpactor.Done(nil)) // left on a live queue by an earlier run
		return
	}
	seq, err := strconv.Atoi(seqText)
	if err != nil {
		ctx.Respond(amqpactor.Done(amqpactor.Reject(err)))
		return
	}
	g := d.Message.GroupID
	if seq <= c.next[g] {
		ctx.Respond(amqpactor.Done(nil)) // a redelivered copy
		return
	}
	if seq != c.next[g]+1 {
		c.outOfOrder++
	}
	c.next[g] = seq
	c.seen++
	ctx.Respond(amqpactor.Done(nil))
	if c.seen == c.total {
		c.report <- &handledAll{outOfOrder: c.outOfOrder}
	}
}
