package scenario

import (
	"context"
	"errors"
	"fmt"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// InprocParams are the settings of one in-process run.
type InprocParams struct {
	// Publishers is how many goroutines publish in parallel, each waiting
	// for its outcome; zero means 64.
	Publishers int
	// Partitions is the subscription's partition count; zero means
	// amqpactor.DefaultPartitions (8).
	Partitions int
	// Credit is the subscription's credit; zero means DefaultCredit.
	Credit int
	// Body is the body size; zero means DefaultBody.
	Body int
	// N is the number of messages measured.
	N int
	// OnStart and OnStop as in Params.
	OnStart, OnStop func()
}

// InprocThroughput runs amqpactor end to end on the in-process broker:
// publish -> broker -> receiver -> partition -> handler -> accept, with
// Publishers goroutines publishing in parallel (pipelined on the sender's
// link). One message goes through before the clock
// starts. One op is one message handled; the clock stops when all N have
// been handled. Everything runs in this process, so it is CPU-bound. After
// the clock the App is stopped and the queue must be empty, nothing left
// unsettled.
func InprocThroughput(ctx context.Context, p InprocParams) (res Result, err error) {
	if p.N <= 0 {
		return Result{}, fmt.Errorf("scenario: InprocParams.N is %d, want > 0", p.N)
	}
	if p.Publishers <= 0 {
		p.Publishers = 64
	}
	if p.Partitions <= 0 {
		p.Partitions = amqpactor.DefaultPartitions
	}
	if p.Credit <= 0 {
		p.Credit = DefaultCredit
	}
	if p.Body <= 0 {
		p.Body = DefaultBody
	}
	const name = "bench"
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	broker := inproc.New()
	app := amqpactor.New(broker)
	opts := []amqpactor.SubscribeOption{amqpactor.WithCredit(uint32(p.Credit)), amqpactor.WithPartitions(p.Partitions)}
	res, stop, err := appThroughput(ctx, &cl, app, name, opts, p.Publishers, p.Body, p.N, p.OnStart, p.OnStop, false)
	if err != nil {
		return Result{}, err
	}
	if err := stop(); err != nil {
		return Result{}, err
	}
	if d, u := broker.QueueDepth(name), broker.Unsettled(name); d != 0 || u != 0 {
		return Result{}, fmt.Errorf("in-process queue holds %d messages and %d unsettled: not every message was accepted", d, u)
	}
	return res, nil
}
