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
	// An address sent to before passed the check then: one lookup instead
	// of two, as in Publish.
	tg := a.dests.checked(addr, useRequest)
	if tg == nil {
		if err := a.checkAddress(addr, address.Send); err != nil {
			return nil, err
		}
		if addr.Kind() == address.KindPartitioned {
			tg = a.dests.target(addr, useRequest)
		} else {
			tg = a.dests.targetChecked(addr, useRequest)
		}
	}
	t := a.tel
	start := time.Now()
	ctx, span, m := t.startSend(ctx, tg.requestName, tg, m, requestOperation...)
	rep, err := a.request(ctx, addr, m)
	i := 0
	if err != nil {
		i = 1
	}
	t.requestDur.Record(ctx, time.Since(start).Seconds(), tg.reqDur[i]...)
	endSpan(span, err)
	return rep, err
}

// requestOperation is the span attribute of every request, made once: a
// variadic argument built per call is a heap slice per call.
var requestOperation = []attribute.KeyValue{attribute.String("messaging.operation.name", "request")}

// request is Request without its tracing (above), for an address Request
// has checked.
func (a *App) request(ctx context.Context, addr Address, m *Message) (*Message, error) {
	addr = a.partitionOf(addr, m.GroupID)
	env, ch, err := a.running(ctx)
	if err != nil {
		return nil, err
	}
	req := *m
	var k string
	if req.MessageID == nil {
		// The key is spelt with its message-id inside, so that one string
		// serves both when the message-id is the correlation.
		key := a.requestKey()
		req.MessageID = key[len(protocol.StringKeyPrefix):]
		if req.CorrelationID == nil {
			k = key
		}
	}
	expireAtDeadline(ctx, &req)
	if k == "" {
		key := req.CorrelationID
		if key == nil {
			key = req.MessageID
		}
		k = protocol.CorrelationKey(key)
	}
	// The actor's Send, then the reply or an error, and a failure of the
	// request's publish (protocol.Publish.Request): never more than three.
	reply := make(chan protocol.Reply, 3)
	send := func(raw *amqp.Message) {
		ch.Senders.Hand(env.Root, ch.Publisher, &protocol.Publish{Ctx: ctx, Address: addr, Message: raw, Request: reply})
	}
	if replyTo, ok := ch.Replies.Register(k, reply); ok {
		// The reply link is up: no need to ask the requests actor.
		req.ReplyTo = replyTo
		raw, err := protocol.ToAMQP(&req)
		if err != nil {
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, err)
		}
		send(raw)
	} else {
		// The actor attaches the reply link first, then answers Send.
		q := req
		env.Root.Send(ch.Requests, &protocol.Request{Key: k, Ctx: ctx, Address: addr, Message: &q, Reply: reply})
	}
	for {
		select {
		case rep := <-reply:
			switch {
			case rep.Failed != nil:
				ch.Replies.Cancel(k)
				return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, rep.Failed)
			case rep.Err != nil:
				if re := (*RemoteError)(nil); errors.As(rep.Err, &re) {
					re.Address = addr.String() // the book does not know it
					return nil, re
				}
				return nil, fmt.Errorf("amqpactor: request to %s: %w", addr, rep.Err)
			case rep.Send != nil:
				send(rep.Send)
			default:
				// The reply may overtake the request's outcome; it answers
				// the request either way.
				return rep.Message, nil
			}
		case <-ctx.Done():
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: no reply: %w", addr, ctx.Err())
		case <-env.Stopped():
			ch.Replies.Cancel(k)
			return nil, fmt.Errorf("amqpactor: request to %s: no reply: %w", addr, ErrStopped)
		}
	}
}

// requestKey returns the correlation key of a new message-id: the App's
// name and a sequence number, after protocol.StringKeyPrefix, in one allocation.
func (a *App) requestKey() string {
	var buf [96]byte
	b := append(buf[:0], protocol.StringKeyPrefix...)
	b = append(b, a.cfg.name...)
	b = append(b, '-')
	b = strconv.AppendUint(b, a.seq.Add(1), 10)
	return string(b)
}
