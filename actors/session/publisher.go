package session

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/sender"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/cowmap"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/internal/publish"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/transport"
)

// The bounds of sending, per App (see the package documentation).
const (
	// DefaultMaxSenders is how many dedicated sender links the publisher
	// keeps, and, where the peer offers no anonymous relay, how many the
	// replies publisher keeps.
	DefaultMaxSenders = 64
	// DefaultSenderIdle is how long a sender goes unused before it retires.
	DefaultSenderIdle = time.Minute
)

// Senders is the table through which callers hand a publish to its sender
// without asking the publisher: the lane of each dedicated sender, and the
// lane of the anonymous sender of replies. The publishers keep it: an
// entry is there from its sender's spawn until the sender begins to retire.
type Senders struct {
	own, replies route
}

type route struct {
	lanes cowmap.Map[address.Address, *publish.Lane]
	mu    sync.RWMutex
	anon  *publish.Lane // the anonymous sender's lane (replies only)
}

// NewSenders returns an empty table.
func NewSenders() *Senders { return &Senders{} }

// Hand gives p to its sender: straight onto the lane of the address's
// dedicated sender (for a reply, of the anonymous sender of replies) while
// its link is attached, else to publisher, which routes it. p.Reply says
// which publisher's senders it goes through.
func (t *Senders) Hand(root *actor.RootContext, publisher *actor.PID, p *protocol.Publish) {
	r := &t.own
	if p.Reply {
		r = &t.replies
		r.mu.RLock()
		anon := r.anon
		r.mu.RUnlock()
		if anon != nil && anon.Offer(p) {
			return
		}
	}
	if lane, ok := r.lanes.Load(p.Address); ok && lane.Offer(p) {
		return
	}
	root.Send(publisher, p)
}

// NewPublisher returns the props of the publisher session actor. It spawns
// the replies publisher, its child, which sends replies on a session of
// its own.
//
// A publisher that panics is restarted by the connection's strategy. On
// Restarting the dying incarnation takes its senders out of the table (a
// publish then reaches the publisher's mailbox, i.e. the next
// incarnation) and gives its parked publishes back to its mailbox; the
// senders protoactor then stops (its own and the replies publisher's) hand
// their waiting publishes back instead of failing them, and finish what
// their writers have on the old links. The next incarnation keeps the
// session (and the replies publisher's) and the connection its predecessor
// had: it spawns senders on them at once, with no ConnUp.
//
// Every child is watched: a sender its supervisor stopped (its strategy's
// budget spent, or a Stop directive) is out of the routes at once, and what
// waited in it (handed back as it stopped, or left on its Lane) goes to a new
// sender for the address. The publisher starts one again at most 10 times a
// minute per address (actors.Restarts); past that the sender's node is
// failed (a StateChange says so, Health names it, the tree draws it failed)
// and publishes to that address fail at once with a *protocol.NodeError
// until the minute has passed, when the next publish starts a sender again.
// The publisher itself keeps serving every other address rather than fail
// with it: one address whose node keeps failing must not stop the App's
// publishing. The replies publisher is treated alike, within a budget of its
// own: past it, replies fail with a NodeError for a minute.
func NewPublisher(env *actors.Env, table *Senders) *actor.Props {
	return newPublisher(env, table, false, &pubShared{gone: make(chan struct{})}, nil)
}

// pubShared is what the incarnations of the App's publisher and of its
// replies publisher share.
type pubShared struct {
	// gone is closed by the App's publisher (its mailbox run) as it stops
	// for good, never on a restart; senders and the replies publisher only
	// receive from it, to know that nobody would route what they hand back.
	gone     chan struct{}
	goneOnce sync.Once
	mu       sync.Mutex
	// replies is the session a stopping replies publisher leaves for the
	// next one: written by the stopping one's mailbox run, taken (under mu)
	// by the next one's Started.
	replies transport.Session
}

// isGone reports whether the App's publisher has stopped for good.
func (s *pubShared) isGone() bool {
	select {
	case <-s.gone:
		return true
	default:
		return false
	}
}

// pubKept is what one publisher's incarnations share; only its mailbox run
// writes it.
type pubKept struct {
	conn    transport.Conn
	relay   bool
	sess    transport.Session
	opening bool
	panics  atomic.Uint64
	// budgets are the restart budgets of the senders, by address (the zero
	// Address: the anonymous sender); failed the addresses whose budget is
	// spent, until when.
	budgets map[address.Address]*actors.Restarts
	failed  map[address.Address]*failedNode
	// repliesBudget and repliesFailed are the same for the replies publisher.
	repliesBudget actors.Restarts
	repliesFailed *failedNode
}

// failedNode is a child whose restart budget is spent: work for it fails
// with err until until, and the tree draws node.
type failedNode struct {
	err   *protocol.NodeError
	until time.Time
	node  *protocol.Node
}

// restartWindow is how long a failed child stays failed: the window of the
// zero actors.Restarts, after which its budget is whole again.
const restartWindow = time.Minute

func newPublisher(env *actors.Env, table *Senders, replies bool, shared *pubShared, box *inbox) *actor.Props {
	r := &table.own
	if replies {
		r = &table.replies
	}
	maxSenders, idle := env.MaxSenders, env.SenderIdle
	if maxSenders <= 0 {
		maxSenders = DefaultMaxSenders
	}
	if idle <= 0 {
		idle = DefaultSenderIdle
	}
	k := &pubKept{}
	return env.Props(func() actor.Actor {
		return &publisher{env: env, table: table, route: r, replies: replies, max: maxSenders, idle: idle,
			dedicated: map[address.Address]*entry{}, byPID: map[string]*entry{}, shared: shared, kept: k, box: box}
	})
}

type retrySession struct{ conn transport.Conn }

// entry is one sender child.
type entry struct {
	addr     address.Address // zero for the anonymous sender
	pid      *actor.PID
	lane     *publish.Lane
	seen     uint64    // lane.Used() when last looked at
	at       time.Time // when seen last changed
	retiring bool
	retired  bool // it let go of its link and is being stopped
}

type publisher struct {
	env     *actors.Env
	table   *Senders
	route   *route
	replies bool
	child   *actor.PID // the replies publisher, of the App's own publisher
	// box is the replies publisher's inbox: the App's publisher leaves
	// replies there (the one of its current child); the replies publisher
	// takes them.
	box  *inbox
	max  int
	idle time.Duration

	conn    transport.Conn
	sess    transport.Session
	opening bool
	relay   bool // the connection offers the anonymous relay

	dedicated map[address.Address]*entry // not retiring
	anon      *entry
	byPID     map[string]*entry // every sender child, retiring ones too
	order     []*actor.PID      // the same, in spawn order
	nRetiring int               // dedicated senders retiring: they still hold a link
	parked    []*protocol.Publish
	retired   uint64

	state    string
	lastErr  error
	attempt  int
	timer    *time.Timer
	draining bool
	// lost counts the sessions lost in a row that each lived less than
	// stableSession; from the second, the next session waits a backoff.
	lost   int
	sessAt time.Time // when the current session began

	shared *pubShared
	kept   *pubKept
	// restarting and stopping: this incarnation is being replaced, or the
	// actor stops; a child that stops then is not started again.
	restarting, stopping bool
}

// stableSession is how long a session lives before its loss counts as a
// first one again, replaced at once.
const stableSession = time.Second

// node is the publisher's node in the tree: "publisher" under the
// connection, or "replies" under the publisher.
func (p *publisher) node() actors.Node {
	if p.replies {
		return actors.RootNode.Child("publisher", "publisher", "").Child("replies", "publisher", "")
	}
	return actors.RootNode.Child("publisher", "publisher", "")
}

// set changes the publisher's state (see actors.Env.SetState).
func (p *publisher) set(to string, err error) { p.env.SetState(&p.state, p.node(), to, err) }

func (p *publisher) spawn(ctx actor.Context, addr address.Address) *entry {
	lane := publish.NewLane()
	// What a sender hands back on a hand-over goes to the App's publisher,
	// which outlives the replies publisher's restart too.
	handTo := ctx.Self()
	if p.replies {
		handTo = ctx.Parent()
	}
	name := "sender:" + addr.String()
	if addr.IsZero() {
		name = "sender:(anonymous)"
	}
	// A prefix, not a name: a retiring sender of the same address may
	// still be there.
	pid := ctx.SpawnPrefix(sender.New(p.env, sender.Config{Address: addr, Session: p.sess, Lane: lane, Idle: p.idle, Parent: p.node(),
		ParentGone: p.shared.gone, HandTo: handTo}), name)
	e := &entry{addr: addr, pid: pid, lane: lane, at: time.Now()}
	p.byPID[pid.Id] = e
	p.order = append(p.order, pid)
	if addr.IsZero() {
		p.anon = e
		if p.replies {
			p.route.mu.Lock()
			p.route.anon = lane
			p.route.mu.Unlock()
		}
	} else {
		p.dedicated[addr] = e
		p.route.lanes.Store(addr, lane)
	}
	return e
}

// publish routes m: to its address's dedicated sender; a reply where the
// peer offers the anonymous relay, and an address past the bound of
// dedicated senders, to the anonymous sender; else to a new dedicated
// sender, making room first (the least recently used one retires) when
// the bound is reached: m waits until it has.
func (p *publisher) publish(ctx actor.Context, m *protocol.Publish) {
	if p.draining {
		m.Answer(protocol.ErrStopped)
		return
	}
	if m.Reply && !p.replies {
		p.toReplies(ctx, m)
		return
	}
	if p.replies && p.sess == nil && p.conn != nil && !p.opening {
		p.opening = true
		openSession(p.env, ctx.Self(), p.conn, nil)
	}
	if e := p.dedicated[m.Address]; e != nil {
		p.hand(ctx, e, m)
		return
	}
	live := len(p.dedicated) + p.nRetiring
	if p.relay && (p.replies || live >= p.max) {
		if p.anon == nil {
			if err := p.failedFor(address.Address{}); err != nil {
				m.Answer(err)
				return
			}
			p.spawn(ctx, address.Address{})
		}
		p.hand(ctx, p.anon, m)
		return
	}
	if live < p.max {
		if err := p.failedFor(m.Address); err != nil {
			m.Answer(err)
			return
		}
		p.hand(ctx, p.spawn(ctx, m.Address), m)
		return
	}
	p.parked = append(p.parked, m)
	p.makeRoom(ctx)
}

// hand gives m to e's sender: onto its link's writer, else parked on its
// lane, where m outlives the sender should it stop.
func (p *publisher) hand(ctx actor.Context, e *entry, m *protocol.Publish) {
	if e.lane.Offer(m) {
		return
	}
	ok, wake := e.lane.Park(m)
	switch {
	case !ok:
		// Shut: routes to it are gone as its lane is shut, so this is
		// a bug of this file; the caller hears of it at once.
		m.Answer(p.senderErr(e.addr, errors.New("its lane is shut")))
	case wake:
		ctx.Send(e.pid, &sender.Wake{})
	}
}

// toReplies leaves a reply for the replies publisher, starting one again
// first if it is gone.
func (p *publisher) toReplies(ctx actor.Context, m *protocol.Publish) {
	if p.child == nil {
		if f := p.kept.repliesFailed; f != nil && time.Now().Before(f.until) {
			m.Answer(f.err)
			return
		}
		p.kept.repliesFailed = nil
		p.spawnReplies(ctx)
	}
	ok, wake := p.box.put(m)
	switch {
	case !ok:
		m.Answer(p.repliesErr(errors.New("its inbox is shut")))
	case wake:
		ctx.Send(p.child, &wakeReplies{})
	}
}

// spawnReplies starts the replies publisher, with an inbox of its own.
func (p *publisher) spawnReplies(ctx actor.Context) {
	p.box = &inbox{}
	p.child = spawn(ctx, newPublisher(p.env, p.table, true, p.shared, p.box), "replies")
	if p.conn != nil {
		ctx.Send(p.child, &protocol.ConnUp{Conn: p.conn})
	}
}

// senderNode is the node of the sender for addr (the zero Address: the
// anonymous sender).
func (p *publisher) senderNode(addr address.Address) actors.Node {
	if addr.IsZero() {
		return p.node().Child("sender:(anonymous)", "sender", "(anonymous)")
	}
	return p.node().Child("sender:"+addr.Name(), "sender", addr.String())
}

// senderErr is the NodeError of the sender for addr.
func (p *publisher) senderErr(addr address.Address, why error) *protocol.NodeError {
	n := p.senderNode(addr)
	return &protocol.NodeError{Path: n.Path, Kind: n.Kind, Address: n.Address, Err: why}
}

// repliesErr is the NodeError of the replies publisher.
func (p *publisher) repliesErr(why error) *protocol.NodeError {
	n := p.node().Child("replies", "publisher", "")
	return &protocol.NodeError{Path: n.Path, Kind: n.Kind, Err: why}
}

// failedFor returns the error of addr's sender while it is failed.
func (p *publisher) failedFor(addr address.Address) error {
	f := p.kept.failed[addr]
	if f == nil {
		return nil
	}
	if time.Now().Before(f.until) {
		return f.err
	}
	delete(p.kept.failed, addr)
	return nil
}

// childGone is a child that stopped (Terminated): it is out of the routes,
// and what was parked for it goes to a new one. One that stopped unasked
// (its supervisor gave up on it) is started again within its budget;
// past it, it is failed.
func (p *publisher) childGone(ctx actor.Context, pid *actor.PID) {
	if p.child != nil && pid.Equal(p.child) {
		p.repliesGone(ctx)
		return
	}
	e := p.byPID[pid.Id]
	if e == nil {
		return
	}
	delete(p.byPID, pid.Id)
	p.dropOrder(pid)
	left := e.lane.Shut()
	if !e.retiring {
		if e == p.anon {
			p.anon = nil
			if p.replies {
				p.route.mu.Lock()
				p.route.anon = nil
				p.route.mu.Unlock()
			}
		} else if p.dedicated[e.addr] == e {
			delete(p.dedicated, e.addr)
			p.route.lanes.Delete(e.addr)
		}
	} else if !e.retired && !e.addr.IsZero() {
		p.nRetiring--
	}
	if p.handBack(ctx, left) {
		return
	}
	if !e.retiring {
		if p.kept.budgets == nil {
			p.kept.budgets = map[address.Address]*actors.Restarts{}
		}
		now := time.Now()
		b := p.kept.budgets[e.addr]
		if b == nil {
			// One budget per address whose sender was stopped within
			// the window: whole ones are forgotten, so the map stays as
			// small as the addresses failing now.
			maps.DeleteFunc(p.kept.budgets, func(_ address.Address, r *actors.Restarts) bool { return r.Idle(now) })
			b = &actors.Restarts{}
			p.kept.budgets[e.addr] = b
		}
		if !b.Spend(now) {
			p.senderFailed(e, pid, now, left)
			return
		}
		p.env.Log.Warn("amqpactor: a sender was stopped by its supervisor; a new one takes its publishes", "address", e.addr.String())
	}
	for _, q := range left {
		p.publish(ctx, q)
	}
}

// handBack disposes of what a child that stopped left while this publisher
// is restarting (the next incarnation routes it) or stopping (it fails with
// ErrStopped); false means neither, and the caller routes it.
func (p *publisher) handBack(ctx actor.Context, left []*protocol.Publish) bool {
	switch {
	case p.restarting:
		for _, q := range left {
			ctx.Send(ctx.Self(), q)
		}
		return true
	case p.draining || p.stopping:
		for _, q := range left {
			q.Answer(protocol.ErrStopped)
		}
		return true
	}
	return false
}

// senderFailed reports e's sender failed: its restart budget is spent.
func (p *publisher) senderFailed(e *entry, pid *actor.PID, now time.Time, left []*protocol.Publish) {
	ne := p.senderErr(e.addr, fmt.Errorf("stopped by its supervisor more than %d times within %s; no new sender before %s",
		10, restartWindow, now.Add(restartWindow).Format(time.RFC3339)))
	p.env.Log.Error("amqpactor: a sender failed for good", "address", e.addr.String(), "error", ne)
	n := p.senderNode(e.addr)
	state := protocol.StateStopped
	p.env.SetState(&state, n, actors.StateFailed, ne)
	if p.kept.failed == nil {
		p.kept.failed = map[address.Address]*failedNode{}
	}
	p.kept.failed[e.addr] = &failedNode{err: ne, until: now.Add(restartWindow),
		node: &protocol.Node{Name: n.Path[strings.LastIndex(n.Path, "/")+1:], Kind: "sender", PID: pid.String(),
			Address: n.Address, State: actors.StateFailed, LastError: ne.Error()}}
	for _, q := range left {
		q.Answer(ne)
	}
}

// repliesGone is the replies publisher that stopped: what was left for it
// goes to the next one, started within its budget.
func (p *publisher) repliesGone(ctx actor.Context) {
	p.child = nil
	left := p.box.close()
	if p.handBack(ctx, left) {
		return
	}
	now := time.Now()
	if !p.kept.repliesBudget.Spend(now) {
		ne := p.repliesErr(fmt.Errorf("stopped by its supervisor more than %d times within %s; none before %s",
			10, restartWindow, now.Add(restartWindow).Format(time.RFC3339)))
		p.env.Log.Error("amqpactor: the replies publisher failed for good", "error", ne)
		state := protocol.StateStopped
		p.env.SetState(&state, p.node().Child("replies", "publisher", ""), actors.StateFailed, ne)
		p.kept.repliesFailed = &failedNode{err: ne, until: now.Add(restartWindow),
			node: &protocol.Node{Name: "replies", Kind: "publisher", State: actors.StateFailed, LastError: ne.Error()}}
		for _, q := range left {
			q.Answer(ne)
		}
		return
	}
	p.env.Log.Warn("amqpactor: the replies publisher was stopped by its supervisor; starting it again")
	p.spawnReplies(ctx)
	for _, q := range left {
		p.toReplies(ctx, q)
	}
}

// dropOrder takes pid out of the children in spawn order.
func (p *publisher) dropOrder(pid *actor.PID) {
	for i, x := range p.order {
		if x.Id == pid.Id {
			p.order = append(p.order[:i], p.order[i+1:]...)
			return
		}
	}
}

// makeRoom retires the least recently used dedicated senders until as many
// retire as parked publishes need new ones.
func (p *publisher) makeRoom(ctx actor.Context) {
	need := map[address.Address]struct{}{}
	for _, m := range p.parked {
		need[m.Address] = struct{}{}
	}
	now := time.Now()
	for p.nRetiring < len(need) && len(p.dedicated) > 0 {
		var lru *entry
		for _, e := range p.dedicated {
			if u := e.lane.Used(); u != e.seen {
				e.seen, e.at = u, now
			}
			if lru == nil || e.at.Before(lru.at) {
				lru = e
			}
		}
		p.retiring(lru)
		ctx.Send(lru.pid, &sender.Retire{})
	}
}

// retiring takes e out of routing: its address gets a new sender from now.
func (p *publisher) retiring(e *entry) {
	if e.retiring {
		return
	}
	e.retiring = true
	if e == p.anon {
		p.anon = nil
		if p.replies {
			p.route.mu.Lock()
			p.route.anon = nil
			p.route.mu.Unlock()
		}
		return
	}
	delete(p.dedicated, e.addr)
	p.route.lanes.Delete(e.addr)
	p.nRetiring++
}

// retired stops a sender that has let go of its link, and routes what
// waited for room.
func (p *publisher) onRetired(ctx actor.Context, pid *actor.PID) {
	e := p.byPID[pid.Id]
	if e == nil {
		return
	}
	if e.retired {
		return
	}
	p.retiring(e)
	e.retired = true
	if !e.addr.IsZero() {
		p.nRetiring--
	}
	// Out of the children a drain asks (it stops before it would answer);
	// in byPID until its Terminated, which takes what is left on its lane.
	p.dropOrder(pid)
	p.retired++
	if p.draining {
		// The drain under way may have asked it already: it answers, and
		// stops with the tree.
		return
	}
	// After everything this publisher sent it: it hands those back first.
	ctx.Poison(pid)
	parked := p.parked
	p.parked = nil
	for _, m := range parked {
		if err := m.Ctx.Err(); err != nil {
			m.Answer(err)
			continue
		}
		p.publish(ctx, m)
	}
}

func spawn(ctx actor.Context, props *actor.Props, name string) *actor.PID {
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		panic(fmt.Errorf("amqpactor: spawning %s: %w", name, err))
	}
	return pid
}

func (p *publisher) children() []*actor.PID {
	pids := append([]*actor.PID(nil), p.order...)
	if p.child != nil {
		pids = append(pids, p.child)
	}
	return pids
}

func (p *publisher) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.set(protocol.StateDetached, nil)
		if !p.replies {
			p.box = &inbox{}
			p.child = spawn(ctx, newPublisher(p.env, p.table, true, p.shared, p.box), "replies")
		}
		if k := p.kept; k.conn != nil {
			// Restarted on a live connection: no ConnUp will come. The
			// session the predecessor had (or is opening) is this one's.
			p.conn, p.relay, p.sess, p.opening = k.conn, k.relay, k.sess, k.opening
			if !p.replies {
				ctx.Send(p.child, &protocol.ConnUp{Conn: k.conn})
			}
			switch {
			case p.sess != nil:
				p.sessAt = time.Now()
				p.set(protocol.StateAttached, nil)
			case p.replies:
				// It opens one on its next reply.
			case !p.opening:
				p.set(protocol.StateAttaching, nil)
				p.opening = true
				openSession(p.env, ctx.Self(), k.conn, nil)
			default:
				p.set(protocol.StateAttaching, nil)
			}
		}
		if p.replies && p.sess == nil {
			// Its parent restarted: the session the last replies
			// publisher had is this one's.
			p.shared.mu.Lock()
			p.sess, p.shared.replies = p.shared.replies, nil
			p.shared.mu.Unlock()
			if p.sess != nil {
				p.sessAt = time.Now()
				p.set(protocol.StateAttached, nil)
			}
		}
		p.kept.conn, p.kept.sess = nil, nil
	case *testhook.Crash:
		panic("amqpactor: publisher: " + m.Reason)
	case *actor.Restarting:
		p.onRestarting(ctx)
	case *protocol.ConnUp:
		p.conn = m.Conn
		p.relay = m.Conn.Features().AnonymousRelay
		if p.child != nil {
			ctx.Send(p.child, m)
		}
		// The replies publisher begins its session on its first reply.
		if !p.replies || len(p.byPID) > 0 {
			p.set(protocol.StateAttaching, nil)
			p.opening = true
			openSession(p.env, ctx.Self(), m.Conn, nil)
		}
	case *retrySession:
		p.timer = nil
		if m.conn == p.conn && p.sess == nil && !p.draining && !p.opening {
			p.opening = true
			openSession(p.env, ctx.Self(), m.conn, nil)
		}
	case *sessionResult:
		p.opening = false
		if m.conn != p.conn || p.draining {
			closeSession(p.env, m.sess)
			return
		}
		if m.err != nil {
			p.lastErr = m.err
			p.set(protocol.StateRestarting, m.err)
			p.attempt++
			p.timer = p.env.After(p.env.Backoff.Delay(p.attempt), ctx.Self(), &retrySession{conn: m.conn})
			return
		}
		p.sess, p.attempt = m.sess, 0
		p.sessAt = time.Now()
		p.set(protocol.StateAttached, nil)
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionUp{Session: p.sess})
		}
	case *sender.SessionLost:
		if m.Session != p.sess || p.sess == nil || p.draining {
			return
		}
		p.lastErr = m.Err
		p.sess = nil
		p.set(protocol.StateRestarting, m.Err)
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionDown{Err: m.Err})
		}
		if time.Since(p.sessAt) >= stableSession {
			p.lost = 0
		}
		p.lost++
		switch {
		case p.conn == nil || p.timer != nil:
		case p.lost == 1:
			p.opening = true
			openSession(p.env, ctx.Self(), p.conn, nil)
		default:
			// New sessions end as soon as they begin (a broker that
			// ends the session on every refused attach): replacing
			// them at once was a busy loop of sessions.
			p.timer = p.env.After(p.env.Backoff.Delay(p.lost-1), ctx.Self(), &retrySession{conn: p.conn})
		}
	case *protocol.ConnDown:
		p.conn, p.sess = nil, nil
		p.set(protocol.StateDetached, m.Err)
		for _, pid := range p.order {
			ctx.Send(pid, &sender.SessionDown{Err: m.Err})
		}
		if p.child != nil {
			ctx.Send(p.child, m)
		}
	case *protocol.Publish:
		if p.stopping {
			p.stoppingPublish(ctx, m)
			return
		}
		p.publish(ctx, m)
	case *wakeReplies:
		if p.stopping {
			return // what is left, its parent takes
		}
		for _, q := range p.box.take() {
			p.publish(ctx, q)
		}
	case *actor.Terminated:
		p.childGone(ctx, m.Who)
	case *sender.Retiring:
		if e := p.byPID[m.PID.Id]; e != nil {
			p.retiring(e)
		}
	case *sender.Retired:
		p.onRetired(ctx, m.PID)
	case *protocol.Drain:
		p.draining = true
		for _, q := range p.parked {
			q.Answer(protocol.ErrStopped)
		}
		p.parked = nil
		sess, env := p.sess, p.env
		p.sess = nil
		p.set(protocol.StateDetached, nil)
		drainThenClose(env, m, p.children(), sess)
	case *protocol.Describe:
		name := "publisher"
		if p.replies {
			name = "replies"
		}
		anon := uint64(0)
		if p.anon != nil {
			anon = 1
		}
		n := &protocol.Node{Name: name, Kind: "publisher", PID: ctx.Self().String(), State: p.state,
			Restarts: int(p.kept.panics.Load()),
			Counters: map[string]uint64{
				"panics":    p.kept.panics.Load(),
				"senders":   uint64(len(p.dedicated)),
				"retiring":  uint64(p.nRetiring),
				"anonymous": anon,
				"parked":    uint64(len(p.parked)),
				"retired":   p.retired,
				"max":       uint64(p.max),
			}}
		if p.lastErr != nil {
			n.LastError = p.lastErr.Error()
		}
		d := &protocol.Described{Node: n, Children: p.children()}
		for _, a := range slices.SortedFunc(maps.Keys(p.kept.failed), func(a, b address.Address) int { return strings.Compare(a.String(), b.String()) }) {
			if f := p.kept.failed[a]; time.Now().Before(f.until) {
				d.Gone = append(d.Gone, f.node)
			}
		}
		if f := p.kept.repliesFailed; f != nil && p.child == nil && time.Now().Before(f.until) {
			d.Gone = append(d.Gone, f.node)
		}
		ctx.Respond(d)
	case *actor.Stopped:
		p.set(protocol.StateStopped, nil)
	case *actor.Stopping:
		p.stopping = true
		if p.timer != nil {
			p.timer.Stop()
		}
		if !p.replies {
			// Before its children stop: they fail what waits in them
			// rather than hand it to a publisher that is going.
			p.shared.goneOnce.Do(func() { close(p.shared.gone) })
		}
		p.clearRoute()
		if p.replies && !p.shared.isGone() && !p.draining {
			// Stopped by a restarting publisher, or by its supervisor:
			// the publisher routes what was parked, and the next replies
			// publisher takes the session.
			for _, q := range p.parked {
				ctx.Send(ctx.Parent(), q)
			}
			p.parked = nil
			p.shared.mu.Lock()
			p.shared.replies = p.sess
			p.shared.mu.Unlock()
			p.sess = nil
			return
		}
		for _, q := range p.parked {
			q.Answer(protocol.ErrStopped)
		}
		p.parked = nil
		closeSession(p.env, p.sess)
		p.sess = nil
	}
}

// stoppingPublish is a publish that reaches a stopping publisher: the
// App's publisher routes it while a replies publisher stops, else nobody
// will.
func (p *publisher) stoppingPublish(ctx actor.Context, m *protocol.Publish) {
	if p.replies && !p.shared.isGone() && !p.draining {
		ctx.Send(ctx.Parent(), m)
		return
	}
	m.Answer(protocol.ErrStopped)
}

// clearRoute takes every sender of this publisher out of the table: a
// publish for them reaches the publisher's mailbox.
func (p *publisher) clearRoute() {
	p.route.lanes.Clear()
	p.route.mu.Lock()
	p.route.anon = nil
	p.route.mu.Unlock()
}

// onRestarting lets go of what this incarnation holds before the next one
// is built (see NewPublisher).
func (p *publisher) onRestarting(ctx actor.Context) {
	p.kept.panics.Add(1)
	p.kept.conn, p.kept.relay, p.kept.sess, p.kept.opening = p.conn, p.relay, p.sess, p.opening
	if p.draining {
		p.kept.conn = nil
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.restarting = true
	p.clearRoute()
	for _, q := range p.parked {
		ctx.Send(ctx.Self(), q)
	}
	p.parked = nil
	p.set(protocol.StateRestarting, nil)
}
