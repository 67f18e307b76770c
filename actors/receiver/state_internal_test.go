package receiver

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/actors"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

var allStates = []linkState{stNew, stAttaching, stAttached, stStandby, stHandingOver, stDetached, stBackoff,
	stRestarting, stFailed, stStopped}

var allEvents = []linkEvent{evAttach, evAttached, evAttachFailed, evActive, evStandby, evHandover, evDetached,
	evBackoff, evFail, evRestart, evStop}

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

	{stAttaching, evAttachFailed}: stDetached,
	{stDetached, evAttachFailed}:  stDetached,
	{stBackoff, evAttachFailed}:   stDetached,

	{stAttached, evActive}:     stAttached,
	{stStandby, evActive}:      stAttached,
	{stAttached, evStandby}:    stStandby,
	{stStandby, evStandby}:     stStandby,
	{stHandingOver, evActive}:  stHandingOver,
	{stHandingOver, evStandby}: stHandingOver,

	{stAttached, evHandover}: stHandingOver,
	{stStandby, evHandover}:  stHandingOver,

	{stAttached, evDetached}:    stDetached,
	{stStandby, evDetached}:     stDetached,
	{stHandingOver, evDetached}: stDetached,
	{stAttaching, evDetached}:   stDetached, // drained while attaching

	{stDetached, evBackoff}: stBackoff,
	{stBackoff, evBackoff}:  stBackoff, // the next incarnation

	{stDetached, evFail}: stFailed,
}

func init() {
	legal[transition{stStopped, evRestart}] = stStopped // a restart decided after the stop
	for _, s := range allStates {
		if s != stStopped && s != stRestarting {
			legal[transition{s, evRestart}] = stRestarting
		}
		if s != stStopped {
			legal[transition{s, evStop}] = stStopped
		}
	}
}

func TestLinkStateTransitions(t *testing.T) {
	for _, from := range allStates {
		for _, ev := range allEvents {
			t.Run(from.String()+"/"+ev.String(), func(t *testing.T) {
				to, ok := from.on(ev)
				want, isLegal := legal[transition{from, ev}]
				if !isLegal {
					require.False(t, ok, "%d on %s must be refused", from, ev)
					require.Equal(t, from, to, "a refused transition keeps the state")
					return
				}
				require.True(t, ok, "%d on %s is legal", from, ev)
				require.Equal(t, want, to)
			})
		}
	}
}

// The states keep the public names the tree and StateChanges always had.
func TestLinkStateNames(t *testing.T) {
	want := map[linkState]string{
		stNew:         "",
		stAttaching:   protocol.StateAttaching,
		stAttached:    protocol.StateAttached,
		stStandby:     StateStandby,
		stHandingOver: StateHandingOver,
		stDetached:    protocol.StateDetached,
		stBackoff:     protocol.StateRestarting,
		stRestarting:  protocol.StateRestarting,
		stFailed:      actors.StateFailed,
		stStopped:     protocol.StateStopped,
	}
	require.Len(t, want, len(allStates))
	for s, name := range want {
		require.Equal(t, name, s.String())
	}
	require.Equal(t, "invalid", linkState(200).String())
	require.Equal(t, "invalid", linkEvent(200).String())
}
