package receiver

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/statetest"
)

var allStates = []linkState{stNew, stAttaching, stAttached, stStandby, stDegraded, stHandingOver, stDetached,
	stBackoff, stRestarting, stFailed, stStopped}

var allEvents = []linkEvent{evAttach, evAttached, evShaky, evSettled, evAttachFailed, evActive, evStandby,
	evHandover, evDetached, evBackoff, evFail, evRestart, evStop}

type transition struct {
	from linkState
	ev   linkEvent
}

// legal is every transition a receiver may make, and where it leads.
var legal = map[transition]linkState{
	{stNew, evAttach}:      stAttaching,
	{stDetached, evAttach}: stAttaching, // after a hand-over
	{stBackoff, evAttach}:  stAttaching,

	{stAttaching, evAttached}: stAttached,
	{stDetached, evAttached}:  stAttached, // answers that come late
	{stBackoff, evAttached}:   stAttached,

	// After a short-lived link: degraded until the new one settles.
	{stAttaching, evShaky}:  stDegraded,
	{stDetached, evShaky}:   stDegraded,
	{stBackoff, evShaky}:    stDegraded,
	{stDegraded, evSettled}: stAttached,

	{stAttaching, evAttachFailed}: stDetached,
	{stDetached, evAttachFailed}:  stDetached,
	{stBackoff, evAttachFailed}:   stDetached,

	{stAttached, evActive}:     stAttached,
	{stStandby, evActive}:      stAttached,
	{stAttached, evStandby}:    stStandby,
	{stStandby, evStandby}:     stStandby,
	{stHandingOver, evActive}:  stHandingOver,
	{stHandingOver, evStandby}: stHandingOver,
	{stDegraded, evActive}:     stDegraded,
	{stDegraded, evStandby}:    stDegraded,

	{stAttached, evHandover}: stHandingOver,
	{stStandby, evHandover}:  stHandingOver,
	{stDegraded, evHandover}: stHandingOver,

	{stAttached, evDetached}:    stDetached,
	{stStandby, evDetached}:     stDetached,
	{stDegraded, evDetached}:    stDetached,
	{stHandingOver, evDetached}: stDetached,
	{stAttaching, evDetached}:   stDetached, // drained while attaching

	{stDetached, evBackoff}: stBackoff,
	{stBackoff, evBackoff}:  stBackoff, // the next incarnation

	{stDetached, evFail}: stFailed,
}

func TestLinkStateTransitions(t *testing.T) {
	isLegal := func(s linkState, ev linkEvent) (linkState, bool) { to, ok := legal[transition{s, ev}]; return to, ok }
	statetest.Machine[linkState, linkEvent]{States: allStates, Events: allEvents, On: linkState.on, Legal: isLegal}.
		WithLifecycle(evRestart, evStop, stRestarting, stStopped).Check(t)
}

// The states keep the public names the tree and StateChanges always had.
func TestLinkStateNames(t *testing.T) {
	want := map[linkState]string{
		stNew:         "",
		stAttaching:   protocol.StateAttaching,
		stAttached:    protocol.StateAttached,
		stStandby:     StateStandby,
		stDegraded:    StateDegraded,
		stHandingOver: StateHandingOver,
		stDetached:    protocol.StateDetached,
		stBackoff:     protocol.StateRestarting,
		stRestarting:  protocol.StateRestarting,
		stFailed:      actors.StateFailed,
		stStopped:     protocol.StateStopped,
	}
	statetest.Names(t, allStates, want, linkState(200))
	require.Equal(t, "invalid", linkEvent(200).String())
}
