package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// RequestActor runs N sequential request/reply round trips with amqpactor:
// app.Request(ctx, Queue(name), msg) to a Responder subscription (credit
// Credit, WithClassicQueue for a classic request queue) on the same App,
// which echoes the body. The responder publishes the reply at-least-once
// (waiting for its outcome), then accepts the request. With the RabbitMQ4
// dialect the App's reply receiver is on its own private reply queue
// (classic, exclusive, auto-delete, declared by the App), pre-settled.
// One op is one round trip, timed from before the request is sent to the
// reply in hand; Result.Latencies holds every one.
func RequestActor(ctx context.Context, p Params, m *amqpwire.Management) (res Result, err error) {
	if p, err = p.normalize(); err != nil {
		return Result{}, err
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	name := queueName(&cl, m, "bench.rpc.amqpactor")
	app, opts := liveApp(p)
	if _, err := app.Subscribe(amqpactor.Queue(name), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	}), opts...); err != nil {
		return Result{}, err
	}
	stop, err := startApp(ctx, &cl, app)
	if err != nil {
		return Result{}, err
	}
	body := make([]byte, p.Body)
	roundTrip := func() error {
		rep, err := app.Request(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body})
		if err != nil {
			return err
		}
		if len(rep.Body) != p.Body {
			return fmt.Errorf("reply of %d bytes, want %d", len(rep.Body), p.Body)
		}
		return nil
	}
	// The warm-up attaches the request sender, the reply queue and
	// receiver, and the responder's reply sender.
	if res, err = timeRoundTrips(p, roundTrip, stop); err != nil {
		return Result{}, err
	}
	return res, checkQueue(m, name, p.Queue, 0)
}

// timeRoundTrips runs one round trip to warm up, then p.N under the clock,
// then stop (the responder's).
func timeRoundTrips(p Params, roundTrip, stop func() error) (Result, error) {
	if err := roundTrip(); err != nil {
		return Result{}, fmt.Errorf("warm-up: %w", err)
	}
	lat := make([]time.Duration, p.N)
	mt := startMeter(p.OnStart, p.OnStop)
	var err error
	for i := range p.N {
		t0 := time.Now()
		err = roundTrip()
		lat[i] = time.Since(t0)
		if err != nil {
			err = fmt.Errorf("round trip %d of %d: %w", i+1, p.N, err)
			break
		}
	}
	res := mt.stop(p.N)
	if err != nil {
		return Result{}, err
	}
	slices.Sort(lat)
	res.Latencies = lat
	if err := stop(); err != nil {
		return Result{}, err
	}
	return res, nil
}

// RequestRaw is RequestActor with go-amqp alone, on one connection laid out
// like the App's: a sender session (request sender, and the responder's
// reply sender, attached on first use per reply-to and reused), a responder
// session (receiver on the request queue, credit Credit, unsettled/first)
// and a reply session (pre-settled receiver on the reply queue, credit 256
// like the App's reply receiver). The requester sends each request with
// SendWithReceipt (message-id and reply-to set), waits for the reply with
// the matching correlation-id, then checks that the request was accepted,
// as App.Request does. The responder sends the reply with Send (which
// returns with its outcome), then accepts the request. The request queue is
// declared as the App declares it; the reply queue classic, transient and
// auto-delete like the App's, but not exclusive: it is declared on the
// admin connection, and RabbitMQ lets only the declaring connection use an
// exclusive queue.
func RequestRaw(ctx context.Context, p Params, m *amqpwire.Management) (res Result, err error) {
	if p, err = p.normalize(); err != nil {
		return Result{}, err
	}
	var cl cleanups
	defer func() { err = errors.Join(err, cl.run()) }()
	rpc := queueName(&cl, m, "bench.rpc.raw")
	reply := queueName(&cl, m, "bench.reply.raw")
	if err := declare(ctx, m, p.Queue.spec(rpc)); err != nil {
		return Result{}, err
	}
	if err := declare(ctx, m, amqpwire.QueueSpec{Name: reply, Type: amqpwire.Classic, Transient: true, AutoDelete: true}); err != nil {
		return Result{}, err
	}
	rpcAddr, replyAddr := "/queues/"+rpc, "/queues/"+reply

	conn, err := dialRaw(ctx, &cl, p.URL, "bench-raw")
	if err != nil {
		return Result{}, err
	}
	sendSess, reqSnd, err := rawSenderSession(ctx, conn, rpcAddr)
	if err != nil {
		return Result{}, err
	}
	replies, err := rawReceiverSession(ctx, conn, replyAddr, replyCredit, true)
	if err != nil {
		return Result{}, err
	}
	requests, err := rawReceiverSession(ctx, conn, rpcAddr, p.Credit, false)
	if err != nil {
		return Result{}, err
	}

	rctx, stopResponder := context.WithCancel(ctx)
	responderDone := make(chan error, 1)
	go func() {
		err := respond(rctx, ctx, requests, sendSess)
		if rctx.Err() != nil {
			err = nil // stopped
		}
		responderDone <- err
	}()
	responderStopped := false
	stop := func() error {
		if responderStopped {
			return nil
		}
		responderStopped = true
		stopResponder()
		if err := <-responderDone; err != nil {
			return fmt.Errorf("responder: %w", err)
		}
		return nil
	}
	cl.add(stop)

	body := make([]byte, p.Body)
	var seq uint64
	roundTrip := func() error {
		seq++
		id := "raw-" + strconv.FormatUint(seq, 10)
		req := amqp.NewMessage(body)
		req.Properties = &amqp.MessageProperties{MessageID: id, ReplyTo: &replyAddr}
		receipt, err := reqSnd.SendWithReceipt(ctx, req, nil)
		if err != nil {
			return err
		}
		for {
			rep, err := replies.Receive(ctx, nil)
			if err != nil {
				return err
			}
			if rep.Properties != nil && rep.Properties.CorrelationID == id {
				if len(rep.GetData()) != p.Body {
					return fmt.Errorf("reply of %d bytes, want %d", len(rep.GetData()), p.Body)
				}
				break
			}
		}
		st, err := receipt.Wait(ctx)
		if err != nil {
			return err
		}
		return accepted(st)
	}
	// The warm-up attaches the reply sender.
	if res, err = timeRoundTrips(p, roundTrip, stop); err != nil {
		return Result{}, err
	}
	closeLinks(reqSnd, replies, requests)
	return res, checkQueue(m, rpc, p.Queue, 0)
}

// respond answers every request from requests until stop ends: one reply
// sender per reply-to address, attached on first use and reused, as the
// App's publisher does; the reply is sent at-least-once (Send returns with
// its outcome) and then the request is accepted. A request in hand when
// stop ends is still answered and accepted (under ctx), as an App's
// graceful stop finishes the handlers in flight: the requester has the
// reply of the last round trip before the responder has accepted it.
func respond(stop, ctx context.Context, requests *amqp.Receiver, sess *amqp.Session) error {
	senders := map[string]*amqp.Sender{}
	for {
		req, err := requests.Receive(stop, nil)
		if err != nil {
			return err
		}
		if req.Properties == nil || req.Properties.ReplyTo == nil {
			if err := requests.RejectMessage(ctx, req, nil); err != nil {
				return err
			}
			continue
		}
		to := *req.Properties.ReplyTo
		snd, ok := senders[to]
		if !ok {
			if snd, err = sess.NewSender(ctx, to, nil); err != nil {
				return err
			}
			senders[to] = snd
		}
		rep := amqp.NewMessage(req.GetData())
		rep.Properties = &amqp.MessageProperties{CorrelationID: req.Properties.MessageID}
		if err := snd.Send(ctx, rep, nil); err != nil {
			return err
		}
		if err := requests.AcceptMessage(ctx, req); err != nil {
			return err
		}
	}
}
