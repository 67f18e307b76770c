package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// replyCredit is the window of the reply receiver. Replies arrive
// pre-settled, so the pump tops it up as it reads.
const replyCredit = 256

// NewRequests returns the props of the requests actor: one reply receiver
// per app (a dynamic node where the broker has them, else a private reply
// queue the transport declares), attached on first Request and shared by
// every request, which it correlates by correlation-id in book.
//
// A requests actor that panics is restarted by the connection's strategy:
// on Restarting the dying incarnation closes the book, ends its reply link
// (its pump returns) and session, and fails every caller waiting in the
// book with ErrRestarted (their replies were addressed to a link that no
// longer exists, so they could never arrive); requests it had queued go
// back to its mailbox, for the next incarnation. That one keeps the book
// and, on the connection its predecessor had, attaches a new reply link at
// once when requests wait, rather than on the next ConnUp.
func NewRequests(env *actors.Env, book *Replies) *actor.Props {
	k := &reqKept{}
	return env.Props(func() actor.Actor {
		return &requests{env: env, book: book, kept: k}
	})
}

// ErrRestarted answers a request whose reply link ended because the
// requests actor was restarted.
var ErrRestarted = protocol.ErrRequestsRestarted

// reqKept is what one requests actor's incarnations share; only the
// actor's mailbox run writes it.
type reqKept struct {
	conn     transport.Conn
	draining bool
	panics   atomic.Uint64
}

// Replies is the book of requests waiting for their reply. The requests
// actor opens it when its reply link is attached and closes it when the
// link goes; while it is open a caller registers itself and publishes its
// request without asking the actor, and the reply pump hands each reply
// straight to its caller: going through the actor's mailbox both ways was
// two hand-overs on every round trip.
type Replies struct {
	mu      sync.Mutex
	to      string // the reply address while the reply link is attached
	waiting map[string]chan<- protocol.Reply

	sent, answered, orphans, poison uint64 // for Describe
	errors                          uint64 // error replies answered (a subset of answered)
	expired                         uint64 // requests this App's Responders skipped, expired
}

// NewReplies returns a closed book.
func NewReplies() *Replies { return &Replies{waiting: map[string]chan<- protocol.Reply{}} }

// Register makes ch the waiter for the reply correlated by key and returns
// the address the request must name as its reply-to. It reports false while
// no reply link is attached: then send a protocol.Request to the actor,
// which attaches one. If the link goes, ch receives the error.
func (b *Replies) Register(key string, ch chan<- protocol.Reply) (replyTo string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.to == "" {
		return "", false
	}
	b.waiting[key] = ch
	b.sent++
	return b.to, true
}

// Cancel forgets the waiter of key, whose caller gave up.
func (b *Replies) Cancel(key string) {
	b.mu.Lock()
	delete(b.waiting, key)
	b.mu.Unlock()
}

// resolve hands m to the request it answers, if its caller still waits. An
// error reply (a responder that failed) reaches its caller as a
// *messages.RemoteError, whose Address the caller fills in.
func (b *Replies) resolve(m *messages.Message) {
	var buf [96]byte
	key := protocol.AppendCorrelationKey(buf[:0], m.CorrelationID)
	rep := protocol.Reply{Message: m}
	if re := protocol.RemoteErrorOf(m); re != nil {
		rep = protocol.Reply{Err: re}
	}
	b.mu.Lock()
	ch, ok := b.waiting[string(key)]
	if ok {
		delete(b.waiting, string(key))
		b.answered++
		if rep.Err != nil {
			b.errors++
		}
	} else {
		b.orphans++ // its caller gave up
	}
	b.mu.Unlock()
	if ok {
		ch <- rep
	}
}

// Expired counts a request that one of this App's Responders accepted
// without calling its function because its absolute-expiry-time had passed.
func (b *Replies) Expired() {
	b.mu.Lock()
	b.expired++
	b.mu.Unlock()
}

// open and close follow the reply link; to is its address.
func (b *Replies) open(to string) {
	b.mu.Lock()
	b.to = to
	b.mu.Unlock()
}

func (b *Replies) close() { b.open("") }

// failAll answers every waiter with err.
func (b *Replies) failAll(err error) {
	b.mu.Lock()
	waiting := b.waiting
	b.waiting = map[string]chan<- protocol.Reply{}
	b.mu.Unlock()
	for _, ch := range waiting {
		ch <- protocol.Reply{Err: err}
	}
}

func (b *Replies) counters() map[string]uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return map[string]uint64{"sent": b.sent, "answered": b.answered, "waiting": uint64(len(b.waiting)), "orphans": b.orphans,
		"poison": b.poison, "errors": b.errors, "expired": b.expired}
}

type (
	replyLink struct {
		by   *requests // the incarnation that asked for it
		conn transport.Conn
		sess transport.Session
		link transport.Receiver
		err  error
	}
	replyEnd struct{ err error }
)

type requests struct {
	env       *actors.Env
	conn      transport.Conn
	sess      transport.Session
	link      transport.Receiver
	cancel    context.CancelFunc
	attaching bool
	queued    []*protocol.Request
	book      *Replies
	state     string
	lastErr   error
	draining  bool
	kept      *reqKept
}

func (r *requests) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		r.set(protocol.StateDetached, nil)
		// Restarted on a live connection: no ConnUp will come. The requests
		// the predecessor had queued come back through the mailbox.
		r.conn, r.draining = r.kept.conn, r.kept.draining
	case *testhook.Crash:
		panic("amqpactor: requests: " + m.Reason)
	case *actor.Restarting:
		r.kept.panics.Add(1)
		r.kept.conn, r.kept.draining = r.conn, r.draining
		r.drop()
		r.book.failAll(ErrRestarted)
		for _, q := range r.queued {
			ctx.Send(ctx.Self(), q)
		}
		r.queued = nil
		r.set(protocol.StateRestarting, nil)
	case *protocol.ConnUp:
		r.conn = m.Conn
		if len(r.queued) > 0 {
			r.attach(ctx)
		}
	case *protocol.ConnDown:
		r.conn = nil
		r.drop()
		r.failAll(fmt.Errorf("amqpactor: request: connection lost: %w", m.Err))
	case *protocol.Request:
		if r.draining {
			m.Reply <- protocol.Reply{Err: protocol.ErrStopped}
			return
		}
		if r.link == nil {
			r.queued = append(r.queued, m)
			if r.conn != nil && !r.attaching {
				r.attach(ctx)
			}
			return
		}
		r.send(ctx, m)
	case *replyLink:
		r.onLink(ctx, m)
	case *replyEnd:
		r.lastErr = m.err
		r.drop()
		r.failAll(fmt.Errorf("amqpactor: request: reply link ended: %w", m.err))
	case *protocol.Drain:
		r.draining = true
		r.book.close()
		r.failAll(protocol.ErrStopped)
		sess, link, cancel, env := r.sess, r.link, r.cancel, r.env
		r.sess, r.link, r.cancel = nil, nil, nil
		r.set(protocol.StateDetached, nil)
		env.Go(func() {
			var err error
			if link != nil {
				cctx, c := env.CloseCtx(m.Ctx)
				err = link.Close(cctx)
				c()
				cancel()
			}
			m.Done <- closeAfter(env, m.Ctx, sess, err)
		})
	case *protocol.Describe:
		counters := r.book.counters()
		counters["panics"] = r.kept.panics.Load()
		n := &protocol.Node{Name: "requests", Kind: "requests", PID: ctx.Self().String(), State: r.state,
			Restarts: int(r.kept.panics.Load()), Counters: counters}
		if r.link != nil {
			n.Address = r.link.Address()
			n.ReplyNode = "dynamic"
			if rn, ok := r.link.(interface{ ReplyNode() string }); ok {
				n.ReplyNode = rn.ReplyNode()
			}
		}
		if r.lastErr != nil {
			n.LastError = r.lastErr.Error()
		}
		ctx.Respond(&protocol.Described{Node: n})
	case *actor.Stopped:
		r.set(protocol.StateStopped, nil)
	case *actor.Stopping:
		r.drop()
		r.failAll(protocol.ErrStopped)
	}
}

// set changes the requests actor's state (see actors.Env.SetState); its
// address is the reply link's, while it has one.
func (r *requests) set(to string, err error) {
	n := actors.RootNode.Child("requests", "requests", "")
	if r.link != nil {
		n.Address = r.link.Address()
	}
	r.env.SetState(&r.state, n, to, err)
}

func (r *requests) attach(ctx actor.Context) {
	r.attaching = true
	r.set(protocol.StateAttaching, nil)
	self, conn, env, by := ctx.Self(), r.conn, r.env, r
	env.Go(func() {
		actx, cancel := env.AttachCtx(nil)
		defer cancel()
		sess, err := conn.NewSession(actx)
		if err != nil {
			env.Root.Send(self, &replyLink{by: by, conn: conn, err: err})
			return
		}
		link, err := sess.NewReceiver(actx, transport.ReceiverOptions{Dynamic: true, Settled: true, Credit: replyCredit})
		if err != nil {
			_ = sess.Close(actx)
		}
		env.Root.Send(self, &replyLink{by: by, conn: conn, sess: sess, link: link, err: err})
	})
}

func (r *requests) onLink(ctx actor.Context, m *replyLink) {
	if m.by != r {
		// Asked for by a dead incarnation: this one attaches its own.
		closeSession(r.env, m.sess)
		return
	}
	r.attaching = false
	if m.conn != r.conn || r.draining {
		closeSession(r.env, m.sess)
		return
	}
	if m.err != nil {
		r.lastErr = fmt.Errorf("amqpactor: attaching the reply receiver: %w", m.err)
		r.set(protocol.StateRestarting, m.err)
		// Requests waiting now learn why; later ones try again.
		for _, q := range r.queued {
			q.Reply <- protocol.Reply{Err: r.lastErr}
		}
		r.queued = nil
		return
	}
	r.sess, r.link = m.sess, m.link
	r.set(protocol.StateAttached, nil)
	var lctx context.Context
	lctx, r.cancel = context.WithCancel(context.Background())
	self, link := ctx.Self(), m.link
	r.book.open(link.Address())
	r.env.Go(func() { r.pump(self, link, lctx) })
	for _, q := range r.queued {
		r.send(ctx, q)
	}
	r.queued = nil
}

func (r *requests) pump(self *actor.PID, link transport.Receiver, ctx context.Context) {
	if err := link.IssueCredit(replyCredit); err != nil {
		r.env.Root.Send(self, &replyEnd{err: err})
		return
	}
	var read uint32
	for {
		raw, err := link.Receive(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.env.Root.Send(self, &replyEnd{err: err})
			}
			return
		}
		if reason, ok := transport.Poison(raw); ok {
			// A reply that was not safe to decode (the link is
			// pre-settled: nothing to reject). Its caller waits out its
			// context; no caller ever gets a poison message.
			r.book.mu.Lock()
			r.book.poison++
			r.book.mu.Unlock()
			r.env.Log.Warn("amqpactor: poison reply dropped", "address", link.Address(), "reason", reason)
		} else {
			r.book.resolve(protocol.FromAMQP(raw))
		}
		if read++; read >= replyCredit/2 {
			if err := link.IssueCredit(read); err != nil {
				r.env.Root.Send(self, &replyEnd{err: err})
				return
			}
			read = 0
		}
	}
}

func (r *requests) send(ctx actor.Context, q *protocol.Request) {
	if q.Ctx.Err() != nil {
		q.Reply <- protocol.Reply{Err: q.Ctx.Err()}
		return
	}
	m := *q.Message
	m.ReplyTo = r.link.Address()
	raw, err := protocol.ToAMQP(&m)
	if err != nil {
		q.Reply <- protocol.Reply{Err: err}
		return
	}
	if _, ok := r.book.Register(q.Key, q.Reply); !ok {
		// Not reached: the book is open while the link is attached.
		q.Reply <- protocol.Reply{Err: fmt.Errorf("amqpactor: request to %s: no reply link", q.Address)}
		return
	}
	// The caller publishes it and awaits its outcome: the actor never waits
	// on a broker, and no goroutine is started per request.
	q.Reply <- protocol.Reply{Send: raw}
}

func (r *requests) drop() {
	r.book.close()
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
	if r.link != nil {
		link, sess, env := r.link, r.sess, r.env
		env.Go(func() {
			cctx, c := env.CloseCtx(context.Background())
			defer c()
			_ = link.Close(cctx)
			if sess != nil {
				_ = sess.Close(cctx)
			}
		})
	}
	r.link, r.sess = nil, nil
	r.set(protocol.StateDetached, nil)
}

func (r *requests) failAll(err error) {
	r.book.failAll(err)
	for _, q := range r.queued {
		q.Reply <- protocol.Reply{Err: err}
	}
	r.queued = nil
}
