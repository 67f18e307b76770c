package sender

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/protocol"
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
	require.Len(t, want, len(allStates))
	for s, name := range want {
		require.Equal(t, name, s.String())
	}
	require.Equal(t, "invalid", linkState(200).String())
	require.Equal(t, "invalid", linkEvent(200).String())
}
