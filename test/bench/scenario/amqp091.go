package scenario

import (
	"context"
	"errors"
	"fmt"
	"sync"

	rmq "github.com/rabbitmq/amqp091-go"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// ThroughputActor091 is ThroughputActor on Dial091: the same App, handler
// and publishers, over AMQP 0-9-1 (prefetch = credit, publisher confirms).
func ThroughputActor091(ctx context.Context, p Params, m *amqpwire.Management) (Result, error) {
	return actorRun(ctx, p, m, "bench.tput.amqp091", amqpactor.Dial091(p.URL), false)
}

// ThroughputRaw091 is ThroughputActor091 with amqp091-go alone, on one
// connection: the queue declared as the App declares it; a publisher
// channel in confirm mode, one goroutine publishing while fewer than
// Window await their confirm and a second awaiting them in order; a
// consumer channel with basic.qos Credit and one goroutine that acks each
// delivery.
func ThroughputRaw091(ctx context.Context, p Params, m *amqpwire.Management) (res Result, err error) {
	if p, err = p.normalize(); err != nil {
		return Result{}, err
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	name := queueName(&cl, m, "bench.tput.raw091")
	conn, err := rmq.Dial(p.URL)
	if err != nil {
		return Result{}, err
	}
	cl.add(conn.Close)
	pub, err := conn.Channel()
	if err != nil {
		return Result{}, err
	}
	if _, err := pub.QueueDeclare(name, true, false, false, false, rmq.Table{"x-queue-type": string(p.Queue)}); err != nil {
		return Result{}, err
	}
	if err := pub.Confirm(false); err != nil {
		return Result{}, err
	}
	sub, err := conn.Channel()
	if err != nil {
		return Result{}, err
	}
	if err := sub.Qos(p.Credit, 0, false); err != nil {
		return Result{}, err
	}
	deliveries, err := sub.Consume(name, "", false, false, false, false, nil)
	if err != nil {
		return Result{}, err
	}
	body := make([]byte, p.Body)
	publish := func() (*rmq.DeferredConfirmation, error) {
		return pub.PublishWithDeferredConfirmWithContext(ctx, "", name, true, false, rmq.Publishing{Body: body, DeliveryMode: rmq.Transient})
	}
	// Warm up: one message through.
	if dc, err := publish(); err != nil {
		return Result{}, fmt.Errorf("warm-up publish: %w", err)
	} else if ok, err := dc.WaitContext(ctx); err != nil || !ok {
		return Result{}, fmt.Errorf("warm-up confirm: %v %w", ok, err)
	}
	d := <-deliveries
	if err := d.Ack(false); err != nil {
		return Result{}, err
	}

	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	total := p.N
	mt := startMeter(p.OnStart, p.OnStop)
	received := receiveN(cancel, total, func() error {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("receive: the consumer ended")
			}
			if err := d.Ack(false); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			return nil
		case <-rctx.Done():
			return context.Cause(rctx) // cancelled already: its cause stays the run's error
		}
	})
	slots := make(chan struct{}, p.Window)
	confirms := make(chan *rmq.DeferredConfirmation, p.Window)
	var wg sync.WaitGroup
	wg.Go(func() {
		for dc := range confirms {
			if ok, err := dc.WaitContext(rctx); err != nil || !ok {
				cancel(fmt.Errorf("confirm: acked %v: %w", ok, err))
			}
			<-slots
		}
	})
	for range total {
		slots <- struct{}{}
		dc, err := publish()
		if err != nil {
			cancel(fmt.Errorf("publish: %w", err))
			break
		}
		confirms <- dc
	}
	close(confirms)
	wg.Wait()
	<-received
	res = mt.stop(total)
	if err := context.Cause(rctx); err != nil {
		return Result{}, err
	}
	return res, checkQueue(m, name, p.Queue, 0)
}
