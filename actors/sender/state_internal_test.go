package sender

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/test/kit/statetest"
)

var allStates = []linkState{stNew, stDetached, stRefused, stAttaching, stAttached, stBackoff, stRestarting, stRetiring, stStopped}

var allEvents = []linkEvent{evStart, evAttach, evAttached, evAttachFailed, evRefused, evBackoff, evDetached, evRetire, evRestart, evStop}

type transition struct {
	from linkState
	ev   linkEvent
}

// legal is every transition a sender may make, and where it leads.
var legal = map[transition]linkState{
	{stNew, evStart}: stDetached,

	{stDetached, evAttach}:  stAttaching,
	{stRefused, evAttach}:   stAttaching,
	{stBackoff, evAttach}:   stAttaching,
	{stAttaching, evAttach}: stAttaching, // on a new session

	{stAttaching, evAttached}: stAttached,
	{stDetached, evAttached}:  stAttached, // answers that come late
	{stRefused, evAttached}:   stAttached,
	{stBackoff, evAttached}:   stAttached,

	{stAttaching, evAttachFailed}: stDetached,
	{stDetached, evAttachFailed}:  stDetached,
	{stRefused, evAttachFailed}:   stDetached,
	{stBackoff, evAttachFailed}:   stDetached,

	{stDetached, evRefused}: stRefused,
	{stDetached, evBackoff}: stBackoff,

	{stAttached, evDetached}:  stDetached,
	{stAttaching, evDetached}: stDetached,

	{stDetached, evRetire}:  stRetiring,
	{stRefused, evRetire}:   stRetiring,
	{stAttaching, evRetire}: stRetiring,
	{stAttached, evRetire}:  stRetiring,
	{stBackoff, evRetire}:   stRetiring,
}

func TestLinkStateTransitions(t *testing.T) {
	isLegal := func(s linkState, ev linkEvent) (linkState, bool) { to, ok := legal[transition{s, ev}]; return to, ok }
	statetest.Machine[linkState, linkEvent]{States: allStates, Events: allEvents, On: linkState.on, Legal: isLegal}.
		WithLifecycle(evRestart, evStop, stRestarting, stStopped).Check(t)
}

// The states keep the public names the tree and StateChanges always had.
func TestLinkStateNames(t *testing.T) {
	want := map[linkState]string{
		stNew:        "",
		stDetached:   protocol.StateDetached,
		stRefused:    protocol.StateDetached,
		stAttaching:  protocol.StateAttaching,
		stAttached:   protocol.StateAttached,
		stBackoff:    protocol.StateRestarting,
		stRestarting: protocol.StateRestarting,
		stRetiring:   StateRetiring,
		stStopped:    protocol.StateStopped,
	}
	statetest.Names(t, allStates, want, linkState(200))
	require.Equal(t, "invalid", linkEvent(200).String())
}
