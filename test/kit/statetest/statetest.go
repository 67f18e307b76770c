// Package statetest checks a link actor's state machine (the sender's and
// the receiver's linkState) against the table of its legal transitions,
// every state with every event, and records the state changes an actor
// reports.
package statetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// Enum is a small enumeration with a public name per value.
type Enum interface {
	comparable
	fmt.Stringer
}

// Machine is a state machine and the table it must follow.
type Machine[S, E Enum] struct {
	States []S
	Events []E
	// On is the transition function under test (linkState.on).
	On func(S, E) (S, bool)
	// Legal says whether ev is allowed in s, and the state it leads to.
	Legal func(s S, ev E) (S, bool)
}

// WithLifecycle adds what protoactor's Restarting and Stopped do to every
// link actor (actors.OnRestart, actors.OnStop): a restart takes any state
// but restarting to restarting and leaves stopped stopped, a stop takes any
// state but stopped to stopped.
func (m Machine[S, E]) WithLifecycle(restart, stop E, restarting, stopped S) Machine[S, E] {
	legal := m.Legal
	m.Legal = func(s S, ev E) (S, bool) {
		switch {
		case ev == restart && s == stopped:
			return stopped, true
		case ev == restart:
			return restarting, s != restarting
		case ev == stop:
			return stopped, s != stopped
		}
		return legal(s, ev)
	}
	return m
}

// Check runs On for every state and event: a legal one leads where Legal
// says, any other is refused and keeps the state.
func (m Machine[S, E]) Check(t *testing.T) {
	for _, from := range m.States {
		for _, ev := range m.Events {
			t.Run(from.String()+"/"+ev.String(), func(t *testing.T) {
				to, ok := m.On(from, ev)
				want, legal := m.Legal(from, ev)
				if !legal {
					require.False(t, ok, "%v on %s must be refused", from, ev)
					require.Equal(t, from, to, "a refused transition keeps the state")
					return
				}
				require.True(t, ok, "%v on %s is legal", from, ev)
				require.Equal(t, want, to)
			})
		}
	}
}

// Names checks the public name of every state, and that invalid (a value
// past the enumeration) is named "invalid".
func Names[S Enum](t *testing.T, states []S, want map[S]string, invalid S) {
	t.Helper()
	require.Len(t, want, len(states))
	for s, name := range want {
		require.Equal(t, name, s.String())
	}
	require.Equal(t, "invalid", invalid.String())
}

// Changes records the state changes an actor reports (Env.OnState), as
// "from>to".
type Changes struct {
	mu  sync.Mutex
	got []string
}

// On is an Env.OnState.
func (c *Changes) On(sc protocol.StateChange) {
	c.mu.Lock()
	c.got = append(c.got, sc.From+">"+sc.To)
	c.mu.Unlock()
}

// List returns what was recorded so far.
func (c *Changes) List() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}
