package amqpactor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"mime"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/amqptypes"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// Handler handles one delivery; what it returns decides the outcome.
type Handler func(ctx context.Context, m *Message) error

// BatchHandler handles a batch; its result applies to every message in it.
type BatchHandler func(ctx context.Context, ms []*Message) error

type (
	rejectError        struct{ err error }
	releaseError       struct{}
	undeliverableError struct{ err error }
)

func (e *rejectError) Error() string        { return "rejected: " + errString(e.err) }
func (e *rejectError) Unwrap() error        { return e.err }
func (*releaseError) Error() string         { return "released" }
func (e *undeliverableError) Error() string { return "undeliverable: " + errString(e.err) }
func (e *undeliverableError) Unwrap() error { return e.err }

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// Reject makes the handler's delivery rejected: the broker's dead-letter
// policy decides what happens to it. The error's text becomes the
// description; an *amqp.Error in err's chain gives the condition too.
func Reject(err error) error { return &rejectError{err: err} }

// Release makes the delivery released: back to the queue, delivery-count
// unchanged.
func Release() error { return &releaseError{} }

// Undeliverable makes the delivery modified{delivery-failed,
// undeliverable-here}: the broker does not redeliver it to this receiver.
func Undeliverable(err error) error { return &undeliverableError{err: err} }

// RetryPolicy says what a failure does.
//
// Without Backoff a failure goes back to the broker (modified), which
// redelivers it when it likes: meanwhile the rest of its group-id runs, so
// a retried message comes after later ones of its group. With Backoff the
// partition worker retries it in place, holding back the rest of its
// partition (so every group-id it serves) until it succeeds or runs out of
// attempts: group-id order holds.
type RetryPolicy struct {
	// MaxDeliveries, when > 0, is the number of attempts: a failure of the
	// delivery whose delivery-count shows it is the last attempt is
	// dead-lettered (DeadLetter) or sent as rejected instead of modified.
	// With Backoff, zero means DefaultMaxDeliveries.
	MaxDeliveries uint32
	// RetryAddress, when set, is for queues that do not count modified in
	// delivery-count (RabbitMQ classic queues): a failure publishes a copy
	// with delivery-count + 1 there and accepts the original. Service Bus
	// needs none: the runtime abandons there, and its delivery count goes up.
	RetryAddress Address
	// Backoff, when > 0, retries a failure in place after Backoff, then
	// twice as long each time (plus up to half again of jitter), capped by
	// MaxBackoff (zero means DefaultMaxBackoff, or Backoff when longer).
	// Each attempt shows the delivery-count a redelivery would. A drain or
	// stop ends the wait: the failure then goes back to the broker
	// (modified), and what its partition holds after it from the same link
	// is released, so it is not overtaken.
	Backoff, MaxBackoff time.Duration
	// BrokerDelay, when > 0, has the broker hold a failure back before it
	// redelivers it, instead of the partition waiting (Backoff): RabbitMQ
	// 4.3's delayed retry on quorum queues over AMQP 1.0. The queue is
	// declared with x-delayed-retry-type failed, x-delayed-retry-min
	// BrokerDelay and x-delayed-retry-max MaxBrokerDelay (zero means
	// DefaultMaxBackoff, or BrokerDelay when longer); the broker waits
	// BrokerDelay times the message's delivery-count, capped by
	// MaxBrokerDelay. Other messages, of the same group too, are delivered
	// meanwhile: unlike Backoff it does not keep a group's order. Subscribe
	// refuses it with Backoff, RetryAddress, a classic queue or
	// at-most-once, and with an error wrapping ErrNotSupported on another
	// transport; a receiver on a broker before 4.3 fails to attach with one.
	BrokerDelay, MaxBrokerDelay time.Duration
	// DeadLetter, when set, is where a message goes after its last attempt
	// or when the handler rejects it (Reject). On RabbitMQ 4, for a quorum
	// queue and a DeadLetter queue without Backoff, the broker moves it:
	// the queue is declared with x-dead-letter-exchange "",
	// x-dead-letter-routing-key DeadLetter, x-dead-letter-strategy
	// at-least-once, x-overflow reject-publish and x-delivery-limit
	// MaxDeliveries. Everywhere else the runtime publishes a copy there,
	// with the failure in its message annotations (FailureAnnotation,
	// DeliveriesAnnotation, DeadLetterFromAnnotation), and accepts the
	// original once the copy is accepted. Without it a message rejected
	// after its last attempt is logged at warn, and the broker drops it
	// unless its queue dead-letters by itself.
	DeadLetter Address
}

// Defaults of a RetryPolicy with Backoff.
const (
	DefaultMaxDeliveries = 10
	DefaultMaxBackoff    = 30 * time.Second
)

// The message annotations of a copy the runtime dead-letters: the
// failure's text, the number of deliveries it had, and the address it came
// from.
const (
	FailureAnnotation        = "x-opt-amqpactor-failure"
	DeliveriesAnnotation     = "x-opt-amqpactor-deliveries"
	DeadLetterFromAnnotation = "x-opt-amqpactor-address"
)

// Conditions of the rejections the runtime makes itself.
const (
	CondRejected      = "amqpactor:rejected"
	CondMaxDeliveries = "amqpactor:max-deliveries-exceeded"
)

// retryable is a failure the handler did not give a verdict for.
func retryable(err error) bool {
	var rej *rejectError
	var rel *releaseError
	var und *undeliverableError
	return err != nil && !errors.As(err, &rej) && !errors.As(err, &rel) && !errors.As(err, &und)
}

// effective is p with the defaults of Backoff filled in.
func (p RetryPolicy) effective() RetryPolicy {
	if p.Backoff > 0 {
		if p.MaxDeliveries == 0 {
			p.MaxDeliveries = DefaultMaxDeliveries
		}
		if p.MaxBackoff <= 0 {
			p.MaxBackoff = DefaultMaxBackoff
		}
		p.MaxBackoff = max(p.MaxBackoff, p.Backoff)
	}
	return p
}

// subPolicy is what a subscription's outcomes need beyond the handler's
// result.
type subPolicy struct {
	p       RetryPolicy // effective
	src     Address
	classic bool
	log     *failureLog
}

// outcomer maps a handler result to an outcome, per the table in the
// package documentation and the subscription's RetryPolicy.
func (a *App) outcomer(sp *subPolicy) protocol.Outcomer {
	p := sp.p
	return func(ctx context.Context, err error, m *Message) messages.Outcome {
		if err == nil {
			return messages.Outcome{Kind: messages.Accepted}
		}
		count := retriedCount(m)
		var rej *rejectError
		var rel *releaseError
		var und *undeliverableError
		switch {
		case errors.As(err, &rej):
			return a.deadLetter(ctx, sp, m, count, err, rejected(rej.err, CondRejected), "rejected by the handler")
		case errors.As(err, &rel):
			return messages.Outcome{Kind: messages.Released}
		case errors.As(err, &und):
			sp.log.warn(m, count, "modified (undeliverable here)", err)
			// The description goes nowhere on the spec's modified; Service Bus
			// dead-letters with it (transport/amqpwire).
			return messages.Outcome{Kind: messages.Modified, DeliveryFailed: true, UndeliverableHere: true, Description: errString(und.err)}
		}
		if p.MaxDeliveries > 0 && count+1 >= p.MaxDeliveries {
			o := rejected(err, CondMaxDeliveries)
			o.Description = fmt.Sprintf("failed %d deliveries, last: %s", count+1, o.Description)
			return a.deadLetter(ctx, sp, m, count, err, o, fmt.Sprintf("last of %d deliveries", p.MaxDeliveries))
		}
		if !p.RetryAddress.IsZero() {
			cp := *m
			cp.DeliveryCount = count + 1
			cp.FirstAcquirer = false
			cp.Annotations = make(map[string]any, len(m.Annotations)+1)
			for k, v := range m.Annotations {
				cp.Annotations[k] = v
			}
			cp.Annotations[RetryCountAnnotation] = cp.DeliveryCount
			if perr := a.Publish(context.WithoutCancel(ctx), p.RetryAddress, &cp); perr != nil {
				a.log.Warn("amqpactor: publishing to the retry address failed", "address", p.RetryAddress.String(), "error", perr)
				return messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
			}
			sp.log.warn(m, count, "copied to the retry address "+p.RetryAddress.String(), err)
			return messages.Outcome{Kind: messages.Accepted}
		}
		sp.log.warn(m, count, "modified (the broker redelivers it)", err)
		return messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
	}
}

// deadLetter settles a message that gets no more attempts: o (rejected)
// where there is no DeadLetter or the broker moves it there itself, or
// accepted once a copy is published to DeadLetter. A copy that fails to
// publish leaves the message with the broker (modified), never lost.
func (a *App) deadLetter(ctx context.Context, sp *subPolicy, m *Message, count uint32, err error, o messages.Outcome, why string) messages.Outcome {
	dl := sp.p.DeadLetter
	switch {
	case dl.IsZero():
		sp.log.warn(m, count, why+"; rejected with no dead-letter address: dropped unless the queue dead-letters", err)
		return o
	case a.brokerDeadLetters(sp):
		sp.log.warn(m, count, why+"; rejected: the broker dead-letters it to "+dl.String(), err)
		return o
	}
	cp := *m
	cp.DeliveryCount = 0
	cp.FirstAcquirer = false
	cp.Annotations = make(map[string]any, len(m.Annotations)+3)
	for k, v := range m.Annotations {
		cp.Annotations[k] = v
	}
	// The dead-letter queue's own consumers count from scratch.
	delete(cp.Annotations, RetryCountAnnotation)
	cp.Annotations[FailureAnnotation] = o.Description
	cp.Annotations[DeliveriesAnnotation] = count + 1
	cp.Annotations[DeadLetterFromAnnotation] = sp.src.String()
	if perr := a.Publish(context.WithoutCancel(ctx), dl, &cp); perr != nil {
		sp.log.warn(m, count, why+"; dead-lettering to "+dl.String()+" failed ("+perr.Error()+"): modified, the broker redelivers it", err)
		return messages.Outcome{Kind: messages.Modified, DeliveryFailed: true}
	}
	sp.log.warn(m, count, why+"; dead-lettered to "+dl.String(), err)
	return messages.Outcome{Kind: messages.Accepted}
}

// brokerDeadLetters reports that the broker moves a rejected message to the
// DeadLetter itself: a RabbitMQ 4 quorum queue declared for it (see
// transport.ReceiverOptions.DeadLetter), and no retries in place, whose
// last failure the runtime dead-letters with the failure annotated.
func (a *App) brokerDeadLetters(sp *subPolicy) bool {
	c := a.Connector()
	return c != nil && c.Dialect() == RabbitMQ4 && sp.p.Backoff <= 0 && !sp.classic &&
		sp.src.Kind() == address.KindQueue && sp.p.DeadLetter.Kind() == address.KindQueue
}

// failureBurst is how many failures a subscription logs a second; the rest
// are counted in one line when the next second begins.
const failureBurst = 10

// failureLog logs a subscription's handler failures and what became of
// them at warn, at most failureBurst a second: a queue of poison messages
// would flood the log. Never the body.
type failureLog struct {
	log  *slog.Logger
	addr string
	now  func() time.Time // time.Now; a test's clock

	mu      sync.Mutex
	since   time.Time
	n       int
	skipped int
}

func (f *failureLog) warn(m *Message, count uint32, outcome string, err error) {
	clock := f.now
	if clock == nil {
		clock = time.Now
	}
	now := clock()
	f.mu.Lock()
	skipped := 0
	if now.Sub(f.since) >= time.Second {
		skipped = f.skipped
		f.since, f.n, f.skipped = now, 0, 0
	}
	f.n++
	ok := f.n <= failureBurst
	if !ok {
		f.skipped++
	}
	f.mu.Unlock()
	if skipped > 0 {
		f.log.Warn("amqpactor: handler failures not logged (over "+strconv.Itoa(failureBurst)+" a second)",
			"address", f.addr, "count", skipped)
	}
	if ok {
		f.log.Warn("amqpactor: handler failed", "address", f.addr, "message-id", fmt.Sprint(m.MessageID),
			"delivery-count", count, "outcome", outcome, "error", errString(err))
	}
}

// RetryCountAnnotation is the message annotation in which a copy published
// to a RetryPolicy.RetryAddress carries its delivery-count as well as in the
// header: a broker sets the header's delivery-count itself (RabbitMQ 4
// delivers a published message with 0, whatever its header said), and
// without it a retried copy would never reach MaxDeliveries.
const RetryCountAnnotation = "x-opt-amqpactor-delivery-count"

// retriedCount is m's delivery-count, or the count its retry copy carries
// when that is higher.
func retriedCount(m *Message) uint32 {
	n := m.DeliveryCount
	v, ok := m.Annotations[RetryCountAnnotation]
	if !ok {
		return n
	}
	// A count of another type than these, or none, is no count: 0.
	c, _ := amqptypes.Int(v)
	if c > int64(n) {
		n = uint32(min(c, math.MaxUint32))
	}
	return n
}

func rejected(err error, cond string) messages.Outcome {
	o := messages.Outcome{Kind: messages.Rejected, Condition: cond, Description: errString(err)}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		o.Condition, o.Description = string(ae.Condition), ae.Description
	}
	return o
}

// Responder adapts a request handler: its reply goes to the request's
// reply-to with correlation-id set to the request's correlation-id, or its
// message-id when it has none.
//
// When fn fails (returns an error, or Reject) the caller is answered at
// once with an error reply: application-properties ReplyErrorProperty (the
// error's text) and ReplyConditionProperty (the *amqp.Error's condition,
// CondRejected for Reject, else CondResponderFailed), which App.Request
// returns as a *RemoteError. The error's text crosses the wire to whoever
// sent the request: return what the caller may read. The request is then
// accepted: it has its answer, so it is neither redelivered nor
// dead-lettered, and a RetryPolicy does not apply. Release and Undeliverable
// still hand the request to another consumer, and an error returned after
// the handler's context ended (the link went, the App stops) leaves the
// request to be delivered again, unanswered. A panic in fn is not answered.
//
// A request whose absolute-expiry-time has passed (App.Request sets it to
// its caller's deadline) is accepted without calling fn: nobody waits for
// its reply. The App's requests node counts those ("expired").
//
// Responder(nil) returns a handler that Subscribe refuses with an error;
// called anyway, it rejects every request.
func Responder(fn func(ctx context.Context, req *Message) (*Message, error)) Handler {
	if fn == nil {
		return invalidAdapter(errNilResponder)
	}
	h := func(ctx context.Context, req *Message) error {
		if expiredRequest(req) {
			countExpired(appFrom(ctx))
			return nil
		}
		if req.ReplyTo == "" {
			return Reject(errors.New("amqpactor: request has no reply-to"))
		}
		rep, err := respond(ctx, fn, req)
		if err != nil {
			if rep = errorReply(ctx, err); rep == nil {
				return err
			}
		}
		if rep == nil {
			rep = &Message{}
		}
		rep.CorrelationID = req.CorrelationID
		if rep.CorrelationID == nil {
			rep.CorrelationID = req.MessageID
		}
		app := appFrom(ctx)
		if app == nil {
			return errors.New("amqpactor: Responder used outside a subscription of an App")
		}
		if err := app.publishReply(ctx, Raw(req.ReplyTo), rep); err != nil {
			if undeliverableReply(err) {
				// The reply-to names a node the broker does not have (or
				// will not let us send to): no retry can deliver it, so
				// the request is rejected, and only this reply failed.
				app.log.Warn("amqpactor: reply not delivered", "address", req.ReplyTo, "error", err)
				return Reject(err)
			}
			return err
		}
		return nil
	}
	return withDescriptor(h, handlerInfo{kind: kindResponder})
}

// respond calls fn, turning a panic into an error, so the caller gets an
// error reply rather than waiting for its deadline.
func respond(ctx context.Context, fn func(ctx context.Context, req *Message) (*Message, error), req *Message) (rep *Message, err error) {
	defer func() {
		if v := recover(); v != nil {
			if app := appFrom(ctx); app != nil {
				app.log.Error("amqpactor: responder panicked", "address", req.ReplyTo, "panic", v, "stack", string(debug.Stack()))
			}
			rep, err = nil, fmt.Errorf("amqpactor: responder panicked: %v", v)
		}
	}()
	return fn(ctx, req)
}

// Typed adapts a handler of T: the body is decoded as JSON when the
// content-type says JSON (or is empty). A body that cannot be decoded, or
// another content-type, is rejected at once (amqp:decode-error), never
// retried: another attempt would fail the same way.
//
// AsyncAPI describes the payload of a Typed subscription by the JSON schema
// of T (see App.AsyncAPI).
//
// Typed(nil) returns a handler that Subscribe refuses with an error; called
// anyway, it rejects every message.
func Typed[T any](fn func(ctx context.Context, v T, m *Message) error) Handler {
	if fn == nil {
		return invalidAdapter(errNilTyped)
	}
	h := func(ctx context.Context, m *Message) error {
		var v T
		if !isJSON(m.ContentType) {
			return Reject(&amqp.Error{Condition: amqp.ErrCondDecodeError,
				Description: fmt.Sprintf("typed handler wants JSON, content-type is %q", m.ContentType)})
		}
		body := m.Body
		if body == nil {
			switch b := m.Value.(type) {
			case string:
				body = []byte(b)
			case []byte:
				body = b
			}
		}
		if err := json.Unmarshal(body, &v); err != nil {
			return Reject(&amqp.Error{Condition: amqp.ErrCondDecodeError,
				Description: fmt.Sprintf("decoding %T: %v", v, err)})
		}
		return fn(ctx, v, m)
	}
	return withDescriptor(h, handlerInfo{kind: kindTyped, payload: reflect.TypeFor[T]()})
}

var (
	errNilResponder = errors.New("amqpactor: Responder(nil): no function to answer requests")
	errNilTyped     = errors.New("amqpactor: Typed(nil): no function to handle messages")
)

// invalidAdapter is what Responder and Typed return without a function:
// Subscribe refuses it (its descriptor carries err), and a call rejects the
// message with err rather than leaving a requester to time out.
func invalidAdapter(err error) Handler {
	return withDescriptor(func(context.Context, *Message) error { return Reject(err) },
		handlerInfo{kind: kindInvalid, invalid: err})
}

func isJSON(ct string) bool {
	if ct == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

type appKey struct{}

func appFrom(ctx context.Context) *App {
	a, _ := ctx.Value(appKey{}).(*App)
	return a
}

// undeliverableReply reports a reply the broker answered with an outcome
// other than accepted (RabbitMQ 4 releases a transfer to a missing queue on
// the anonymous terminus), or whose attach it refused for good (not found,
// not allowed).
func undeliverableReply(err error) bool {
	var oe *OutcomeError
	return errors.As(err, &oe) || actors.Terminal(err)
}
