package amqpactor

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/actors/receiver"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// nodeStates is the state of every node of the tree, as the actors report
// it (Env.OnState), kept apart from the queue of StateChanges, which may
// drop some: Health and Ready must never miss a failure.
type nodeStates struct {
	mu    sync.Mutex
	nodes map[string]nodeState // by path
}

type nodeState struct {
	kind, state string
	err         error
}

func (s *nodeStates) record(m protocol.StateChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.To == protocol.StateStopped {
		delete(s.nodes, m.Path)
		return
	}
	if s.nodes == nil {
		s.nodes = map[string]nodeState{}
	}
	s.nodes[m.Path] = nodeState{kind: m.Kind, state: m.To, err: m.Err}
}

// get returns the last state recorded for the node at path.
func (s *nodeStates) get(path string) (nodeState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.nodes[path]
	return n, ok
}

// not lists, sorted, the nodes whose kind is one of kinds (all kinds when
// none) and whose state is not ok, with their state and why.
func (s *nodeStates) not(ok func(state string) bool, kinds ...string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for path, n := range s.nodes {
		if len(kinds) > 0 && !slices.Contains(kinds, n.kind) || ok(n.state) {
			continue
		}
		e := path + " " + n.state
		if n.err != nil {
			e += ": " + n.err.Error()
		}
		out = append(out, e)
	}
	sort.Strings(out)
	return out
}

// ErrUnhealthy is wrapped by the error Health returns.
var ErrUnhealthy = errors.New("amqpactor: unhealthy")

// ErrNotReady is wrapped by the error Ready returns while a node is not
// attached.
var ErrNotReady = errors.New("amqpactor: not ready")

// Health returns nil while nothing in the App has failed for good, and
// otherwise an error (wrapping ErrUnhealthy) that names every failed node
// and why: a subscription or connection that gave up (an attach refused for
// good, a restart budget spent), or an actor tree that stopped by itself.
// A node that recovers is healthy again. An App not started yet is healthy;
// one stopped is not. It is what a liveness probe asks (debug: /livez).
func (a *App) Health() error {
	a.mu.Lock()
	state, root, sys := a.state, a.root, a.sys
	a.mu.Unlock()
	switch {
	case state == stateNew:
		return nil
	case state == stateStopped:
		return fmt.Errorf("%w: %w", ErrUnhealthy, ErrStopped)
	}
	var why []string
	if state == stateStarted && root != nil && sys != nil {
		if _, alive := sys.ProcessRegistry.GetLocal(root.Id); !alive {
			why = append(why, "the App's actor tree has stopped")
		}
	}
	why = append(why, a.nodes.not(func(s string) bool { return s != actors.StateFailed })...)
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(why, "; "))
}

// Ready returns nil once the App has started and its connections, every
// subscription and its receiver are attached (a receiver standing by on a
// partition queue counts), and otherwise an error (wrapping ErrNotReady,
// ErrNotStarted or ErrStopped) naming those that are not, with their state
// and why. It is what a readiness probe asks (debug: /readyz).
func (a *App) Ready() error {
	a.mu.Lock()
	state := a.state
	a.mu.Unlock()
	switch state {
	case stateNew, stateStarting:
		return ErrNotStarted
	case stateStopped:
		return ErrStopped
	}
	if err := a.Health(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	// A subscription is ready when its link is: its receiver attached, or
	// standing by on a single-active-consumer queue.
	not := a.nodes.not(func(s string) bool { return s == protocol.StateAttached || s == receiver.StateStandby },
		"connection", "subscription", "receiver")
	if len(not) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrNotReady, strings.Join(not, "; "))
}
