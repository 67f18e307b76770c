package inproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// conn is one connection to the broker.
type conn struct {
	b    *Broker
	done chan struct{}
	// advertised is the session limit when it was opened (0: none).
	advertised int

	mu              sync.Mutex
	owner[*session]       // its sessions; cause is what its links report
	err             error // what Err reports: nil after a clean Close
}

// owner is what a connection or a session holds until it ends, and why it
// ended; the holder's mutex guards it.
type owner[K comparable] struct {
	owned map[K]struct{}
	ended bool
	cause error
}

// endLocked ends the owner with cause, once, and takes out what it owns for
// the caller to end after releasing the lock; ok is false when it had ended
// already.
func (o *owner[K]) endLocked(cause error) (owned []K, ok bool) {
	if o.ended {
		return nil, false
	}
	o.ended, o.cause = true, cause
	owned = slices.Collect(maps.Keys(o.owned))
	o.owned = nil
	return owned, true
}

var (
	_ transport.Conn          = (*conn)(nil)
	_ transport.Transactional = (*conn)(nil)
	_ transport.SessionLimit  = (*conn)(nil)
)

// MaxSessions is the session limit the broker had when the connection was
// opened (see Broker.SetMaxSessions); without one, 65536, the most an open's
// channel-max can allow (and what one without the field allows).
func (c *conn) MaxSessions() int {
	if c.advertised == 0 {
		return 1 << 16
	}
	return c.advertised
}

func (c *conn) Features() transport.Features {
	return transport.Features{DynamicSource: true, Transactions: true, AnonymousRelay: !c.b.cfg.noRelay}
}

func (c *conn) Done() <-chan struct{} { return c.done }

func (c *conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *conn) NewSession(ctx context.Context) (transport.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &session{c: c, owner: owner[link]{owned: map[link]struct{}{}}}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return nil, c.cause
	}
	if limit := int(c.b.maxSessions.Load()); limit > 0 && len(c.owned) >= limit {
		return nil, &amqp.SessionError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondResourceLimitExceeded,
			Description: fmt.Sprintf("inproc: a connection holds at most %d sessions", limit)}}
	}
	c.owned[s] = struct{}{}
	return s, nil
}

// Close ends the connection and every session and link on it. Their Send and
// Receive then report a *transport.LinkError wrapping an *amqp.ConnError with
// no RemoteErr.
func (c *conn) Close(context.Context) error {
	c.end(&amqp.ConnError{}, false)
	return nil
}

// end ends the connection once. failed says whether Err reports cause.
func (c *conn) end(cause error, failed bool) {
	c.mu.Lock()
	ss, ok := c.endLocked(cause)
	if ok && failed {
		c.err = cause
	}
	c.mu.Unlock()
	if !ok {
		return
	}
	for _, s := range ss {
		s.end(cause)
	}
	c.b.forgetConn(c)
	close(c.done)
}

func (c *conn) forget(s *session) {
	c.mu.Lock()
	delete(c.owned, s)
	c.mu.Unlock()
}

// alive returns nil, or the reason the connection ended.
func (c *conn) alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return c.cause
	}
	return nil
}

// session is one session; it owns its links.
type session struct {
	c *conn

	mu          sync.Mutex
	owner[link] // its links
}

var _ transport.Session = (*session)(nil)

// Close ends the session and its links; they report a *transport.LinkError
// wrapping an *amqp.SessionError with no RemoteErr.
func (s *session) Close(context.Context) error {
	s.end(&amqp.SessionError{})
	s.c.forget(s)
	return nil
}

// end ends the session once; it reports whether this call ended it.
func (s *session) end(cause error) bool {
	s.mu.Lock()
	ls, ok := s.endLocked(cause)
	s.mu.Unlock()
	for _, l := range ls {
		l.end(cause)
	}
	return ok
}

// add records l; it fails when the session has ended.
func (s *session) add(l link) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return s.cause
	}
	s.owned[l] = struct{}{}
	return nil
}

func (s *session) forget(l link) {
	s.mu.Lock()
	if s.owned != nil {
		delete(s.owned, l)
	}
	s.mu.Unlock()
}

// check validates an attach before anything is created.
func (s *session) check(ctx context.Context, a address.Address, role address.Role) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	ended, cause := s.ended, s.cause
	s.mu.Unlock()
	if ended {
		return &transport.LinkError{Address: a.String(), Op: "attach", Err: cause}
	}
	if _, err := address.Render(address.Artemis, a, role, ""); err != nil {
		return err
	}
	return s.c.b.refusal(a)
}

// ---- transactions ----

// ErrTxnDone is returned by a Txn used after Commit or Rollback.
var ErrTxnDone = errors.New("inproc: transaction already discharged")

type pending struct {
	a address.Address
	s *stored
}

type txn struct {
	c       *conn
	mu      sync.Mutex
	done    bool
	msgs    []pending
	accepts []txAccept
}

// txAccept is a delivery a transaction accepts at its commit.
type txAccept struct {
	r *receiverLink
	m *amqp.Message
}

// Begin declares a transaction. Nothing published in it is visible before
// Commit.
func (c *conn) Begin(ctx context.Context) (transport.Txn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.alive(); err != nil {
		return nil, fmt.Errorf("inproc: begin transaction: %w", err)
	}
	return &txn{c: c}, nil
}

func (t *txn) Publish(ctx context.Context, a address.Address, m *amqp.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	s, err := own(m)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxnDone
	}
	if err := t.c.alive(); err != nil {
		return fmt.Errorf("inproc: transactional publish: %w", err)
	}
	t.msgs = append(t.msgs, pending{a: a, s: s})
	return nil
}

// Accept makes the acceptance of m, which r holds unsettled, part of the
// transaction.
func (t *txn) Accept(ctx context.Context, r transport.Receiver, m *amqp.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	rl, ok := r.(*receiverLink)
	if !ok || rl.b != t.c.b || m == nil {
		return fmt.Errorf("inproc: transactional accept: %w", ErrUnknownDelivery)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxnDone
	}
	t.accepts = append(t.accepts, txAccept{r: rl, m: m})
	return nil
}

// Commit makes every message published in the transaction visible at once:
// no receiver sees one of them before all of them are on their queues. When
// the connection has ended the transaction is rolled back and Commit fails.
func (t *txn) Commit(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxnDone
	}
	t.done = true
	msgs, accepts := t.msgs, t.accepts
	t.msgs, t.accepts = nil, nil
	if err := t.c.alive(); err != nil {
		return fmt.Errorf("inproc: commit: transaction rolled back: %w", err)
	}
	if err := settleAll(accepts); err != nil {
		return fmt.Errorf("inproc: commit: transaction rolled back: %w", err)
	}
	t.c.b.commit(msgs)
	return nil
}

// settleAll accepts every delivery of a committing transaction, or none:
// one that is settled already or whose link has ended fails the commit.
func settleAll(as []txAccept) error {
	taken := make([]unsettled, 0, len(as))
	for i, a := range as {
		a.r.mu.Lock()
		u, ok := a.r.unsettled[a.m]
		cause := a.r.cause
		if ok && cause == nil {
			delete(a.r.unsettled, a.m)
		}
		a.r.mu.Unlock()
		if !ok || cause != nil {
			// Give back what was taken: the transaction settles nothing.
			for j, u := range taken {
				b := as[j]
				b.r.mu.Lock()
				if b.r.cause == nil {
					b.r.unsettled[b.m] = u
				} else {
					// Ended meanwhile: back to its queue, as its end would.
					b.r.mu.Unlock()
					b.r.q.mu.Lock()
					b.r.q.requeueLocked([]*entry{u.e})
					b.r.q.mu.Unlock()
					continue
				}
				b.r.mu.Unlock()
			}
			if cause != nil {
				return fmt.Errorf("%w: %w", ErrLinkEnded, cause)
			}
			return fmt.Errorf("delivery %d of the transaction: %w", i, ErrUnknownDelivery)
		}
		taken = append(taken, u)
	}
	// Accepted, as Settle accepts; the delivered copies are left to the
	// collector, since the transaction cannot know who still reads them.
	for i, a := range as {
		a.r.q.out.Add(-1)
		taken[i].e.msg.release()
	}
	return nil
}

func (t *txn) Rollback(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return ErrTxnDone
	}
	t.done = true
	t.msgs = nil
	return nil
}

// commit routes a transaction's messages atomically: it locks every target
// queue (in id order, the one place that holds more than one queue lock),
// enqueues everything, and only then dispatches.
func (b *Broker) commit(msgs []pending) {
	type placed struct {
		q *queue
		e *entry
	}
	var (
		ts   []*queue
		all  []placed
		uniq []*queue
	)
	for _, p := range msgs {
		ts = b.targets(p.a, ts[:0])
		for _, q := range ts {
			all = append(all, placed{q, p.s.entry()})
			if !slices.Contains(uniq, q) {
				uniq = append(uniq, q)
			}
		}
	}
	slices.SortFunc(uniq, func(x, y *queue) int { return cmp.Compare(x.id, y.id) })
	for _, q := range uniq {
		q.mu.Lock()
	}
	for _, p := range all {
		p.q.enqueueLocked(p.e)
	}
	for _, q := range uniq {
		q.dispatchLocked()
	}
	for _, q := range uniq {
		q.mu.Unlock()
	}
}
