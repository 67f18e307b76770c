package amqpactor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/Azure/go-amqp"
	"go.opentelemetry.io/otel/attribute"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Request sends m to addr with a reply-to of the App's reply node and waits
// for the reply whose correlation-id matches, until ctx ends. m's message-id
// is set when empty.
//
// The request is traced like Publish (a producer span "request <address>"),
// so the responder's handler continues the trace.
func (a *App) Request(ctx context.Context, addr Address, m *Message) (*Message, error) {
	if ctx == nil {
		return nil, errNil("Request", "context")
	}
	if m == nil {
		return nil, errNil("Request", "message")
	}
	if err := a.checkAddress(addr, address.Send); err != nil {
		return nil, err
	}
	t := a.tel
	tg := a.dests.target(addr, useRequest)
	start := time.Now()
	ctx, span, m := t.startSend(ctx, tg.requestName, tg, m,
		attribute.String("messaging.operation.name", "request"))
	rep, err := a.request(ctx, addr, m)
	i := 0
	if err != nil {
		i = 1
	}
	t.requestDur.Record(ctx, time.Since(start).Seconds(), tg.reqDur[i]...)
	endSpan(span, err)
	return rep, err
}

// request is Request without its tracing (above).
func (a *App) request(ctx context.Context, addr Address, m *Message) (*Message, error) {
	if err := a.checkAddress(addr, address.Send); err != nil {
		return nil, err
	}
	addr = a.partitionOf(addr, m.GroupID)
	env, ch, err := a.running(ctx)
	if err != nil {
		return nil, err
	}
	req := *m
	if req.MessageID == nil {
		req.MessageID = a.cfg.name + "-" + strconv.FormatUint(a.seq.Add(1), 10)
	}
	expireAtDeadline(ctx, &req)
	key := req.CorrelationID
	if key == nil {
		key = req.MessageID
	}
	reply := make(chan protocol.Reply, 2) // Send, then the reply or an error
	k := protocol.CorrelationKey(key)
	var sent chan error // the request's outcome; nil once it was accepted
	send := func(raw *amqp.Message) error {
		sent = make(chan error, 1)
		ch.Senders.Hand(env.Root, ch.Publisher, &protocol.Publish{Ctx: ctx, Address: addr, Message: raw, Done: sent})
		return nil
	}
	if replyTo, ok := ch.Replies.Register(k, reply); ok {
		// The reply link is up: no need to ask the requests actor.
		req.ReplyTo = replyTo
		raw, err := protocol.ToAMQP(&req)
		if err != nil {
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, err)
		}
		if err := send(raw); err != nil {
			ch.Replies.Cancel(k)
			return nil, err
		}
	} else {
		// The actor attaches the reply link first, then answers Send.
		env.Root.Send(ch.Requests, &protocol.Request{Key: k, Ctx: ctx, Address: addr, Message: &req, Reply: reply})
	}
	for {
		select {
		case rep := <-reply:
			switch {
			case rep.Err != nil:
				if re := (*RemoteError)(nil); errors.As(rep.Err, &re) {
					re.Address = addr.String() // the book does not know it
					return nil, re
				}
				return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, rep.Err)
			case rep.Send != nil:
				if err := send(rep.Send); err != nil {
					ch.Replies.Cancel(k)
					return nil, err
				}
			default:
				// The reply may overtake the request's outcome; it answers
				// the request either way.
				return rep.Message, nil
			}
		case err := <-sent:
			if err != nil {
				ch.Replies.Cancel(k)
				return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, err)
			}
			sent = nil
		case <-ctx.Done():
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: no reply: %w", addr, ctx.Err())
		case <-env.Stopped():
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: no reply: %w", addr, ErrStopped)
		}
	}
}
