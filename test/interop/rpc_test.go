package interop

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
)

// TestPeerRequestsAmqpactorResponds: the peer is the requester, with a reply
// queue of its own in reply-to; an amqpactor Responder answers to that
// address as given, with correlation-id = the request's correlation-id, or
// its message-id when it has none, of the same AMQP type.
func TestPeerRequestsAmqpactorResponds(t *testing.T) {
	eachPeer(t, func(t *testing.T, e *env) {
		p := e.peer
		rpc := e.queue("rpc")
		replyQ := e.declare("peer-replies")
		reqs := make(chan *amqpactor.Message, 8)
		e.app(func(app *amqpactor.App) {
			_, err := app.Subscribe(amqpactor.Queue(rpc), amqpactor.Responder(
				func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
					select {
					case reqs <- req:
					default:
					}
					body := req.Body
					if s, ok := req.Value.(string); ok && body == nil {
						body = []byte(s)
					}
					return &amqpactor.Message{
						Body:    append([]byte("pong:"), body...),
						Headers: map[string]any{"served-by": "amqpactor"},
					}, nil
				}))
			if err != nil {
				t.Fatalf("subscribe: %v", err)
			}
		})

		requests := []struct {
			spec      peerMsg
			messageID any // as the Responder sees it
			corr      tv  // the reply's correlation-id as the peer sees it
			reply     string
		}{
			{
				spec:      peerMsg{Properties: &peerProps{MessageID: ptr(tvNum("ulong", 42))}, Body: dataBody([]byte("ping-1"))},
				messageID: uint64(42),
				corr:      tvNum("ulong", 42),
				reply:     "pong:ping-1",
			},
			{
				spec: peerMsg{
					Properties: &peerProps{MessageID: ptr(tvUUID(uuidText)), CorrelationID: ptr(tvStr("corr-2"))},
					Body:       dataBody([]byte("ping-2")),
				},
				messageID: uuidValue,
				corr:      tvStr("corr-2"),
				reply:     "pong:ping-2",
			},
			{
				spec:      peerMsg{Properties: &peerProps{MessageID: ptr(tvStr("req-3"))}, Body: valueBody(tvStr("ping-3"))},
				messageID: "req-3",
				corr:      tvStr("req-3"),
				reply:     "pong:ping-3",
			},
		}
		sp := make([]peerMsg, len(requests))
		for i, r := range requests {
			sp[i] = r.spec
		}
		var res peerResult
		p.run(t, "request", e.peerEnv(e.addr(rpc), "PEER_REPLY_TO", e.addr(replyQ), "PEER_MESSAGES", specs(sp...)), &res)
		if len(res.Replies) != len(requests) {
			t.Fatalf("the peer got %d replies, want %d", len(res.Replies), len(requests))
		}

		// The Responder saw the peer's reply-to and ids as sent.
		ctx := testContext(t, 10*time.Second)
		seen := map[string]*amqpactor.Message{}
		for range requests {
			select {
			case m := <-reqs:
				seen[idKey(m.MessageID)] = m
			case <-ctx.Done():
				t.Fatalf("the Responder saw %d of %d requests", len(seen), len(requests))
			}
		}
		for _, r := range requests {
			m := seen[idKey(r.messageID)]
			if m == nil {
				t.Errorf("the Responder saw no request with message-id %s", show(r.messageID))
			} else if m.ReplyTo != e.addr(replyQ) {
				t.Errorf("request %s: reply-to %q, want %q", show(r.messageID), m.ReplyTo, e.addr(replyQ))
			}
		}

		// Each reply carries the right correlation-id, and nothing of ours
		// but the Responder's headers and, as it goes through the anonymous
		// relay, its destination in properties.to.
		for _, r := range requests {
			var got *peerMsg
			for i := range res.Replies {
				if c := res.Replies[i].Properties; c != nil && c.CorrelationID != nil && c.CorrelationID.equal(r.corr) {
					got = &res.Replies[i]
				}
			}
			if got == nil {
				t.Errorf("no reply with correlation-id %v; replies: %s", r.corr, jsonText(res.Replies))
				continue
			}
			e.checkSeen(t, "reply to "+r.corr.String(), replyQ, *got, outboundCase{
				durable:  true,
				priority: 4,
				props:    &peerProps{CorrelationID: ptr(r.corr), To: ptr(e.addr(replyQ))},
				appProps: map[string]tv{"served-by": tvStr("amqpactor")},
				body:     dataBody([]byte(r.reply)),
				sections: []string{"header", "message-annotations", "properties", "application-properties", "data"},
			})
		}
	})
}

// artemisTemp is the name Artemis gives a dynamic node: a UUID.
var artemisTemp = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// TestAmqpactorRequestsPeerResponds: App.Request against a peer responder.
// With the RabbitMQ4 dialect the App's reply-to is its private reply queue,
// /queues/amqpactor.reply.XXX (direct reply-to from RabbitMQ 4.2 on); with
// the Artemis dialect, the address of its dynamic source. The peer replies
// to it as given, with correlation-id = the request's correlation-id or
// message-id, and Request matches the reply by it.
func TestAmqpactorRequestsPeerResponds(t *testing.T) {
	eachPeer(t, func(t *testing.T, e *env) {
		p := e.peer
		rpc := e.declare("peer-rpc")
		app := e.app(nil)

		requests := []struct {
			msg  *amqpactor.Message
			corr any // the reply's correlation-id; nil: the id Request made
		}{
			{msg: &amqpactor.Message{Body: []byte("ping-1")}},
			{msg: &amqpactor.Message{MessageID: uint64(7), Body: []byte("ping-2")}, corr: uint64(7)},
			{msg: &amqpactor.Message{MessageID: "m-3", CorrelationID: uuidValue, Body: []byte("ping-3")}, corr: uuidValue},
		}
		run := p.start(t, "respond", e.peerEnv(e.addr(rpc), "PEER_COUNT", fmt.Sprint(len(requests))))

		ctx := testContext(t, 45*time.Second)
		// Bounded by ctx but without a deadline of its own: a deadline
		// would put a ttl (what is left of it) and an absolute-expiry-time
		// on the request, which this exact comparison cannot expect
		// (test/live covers them).
		reqCtx, cancelReq := context.WithCancel(context.Background())
		defer cancelReq()
		defer context.AfterFunc(ctx, cancelReq)()
		replies := make([]*amqpactor.Message, len(requests))
		for i, r := range requests {
			rep, err := app.Request(reqCtx, amqpactor.Queue(rpc), r.msg)
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			replies[i] = rep
		}
		var res peerResult
		run.wait(t, &res)
		if len(res.Requests) != len(requests) {
			t.Fatalf("the peer saw %d requests, want %d", len(res.Requests), len(requests))
		}

		for i, r := range requests {
			seen := res.Requests[i]
			replyTo := ""
			if seen.Properties != nil && seen.Properties.ReplyTo != nil {
				replyTo = *seen.Properties.ReplyTo
			}
			if e.artemis() {
				// Artemis gives the App's dynamic source a temporary
				// queue named by a UUID, the same for every request.
				if !artemisTemp.MatchString(replyTo) || i > 0 && replyTo != *res.Requests[0].Properties.ReplyTo {
					t.Errorf("request %d: reply-to %q, want the App's one dynamic address (a UUID) on Artemis", i+1, replyTo)
					continue
				}
			} else {
				// RabbitMQ 4.2 and later give the App direct reply-to, no
				// queue at all; 4.0 the App's own reply queue (issue 28).
				wantReply := "/queues/amqpactor.reply."
				if e.release.AtLeast(4, 2) {
					wantReply = "/queues/amq.rabbitmq.reply-to."
				}
				if !strings.HasPrefix(replyTo, wantReply) {
					t.Errorf("request %d: reply-to %q, want %s… on RabbitMQ %v", i+1, replyTo, wantReply, e.release)
					continue
				}
			}
			// What the peer saw of the request: the ids, reply-to and the
			// body; nothing else of ours.
			props := &peerProps{ReplyTo: &replyTo}
			switch id := r.msg.MessageID.(type) {
			case nil: // Request made one: a string
				if seen.Properties.MessageID == nil || seen.Properties.MessageID.T != "string" {
					t.Errorf("request %d: message-id %v, want the string Request makes", i+1, seen.Properties.MessageID)
					continue
				}
				props.MessageID = seen.Properties.MessageID
			case uint64:
				props.MessageID = ptr(tvNum("ulong", id))
			case string:
				props.MessageID = ptr(tvStr(id))
			}
			if r.msg.CorrelationID != nil {
				props.CorrelationID = ptr(tvUUID(uuidText))
			}
			e.checkSeen(t, fmt.Sprintf("request %d", i+1), rpc, seen, outboundCase{
				durable:  true,
				priority: 4,
				props:    props,
				body:     dataBody(r.msg.Body),
				sections: []string{"header", "message-annotations", "properties", "data"},
			})

			// The reply, exactly.
			corr := r.corr
			if corr == nil {
				var s string
				_ = json.Unmarshal(seen.Properties.MessageID.V, &s)
				corr = s
			}
			want := &amqpactor.Message{
				CorrelationID: corr,
				Body:          append([]byte("reply:"), r.msg.Body...),
				Headers:       map[string]any{"peer": p.name},
				Priority:      4,
			}
			// The peer's reply has no header.
			// The routing key is the queue's name, percent-decoded.
			key, err := url.PathUnescape(strings.TrimPrefix(replyTo, "/queues/"))
			if err != nil {
				t.Fatalf("reply-to %q: %v", replyTo, err)
			}
			for _, d := range diffMessage(e.viaBroker(want, key, e.stored(p, nil)), replies[i]) {
				t.Errorf("reply %d: %s", i+1, d)
			}
		}
	})
}
