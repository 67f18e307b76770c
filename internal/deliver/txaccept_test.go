package deliver_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// A delivery a transaction claims is the transaction's: Find names its
// link and transfer while it is held, its handler's settle then only
// returns credit (nothing on the link), a cut drain does not release it,
// and a settled delivery cannot be found or claimed.
func TestClaimedDeliveryIsTheTransactions(t *testing.T) {
	fl := newFakeLink("a", "b", "c")
	got := make(chan *protocol.Delivery, 3)
	l := start(t, fl, 8, func(d *protocol.Delivery) { got <- d })
	ds := map[string]*protocol.Delivery{}
	for range 3 {
		select {
		case d := <-got:
			ds[string(d.Raw.GetData())] = d
		case <-time.After(5 * time.Second):
			t.Fatal("the deliveries never reached the handler")
		}
	}
	a, b, c := ds["a"].Message, ds["b"].Message, ds["c"].Message

	_, err := deliver.Find(l.hs, &messages.Message{})
	require.ErrorIs(t, err, deliver.ErrNotHeld, "a message no link holds")
	ha, err := deliver.Find(l.hs, a)
	require.NoError(t, err)
	require.Same(t, fl, ha.Link())
	require.Equal(t, "a", string(ha.Raw.GetData()))
	require.NoError(t, ha.Claim())
	require.ErrorIs(t, ha.Claim(), deliver.ErrNotHeld, "claimed twice")
	hc, err := deliver.Find(l.hs, c)
	require.NoError(t, err)
	require.NoError(t, hc.Claim())

	ds["a"].Settle(messages.Outcome{Kind: messages.Modified, DeliveryFailed: true})
	ds["b"].Settle(messages.Outcome{Kind: messages.Accepted})
	require.Eventually(t, func() bool { return len(fl.events()) == 1 }, 5*time.Second, time.Millisecond)
	require.Equal(t, []string{"settle b accepted"}, fl.events(), "the claimed delivery's own settle stays off the link")
	_, err = deliver.Find(l.hs, b)
	require.ErrorIs(t, err, deliver.ErrNotHeld, "a settled delivery")

	// A drain cut short releases what handlers hold, but not c: the
	// transaction settles it.
	hard, cancelHard := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelHard()
	l.cut(t, hard)
	require.Equal(t, []string{"settle b accepted", "close"}, fl.events())
	_, err = deliver.Find(l.hs, c)
	require.ErrorIs(t, err, deliver.ErrNotHeld, "a delivery of a link that ended")
	l.wg.Wait()
}
