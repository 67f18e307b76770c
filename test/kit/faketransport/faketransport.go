// Package faketransport is a scripted transport for unit tests of the
// actors: a Connector, Conn, Session, Sender and Receiver that record what
// the code under test does and fail on demand, the peer's way (a dial that
// fails, a dropped connection, a session or link the peer ends, a refused
// attach). Errors look like go-amqp's, wrapped as the seam wraps them.
//
// Every method is safe for concurrent use. Nothing here starts a goroutine.
package faketransport

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/messages"
	"github.com/amqpactor/amqpactor/transport"
)

// Log records events in order ("dial", "conn.close", "session.close",
// "sender.close", "receiver.close"), shared by everything a Connector makes.
type Log struct {
	mu     sync.Mutex
	events []string
}

func (l *Log) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

// Events returns a copy of the events so far.
func (l *Log) Events() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// Connector dials fake connections. The zero value is ready to use.
type Connector struct {
	// Features is what every new Conn reports.
	Features transport.Features
	// Begin, when set, makes Conn a transport.Transactional.
	Begin func(ctx context.Context) (transport.Txn, error)
	// OnSession, when set, is called with every new session before
	// NewSession returns it (e.g. to end it at once).
	OnSession func(*Session)
	Log       Log

	dials atomic.Int64
	mu    sync.Mutex
	fails []error
	conns []*Conn
}

var _ transport.Connector = (*Connector)(nil)

// FailDials makes the next len(errs) Connects fail with errs, in order.
func (c *Connector) FailDials(errs ...error) {
	c.mu.Lock()
	c.fails = append(c.fails, errs...)
	c.mu.Unlock()
}

// ClearFails forgets the failures FailDials queued and no dial took yet.
func (c *Connector) ClearFails() {
	c.mu.Lock()
	c.fails = nil
	c.mu.Unlock()
}

// Dials counts Connect calls, failed ones included.
func (c *Connector) Dials() int { return int(c.dials.Load()) }

// Conns returns the connections made so far, oldest first.
func (c *Connector) Conns() []*Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Conn(nil), c.conns...)
}

// Last returns the newest connection, or nil.
func (c *Connector) Last() *Conn {
	cs := c.Conns()
	if len(cs) == 0 {
		return nil
	}
	return cs[len(cs)-1]
}

func (c *Connector) Dialect() address.Dialect { return address.Artemis }
func (c *Connector) String() string           { return "fake" }

func (c *Connector) Connect(ctx context.Context) (transport.Conn, error) {
	c.dials.Add(1)
	c.Log.add("dial")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.fails) > 0 {
		err := c.fails[0]
		c.fails = c.fails[1:]
		return nil, err
	}
	conn := &Conn{c: c, done: make(chan struct{})}
	c.conns = append(c.conns, conn)
	return conn, nil
}

// Conn is a fake connection.
type Conn struct {
	c    *Connector
	done chan struct{}

	mu       sync.Mutex
	ended    bool
	err      error // Err
	cause    error // what its links report
	sessions []*Session
	fails    []error
}

var (
	_ transport.Conn          = (*Conn)(nil)
	_ transport.Transactional = (*Conn)(nil)
)

// FailSessions makes the next len(errs) NewSession calls fail with errs.
func (c *Conn) FailSessions(errs ...error) {
	c.mu.Lock()
	c.fails = append(c.fails, errs...)
	c.mu.Unlock()
}

// Sessions returns the sessions begun so far, oldest first.
func (c *Conn) Sessions() []*Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Session(nil), c.sessions...)
}

// Closed reports whether the connection has ended (Close or Drop).
func (c *Conn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Drop ends the connection as a lost one: Done is closed, Err returns an
// *amqp.ConnError whose RemoteErr says description, and every link fails
// with it.
func (c *Conn) Drop(description string) {
	e := &amqp.ConnError{RemoteErr: &amqp.Error{Condition: amqp.ErrCondConnectionForced, Description: description}}
	c.end(e, e)
}

func (c *Conn) end(cause, err error) {
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return
	}
	c.ended, c.cause, c.err = true, cause, err
	ss := c.sessions
	c.mu.Unlock()
	for _, s := range ss {
		s.end(cause)
	}
	close(c.done)
}

func (c *Conn) NewSession(ctx context.Context) (transport.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.ended {
		c.mu.Unlock()
		return nil, c.cause
	}
	if len(c.fails) > 0 {
		err := c.fails[0]
		c.fails = c.fails[1:]
		c.mu.Unlock()
		return nil, err
	}
	s := &Session{conn: c}
	c.sessions = append(c.sessions, s)
	c.mu.Unlock()
	if f := c.c.OnSession; f != nil {
		f(s)
	}
	return s, nil
}

func (c *Conn) Done() <-chan struct{} { return c.done }

func (c *Conn) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Conn) Features() transport.Features { return c.c.Features }

func (c *Conn) Close(context.Context) error {
	c.c.Log.add("conn.close")
	c.end(&amqp.ConnError{}, nil)
	return nil
}

// Begin calls the Connector's Begin; without one it fails with
// transport.ErrNotSupported.
func (c *Conn) Begin(ctx context.Context) (transport.Txn, error) {
	if c.c.Begin == nil {
		return nil, transport.ErrNotSupported
	}
	return c.c.Begin(ctx)
}

// closeFlag records whether the code under test closed a fake session
// or link.
type closeFlag struct{ closed atomic.Bool }

// Closed reports whether the code under test closed it.
func (f *closeFlag) Closed() bool { return f.closed.Load() }

// closeBy records the Close as event in log, then that it was called.
func (f *closeFlag) closeBy(event string, log *Log) {
	log.add(event)
	f.closed.Store(true)
}

// Session is a fake session.
type Session struct {
	conn *Conn

	mu    sync.Mutex
	ended bool
	cause error
	closeFlag
	refuse    map[address.Address]error
	senders   []*Sender
	receivers []*Receiver
	attaches  int
}

var _ transport.Session = (*Session)(nil)

// Attaches counts NewSender and NewReceiver calls, failed ones included.
func (s *Session) Attaches() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attaches
}

// End ends the session from the peer's side, as go-amqp reports it: every
// link's operations, and every later attach, fail with a
// *transport.LinkError wrapping an *amqp.SessionError whose RemoteErr is
// {condition, description}.
func (s *Session) End(condition, description string) {
	s.end(&amqp.SessionError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}})
}

// Refuse makes every later attach to a fail with a *transport.LinkError
// {Op: "attach"} wrapping an *amqp.LinkError with RemoteErr {condition,
// description}.
func (s *Session) Refuse(a address.Address, condition, description string) {
	s.mu.Lock()
	if s.refuse == nil {
		s.refuse = map[address.Address]error{}
	}
	s.refuse[a] = &amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}}
	s.mu.Unlock()
}

func (s *Session) end(cause error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended, s.cause = true, cause
	ss, rs := s.senders, s.receivers
	s.mu.Unlock()
	for _, l := range ss {
		l.end(cause)
	}
	for _, r := range rs {
		r.end(cause)
	}
}

// Senders returns the senders attached on the session, oldest first.
func (s *Session) Senders() []*Sender {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Sender(nil), s.senders...)
}

// Receivers returns the receivers attached on the session, oldest first.
func (s *Session) Receivers() []*Receiver {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Receiver(nil), s.receivers...)
}

func (s *Session) check(ctx context.Context, a address.Address) error {
	s.attaches++
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.ended {
		return &transport.LinkError{Address: a.String(), Op: "attach", Err: s.cause}
	}
	if err := s.refuse[a]; err != nil {
		return &transport.LinkError{Address: a.String(), Op: "attach", Err: err}
	}
	return nil
}

func (s *Session) NewSender(ctx context.Context, o transport.SenderOptions) (transport.Sender, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, o.Address); err != nil {
		return nil, err
	}
	l := &Sender{log: &s.conn.c.Log, addr: o.Address, Opts: o}
	s.senders = append(s.senders, l)
	return l, nil
}

func (s *Session) NewReceiver(ctx context.Context, o transport.ReceiverOptions) (transport.Receiver, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, o.Address); err != nil {
		return nil, err
	}
	name := o.Address.Name()
	if o.Dynamic {
		name = "fake.reply"
	}
	r := &Receiver{log: &s.conn.c.Log, addr: o.Address, name: name, Opts: o,
		ch: make(chan *amqp.Message, 1024), ended: make(chan struct{})}
	s.receivers = append(s.receivers, r)
	return r, nil
}

func (s *Session) Close(context.Context) error {
	s.closeBy("session.close", &s.conn.c.Log)
	s.end(&amqp.SessionError{})
	return nil
}

// Sender is a fake sender link. Every Send is accepted unless Outcome says
// otherwise.
type Sender struct {
	log  *Log
	addr address.Address
	// Opts are the options it was attached with.
	Opts transport.SenderOptions

	mu    sync.Mutex
	cause error
	closeFlag
	sent    []*amqp.Message
	outcome *messages.Outcome
	blocked chan struct{} // closed by Block's release
	entered chan struct{}
}

var _ transport.Sender = (*Sender)(nil)

// Block makes every later Send wait, whatever its context, until release
// is called: a peer that grants no credit. entered gets a value for each
// Send that starts waiting (it holds up to 64).
func (l *Sender) Block() (entered <-chan struct{}, release func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, e := make(chan struct{}), make(chan struct{}, 64)
	l.blocked, l.entered = b, e
	var once sync.Once
	return e, func() { once.Do(func() { close(b) }) }
}

// Detach ends the link from the peer's side: Send fails with a
// *transport.LinkError wrapping an *amqp.LinkError with RemoteErr
// {condition, description}.
func (l *Sender) Detach(condition, description string) {
	l.end(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}})
}

// Answer makes every later unsettled Send yield o.
func (l *Sender) Answer(o messages.Outcome) {
	l.mu.Lock()
	l.outcome = &o
	l.mu.Unlock()
}

func (l *Sender) end(cause error) {
	l.mu.Lock()
	if l.cause == nil {
		l.cause = cause
	}
	l.mu.Unlock()
}

// Sent returns what was sent on the link, in order.
func (l *Sender) Sent() []*amqp.Message {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]*amqp.Message(nil), l.sent...)
}

// Ended reports whether the link has ended, for any reason.
func (l *Sender) Ended() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cause != nil
}

type receipt messages.Outcome

func (r receipt) Wait(context.Context) (messages.Outcome, error) { return messages.Outcome(r), nil }
func (r receipt) Resolved() (messages.Outcome, bool)             { return messages.Outcome(r), true }

func (l *Sender) Send(ctx context.Context, m *amqp.Message, settled bool) (transport.Receipt, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if b := l.blocked; b != nil {
		select {
		case l.entered <- struct{}{}:
		default:
		}
		l.mu.Unlock()
		<-b
		l.mu.Lock()
	}
	defer l.mu.Unlock()
	if l.cause != nil {
		return nil, &transport.LinkError{Address: l.addr.String(), Op: "send", Err: l.cause}
	}
	l.sent = append(l.sent, m)
	if settled {
		return nil, nil
	}
	o := messages.Outcome{Kind: messages.Accepted}
	if l.outcome != nil {
		o = *l.outcome
	}
	return receipt(o), nil
}

func (l *Sender) Address() string { return l.addr.Name() }

func (l *Sender) Close(context.Context) error {
	l.closeBy("sender.close", l.log)
	l.end(&amqp.LinkError{})
	return nil
}

// Receiver is a fake receiver link: Deliver queues a transfer for Receive.
type Receiver struct {
	log  *Log
	addr address.Address
	name string
	// Opts are the options it was attached with.
	Opts transport.ReceiverOptions

	ch     chan *amqp.Message
	ended  chan struct{}
	credit atomic.Int64

	mu    sync.Mutex
	cause error
	closeFlag
	settled []Settled
}

// Settled is one Settle call.
type Settled struct {
	Message *amqp.Message
	Outcome messages.Outcome
}

var _ transport.Receiver = (*Receiver)(nil)

// ErrLinkEnded is wrapped by Settle on a link that has ended.
var ErrLinkEnded = errors.New("faketransport: link ended")

// Deliver queues m for Receive (it blocks once 1,024 wait); false when the
// link has ended.
func (r *Receiver) Deliver(m *amqp.Message) bool {
	select {
	case <-r.ended:
		return false
	default:
	}
	r.ch <- m
	return true
}

// Detach ends the link from the peer's side: Receive fails with a
// *transport.LinkError wrapping an *amqp.LinkError with RemoteErr
// {condition, description}.
func (r *Receiver) Detach(condition, description string) {
	r.end(&amqp.LinkError{RemoteErr: &amqp.Error{Condition: amqp.ErrCond(condition), Description: description}})
}

func (r *Receiver) end(cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return
	}
	r.cause = cause
	close(r.ended)
}

// Credit is the credit issued so far, minus what Receive took.
func (r *Receiver) Credit() int64 { return r.credit.Load() }

// Settlements returns the Settle calls so far, in order.
func (r *Receiver) Settlements() []Settled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Settled(nil), r.settled...)
}

func (r *Receiver) Address() string { return r.name }

func (r *Receiver) IssueCredit(n uint32) error {
	if err := r.err("credit"); err != nil {
		return err
	}
	r.credit.Add(int64(n))
	return nil
}

func (r *Receiver) err(op string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cause != nil {
		return &transport.LinkError{Address: r.addr.String(), Op: op, Err: r.cause}
	}
	return nil
}

func (r *Receiver) Receive(ctx context.Context) (*amqp.Message, error) {
	select {
	case <-r.ended:
		return nil, r.err("receive")
	default:
	}
	select {
	case m := <-r.ch:
		r.credit.Add(-1)
		return m, nil
	case <-r.ended:
		return nil, r.err("receive")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (r *Receiver) Settle(ctx context.Context, m *amqp.Message, o messages.Outcome) error {
	if err := r.err("settle"); err != nil {
		return errors.Join(ErrLinkEnded, err)
	}
	r.mu.Lock()
	r.settled = append(r.settled, Settled{Message: m, Outcome: o})
	r.mu.Unlock()
	return nil
}

func (r *Receiver) Close(context.Context) error {
	r.closeBy("receiver.close", r.log)
	r.end(&amqp.LinkError{})
	return nil
}
