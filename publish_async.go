package amqpactor

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Receipt is a publish in flight, from PublishAsync. Wait returns its
// outcome; any number of goroutines may wait on one Receipt.
type Receipt struct {
	addr    Address
	answer  chan error    // written once, by the sender, with the outcome
	done    chan struct{} // closed once err is set
	err     error
	stopped <-chan struct{} // the tree's end: nothing answers after it
	// call is the pooled publish, back to its pool once answered.
	call *publishCall
	// What the publish's telemetry needs once its outcome is known (no
	// closure: one allocation less per publish).
	tel     *telemetry
	tg      *target
	tctx    context.Context
	span    trace.Span
	start   time.Time
	settled bool
}

// PublishAsync hands m to addr's sender and returns at once; the Receipt's
// Wait returns the broker's outcome as Publish would (nil when accepted,
// *OutcomeError when not). One goroutine can so keep a whole window of
// publishes in flight, where Publish waits a broker round trip for each.
// The guarantees are Publish's: a publish whose link ends before its outcome
// is sent again on the next link (same message-id), until ctx ends.
// Publishes from one goroutine to one address are written in order once
// the address's link is attached and while it stays up. The first ones to
// an address, which wait for its link, may be written after later ones,
// and so may what a link that ends had in flight (it goes again on the
// next link).
//
// m (its body included) must not be changed until Wait has returned. The
// publish's span and metrics are recorded when its outcome is first read by
// Wait. Errors known before the hand-over (a nil or invalid argument, an App
// not started) are the Receipt's outcome at once.
func (a *App) PublishAsync(ctx context.Context, addr Address, m *Message, opts ...PublishOption) *Receipt {
	r := &Receipt{addr: addr, done: make(chan struct{})}
	switch {
	case ctx == nil:
		return r.failed(errNil("PublishAsync", "context"))
	case m == nil:
		return r.failed(errNil("PublishAsync", "message"))
	}
	c := pubOptions(opts)
	if err := a.checkAddress(addr, address.Send); err != nil {
		return r.failed(err)
	}
	addr = a.partitionOf(addr, m.GroupID)
	r.addr = addr
	use := useUnsettled
	if c.settled {
		use = useSettled
	}
	r.tel, r.tg, r.start, r.settled = a.tel, a.dests.target(addr, use), time.Now(), c.settled
	r.tctx, r.span, m = r.tel.startSend(ctx, r.tg.publishName, r.tg, m)
	env, ch, err := a.running(ctx)
	if err != nil {
		return r.failed(err)
	}
	call := callPool.Get().(*publishCall)
	raw, err := call.out.Map(m)
	if err != nil {
		call.release()
		return r.failed(fmt.Errorf("amqpactor: publish to %s: %w", addr, err))
	}
	// Its own answer channel, not the pooled call's: a second waiter must
	// never read the answer of a later publish that reuses the call. The
	// call itself is the sender's until it answers (last), then goes back
	// to the pool; unread, it is garbage.
	r.answer, r.stopped, r.call = make(chan error, 1), env.StoppedShard(call.shard), call
	call.p = protocol.Publish{Ctx: r.tctx, Address: addr, Message: raw, Settled: c.settled, Done: r.answer}
	ch.Senders.Hand(env.Root, ch.Publisher, &call.p)
	return r
}

// failed resolves r with err before anything was handed over.
func (r *Receipt) failed(err error) *Receipt {
	r.resolve(err)
	return r
}

func (r *Receipt) resolve(err error) {
	r.err = err
	if r.call != nil {
		r.call.release()
		r.call = nil
	}
	if r.tg != nil {
		res := publishResult(err, r.settled)
		r.tel.published.Add(r.tctx, 1, r.tg.published[res]...)
		r.tel.publishDur.Record(r.tctx, time.Since(r.start).Seconds(), r.tg.pubDur[res]...)
		endSpan(r.span, err)
	}
	close(r.done)
}

// Wait returns the publish's outcome once the broker has settled it (with
// Settled(), once it is written), or an error wrapping ctx.Err() when ctx
// ends first; the publish goes on, and a later Wait can still read its
// outcome.
func (r *Receipt) Wait(ctx context.Context) error {
	if r == nil {
		return errNil("Receipt.Wait", "receipt")
	}
	if ctx == nil {
		return errNil("Receipt.Wait", "context")
	}
	select {
	case <-r.done:
		return r.err
	default:
	}
	select {
	case err := <-r.answer:
		// The one waiter that read the answer resolves it for all.
		r.resolve(err)
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("amqpactor: publish to %s: %w", r.addr, ctx.Err())
	case <-r.stopped:
		// The tree stopped with the publish in it: nothing will answer.
		select {
		case err := <-r.answer:
			r.resolve(err)
		case <-r.done:
		default:
			return fmt.Errorf("amqpactor: publish to %s: %w", r.addr, ErrStopped)
		}
	}
	<-r.done
	return r.err
}

// BatchError is PublishBatch's error: the publishes that failed, by their
// index in the batch.
type BatchError struct {
	Address Address
	Failed  map[int]error
}

func (e *BatchError) Error() string {
	idx := make([]int, 0, len(e.Failed))
	for i := range e.Failed {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var b strings.Builder
	b.WriteString("amqpactor: publish batch to " + e.Address.String() + ": " + strconv.Itoa(len(idx)) + " failed")
	for n, i := range idx {
		if n == 3 {
			b.WriteString("; …")
			break
		}
		b.WriteString("; #" + strconv.Itoa(i) + ": " + e.Failed[i].Error())
	}
	return b.String()
}

// Unwrap returns the failures, for errors.Is and errors.As.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, 0, len(e.Failed))
	for _, err := range e.Failed {
		errs = append(errs, err)
	}
	return errs
}

// PublishBatch publishes every message of msgs to addr without waiting
// between them (as PublishAsync), then waits for every outcome: nil when all
// were accepted, else a *BatchError naming the ones that failed. A failed
// publish does not stop the others; none is retried here.
func (a *App) PublishBatch(ctx context.Context, addr Address, msgs []*Message, opts ...PublishOption) error {
	if ctx == nil {
		return errNil("PublishBatch", "context")
	}
	receipts := make([]*Receipt, len(msgs))
	for i, m := range msgs {
		receipts[i] = a.PublishAsync(ctx, addr, m, opts...)
	}
	var failed map[int]error
	for i, r := range receipts {
		if err := r.Wait(ctx); err != nil {
			if failed == nil {
				failed = map[int]error{}
			}
			failed[i] = err
		}
	}
	if failed == nil {
		return nil
	}
	return &BatchError{Address: addr, Failed: failed}
}
