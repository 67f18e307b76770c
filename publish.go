package amqpactor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/ctxdone"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Publish sends m to addr and waits for the broker's outcome: nil when
// accepted, *OutcomeError when not. With Settled() it returns once the
// transfer is written. Past ctx the publish may still reach the broker.
//
// The publish is traced (a producer span; the trace context goes in a copy
// of m.Headers, never in the caller's map) and counted; see WithTracerProvider.
func (a *App) Publish(ctx context.Context, addr Address, m *Message, opts ...PublishOption) error {
	if ctx == nil {
		return errNil("Publish", "context")
	}
	if m == nil {
		return errNil("Publish", "message")
	}
	c := pubOptions(opts)
	use := useUnsettled
	if c.settled {
		use = useSettled
	}
	// An address published to before passed the check then: one lookup
	// instead of two, on the path of every publish.
	if tg := a.dests.checked(addr, use); tg != nil {
		return a.tracedPublish(ctx, tg, addr, m, c.settled)
	}
	if err := a.checkAddress(addr, address.Send); err != nil {
		return err
	}
	if addr.Kind() == address.KindPartitioned {
		addr = a.partitionOf(addr, m.GroupID)
		return a.tracedPublish(ctx, a.dests.target(addr, use), addr, m, c.settled)
	}
	return a.tracedPublish(ctx, a.dests.targetChecked(addr, use), addr, m, c.settled)
}

// publishReply publishes a Responder's reply: traced and counted under the
// destination "(reply)", and not kept for AsyncAPI.
func (a *App) publishReply(ctx context.Context, addr Address, m *Message) error {
	if err := a.checkAddress(addr, address.Send); err != nil {
		return err
	}
	return a.tracedPublish(ctx, a.tel.replyState, addr, m, false)
}

// tracedPublish is publish in a producer span, counted under tg: the thin
// tracing wrapper Publish and publishReply share.
func (a *App) tracedPublish(ctx context.Context, tg *target, addr Address, m *Message, settled bool) error {
	t := a.tel
	// The clock only for a histogram that records: reading it twice for
	// every publish is work nobody asked for when none does.
	timed := t.publishDur.Enabled(ctx)
	var start time.Time
	if timed {
		start = time.Now()
	}
	ctx, span, m := t.startSend(ctx, tg.publishName, tg, m)
	if tg == t.replyState && span.IsRecording() {
		span.SetAttributes(attribute.String("messaging.destination.name", addr.Name()))
	}
	err := a.publish(ctx, addr, m, settled, tg == t.replyState)
	r := publishResult(err, settled)
	t.published.Add(ctx, 1, tg.published[r]...)
	if timed {
		t.publishDur.Record(ctx, time.Since(start).Seconds(), tg.pubDur[r]...)
	}
	endSpan(span, err)
	return err
}

// publish is Publish without its tracing and checks (above). reply:
// a Responder's reply, sent through the replies publisher.
func (a *App) publish(ctx context.Context, addr Address, m *Message, settled, reply bool) error {
	call := callPool.Get().(*publishCall)
	raw, err := call.out.Map(m)
	if err != nil {
		call.release()
		return fmt.Errorf("amqpactor: publish to %s: %w", addr, err)
	}
	return a.send(ctx, call, addr, raw, settled, reply)
}

// send hands raw to addr's sender actor in call and waits for the answer. The
// sender answers each Publish exactly once and last: once answered, call
// (and a message mapped into call.out) is nobody else's, so it goes back to
// the pool. A caller that gives up on ctx leaves call to the sender, and to
// the garbage collector.
func (a *App) send(ctx context.Context, call *publishCall, addr Address, raw *amqp.Message, settled, reply bool) error {
	if addr.Kind() == address.KindPartitioned {
		addr = a.partitionOf(addr, groupOf(raw))
	}
	if mc := a.checker.Load(); mc != nil && *mc != nil {
		if err := (*mc).CheckMessage(raw); err != nil {
			call.release()
			return fmt.Errorf("amqpactor: publish to %s: %w", addr, err)
		}
	}
	env, ch, err := a.running(ctx)
	if err != nil {
		call.release()
		return err
	}
	call.p = protocol.Publish{Ctx: ctx, Address: addr, Message: raw, Settled: settled, Reply: reply, Done: call.w.Done}
	ended, alone := a.ctxs.Enlist(ctx, call.shard, &call.w)
	if alone {
		// A context shared by many publishes (or none): the table answers
		// for its end and for the App's stop, so the wait is one receive.
		call.p.Once = call.w.Answered()
		ch.Senders.Hand(env.Root, ch.Publisher, &call.p)
		err := <-call.w.Done
		a.ctxs.Delist(call.shard, &call.w)
		switch err {
		case ctxdone.ErrEnded:
			return fmt.Errorf("amqpactor: publish to %s: %w", addr, ctx.Err())
		case ctxdone.ErrStopped:
			return fmt.Errorf("amqpactor: publish to %s: %w", addr, ErrStopped)
		}
		call.release()
		return err
	}
	// Onto the lane of the address's sender while its link is up, else
	// to the publisher, which routes it (actors/session).
	ch.Senders.Hand(env.Root, ch.Publisher, &call.p)
	select {
	case err := <-call.w.Done:
		call.release()
		return err
	case <-ended:
		return fmt.Errorf("amqpactor: publish to %s: %w", addr, ctx.Err())
	case <-env.StoppedShard(call.shard):
		// The tree stopped with the publish in it: nothing will answer.
		select {
		case err := <-call.w.Done:
			call.release()
			return err
		default:
			return fmt.Errorf("amqpactor: publish to %s: %w", addr, ErrStopped)
		}
	}
}

// publishCall is the memory of one publish: the Publish message, its answer
// channel and the mapped message, reused through callPool because a publish
// allocated them every time.
type publishCall struct {
	p     protocol.Publish
	w     ctxdone.Waiter // its answer channel
	out   protocol.Outgoing
	shard uint32 // which of the tree's stopped channels it waits on
}

var (
	// A call's shard is random: calls spread over the stop channels with
	// no counter shared between Apps.
	callPool = sync.Pool{New: func() any { return &publishCall{w: ctxdone.Waiter{Done: make(chan error, 1)}, shard: rand.Uint32()} }}
)

// release returns c to the pool without what it pointed to.
func (c *publishCall) release() {
	c.p = protocol.Publish{}
	c.out.Reset()
	callPool.Put(c)
}
