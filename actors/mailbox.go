package actors

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"
)

// mailbox is the mailbox of every actor of an App (Env.Props). It keeps
// the rules of protoactor's unbounded mailbox (system messages first, none
// but system messages while suspended, a failure escalated with the message
// it happened on, a yield every Throughput messages) without its per-post
// allocations: its run function is bound once instead of at every
// scheduling, and the run takes every user message posted since its last
// take under one lock instead of one lock each. Deliveries and dispositions
// cross three mailboxes, which made those allocations a cost per message.
type mailbox struct {
	mu  sync.Mutex
	in  []any // user messages posted and not taken yet, in order
	sys []any // system messages not taken yet, in order

	// out and next are ONLY touched by the run (one at a time): the user
	// messages it took from in, and the first of them not invoked yet.
	out  []any
	next int

	users, systems atomic.Int32 // messages posted and not invoked
	running        atomic.Bool
	suspended      atomic.Bool

	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	process    func() // m.processMessages, bound once
}

var _ actor.Mailbox = (*mailbox)(nil)

// maxKeptBuffer is the capacity past which a drained buffer is dropped
// rather than reused, so that one burst does not pin its size for good.
const maxKeptBuffer = 4096

func newMailbox() actor.Mailbox {
	m := &mailbox{}
	m.process = m.processMessages
	return m
}

func (m *mailbox) PostUserMessage(message any) {
	// protoactor's mailboxes post a batch's messages one by one, then the
	// batch itself; this one does the same.
	if b, ok := message.(actor.MessageBatch); ok {
		for _, msg := range b.GetMessages() {
			m.PostUserMessage(msg)
		}
	}
	if e, ok := message.(*actor.MessageEnvelope); ok {
		if b, ok := e.Message.(actor.MessageBatch); ok {
			for _, msg := range b.GetMessages() {
				m.PostUserMessage(msg)
			}
		}
	}
	m.mu.Lock()
	m.in = append(m.in, message)
	m.mu.Unlock()
	m.users.Add(1)
	m.schedule()
}

func (m *mailbox) PostSystemMessage(message any) {
	m.mu.Lock()
	m.sys = append(m.sys, message)
	m.mu.Unlock()
	m.systems.Add(1)
	m.schedule()
}

func (m *mailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *mailbox) Start() {}

func (m *mailbox) UserMessageCount() int { return int(m.users.Load()) }

func (m *mailbox) schedule() {
	if m.running.CompareAndSwap(false, true) {
		m.dispatcher.Schedule(m.process)
	}
}

func (m *mailbox) processMessages() {
	for {
		m.run()
		m.running.Store(false)
		// A post that came after the run's last look found it running and
		// did not schedule: look again.
		if m.systems.Load() == 0 && (m.suspended.Load() || m.users.Load() == 0) {
			return
		}
		if !m.running.CompareAndSwap(false, true) {
			return // a post scheduled a run of its own
		}
	}
}

func (m *mailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	limit := m.dispatcher.Throughput()
	for i := 0; ; i++ {
		if i > limit {
			i = 0
			runtime.Gosched()
		}
		if msg = m.popSystem(); msg != nil {
			m.systems.Add(-1)
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended.Store(true)
			case *actor.ResumeMailbox:
				m.suspended.Store(false)
			default:
				m.invoker.InvokeSystemMessage(msg)
			}
			continue
		}
		if m.suspended.Load() {
			return
		}
		if msg = m.popUser(); msg == nil {
			return
		}
		m.users.Add(-1)
		m.invoker.InvokeUserMessage(msg)
	}
}

func (m *mailbox) popSystem() any {
	if m.systems.Load() == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.sys) == 0 {
		return nil
	}
	msg := m.sys[0]
	m.sys[0] = nil
	m.sys = m.sys[1:]
	if len(m.sys) == 0 {
		m.sys = nil // the next post starts a fresh slice, not one that crept forward
	}
	return msg
}

func (m *mailbox) popUser() any {
	if m.next == len(m.out) {
		if m.users.Load() == 0 {
			return nil
		}
		spent := m.out[:0]
		if cap(spent) > maxKeptBuffer {
			spent = nil
		}
		m.mu.Lock()
		m.out, m.in = m.in, spent
		m.mu.Unlock()
		m.next = 0
		if len(m.out) == 0 {
			return nil
		}
	}
	msg := m.out[m.next]
	m.out[m.next] = nil
	m.next++
	return msg
}
