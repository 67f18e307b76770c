package amqpactor

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/amqpactor/amqpactor/messages"
)

// RemoteError is what App.Request returns when the responder failed: its
// function returned an error or rejected the request, and it answered with
// an error reply instead of leaving the caller to its deadline. It carries
// the request's address and the condition and description the responder
// sent. Use errors.As.
type RemoteError = messages.RemoteError

// The application-properties of an error reply (see Responder): a client
// of another library can send or read them.
const (
	ReplyErrorProperty     = messages.ErrorProperty
	ReplyConditionProperty = messages.ErrorConditionProperty
)

// CondResponderFailed is the condition of an error reply when the
// responder's function returned an error that names no AMQP condition.
const CondResponderFailed = "amqpactor:responder-failed"

// maxTTL is the longest header ttl the wire carries (a uint of ms).
const maxTTL = time.Duration(math.MaxUint32) * time.Millisecond

// expireAtDeadline gives a request its caller's deadline as expiry: the
// header ttl (what is left of it, which RabbitMQ 4 honours) and
// absolute-expiry-time (the deadline, which a Responder checks). A broker
// then drops the request once nobody waits for its reply. A shorter ttl or
// an earlier expiry the caller set stays; without a deadline nothing is set.
// A request that expires need not outlive its caller either, so it is
// transient unless it asks to be Durable.
func expireAtDeadline(ctx context.Context, m *Message) {
	dl, ok := ctx.Deadline()
	if !ok {
		return
	}
	if !m.Durable {
		m.Transient = true
	}
	// A deadline already past still goes as 1 ms: ToAMQP rounds a positive
	// ttl up to a whole millisecond, and 0 would mean "never expires".
	ttl := min(max(time.Until(dl), time.Nanosecond), maxTTL)
	if m.TTL == 0 || ttl < m.TTL {
		m.TTL = ttl
	}
	if m.AbsoluteExpiryTime.IsZero() || dl.Before(m.AbsoluteExpiryTime) {
		m.AbsoluteExpiryTime = dl
	}
}

// expiredRequest reports whether req's absolute-expiry-time (its caller's
// deadline, on the caller's clock) has passed: its caller no longer waits,
// so a Responder skips it. Clocks that disagree by more than what was left
// of the deadline skip requests early or answer ones nobody awaits.
func expiredRequest(req *Message) bool {
	return !req.AbsoluteExpiryTime.IsZero() && !time.Now().Before(req.AbsoluteExpiryTime)
}

// countExpired counts a request a Responder skipped on the App's requests
// node ("expired"); app is nil outside a subscription.
func countExpired(app *App) {
	if app == nil {
		return
	}
	if l := app.live.Load(); l != nil && l.children.Replies != nil {
		l.children.Replies.Expired()
	}
}

// errorReply is the reply a Responder sends when its function failed with
// err, or nil when err is not a failure the caller should get: Release and
// Undeliverable hand the request to another consumer, and an error after the
// handler's context ended (the link went, or the App stops) leaves the
// request to be delivered again. The error's text goes to the caller as the
// description: it crosses the wire to whoever sent the request.
func errorReply(ctx context.Context, err error) *Message {
	var rel *releaseError
	var und *undeliverableError
	if ctx.Err() != nil || errors.As(err, &rel) || errors.As(err, &und) {
		return nil
	}
	var o messages.Outcome
	if rej := (*rejectError)(nil); errors.As(err, &rej) {
		o = rejected(rej.err, CondRejected)
	} else {
		o = rejected(err, CondResponderFailed)
	}
	return &Message{Headers: map[string]any{
		ReplyErrorProperty:     o.Description,
		ReplyConditionProperty: o.Condition,
	}}
}
