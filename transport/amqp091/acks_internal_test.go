package amqp091

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// broker is what RabbitMQ keeps of a channel's deliveries: the tags still
// unacknowledged, and the rule that a multiple acknowledgement takes every
// one of them up to its tag.
type broker struct {
	t           *testing.T
	outstanding map[uint64]bool
	settledByUs map[uint64]bool // what the runtime settled (ack or nack)
	frames      int
}

func (b *broker) ack(tag uint64, multiple bool) error {
	b.frames++
	require.True(b.t, b.outstanding[tag], "ack of tag %d, which is not outstanding", tag)
	if !multiple {
		delete(b.outstanding, tag)
		return nil
	}
	for t := range b.outstanding {
		if t <= tag {
			require.True(b.t, b.settledByUs[t], "a multiple ack up to %d took tag %d, which the runtime has not settled", tag, t)
			delete(b.outstanding, t)
		}
	}
	return nil
}

// TestAckerNeverAcksWhatIsNotSettled: in any order of acknowledgements,
// negative acknowledgements and deliveries never settled (held back for
// the close, or still being handled), a multiple acknowledgement takes
// only settled tags, and at the end exactly the unsettled ones are left.
func TestAckerNeverAcksWhatIsNotSettled(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			n := uint64(1 + rng.IntN(300))
			b := &broker{t: t, outstanding: map[uint64]bool{}, settledByUs: map[uint64]bool{}}
			for tag := uint64(1); tag <= n; tag++ {
				b.outstanding[tag] = true
			}
			a := newAcker(&chanAcks{}, b.ack)
			order := rng.Perm(int(n))
			unsettled := map[uint64]bool{}
			for i, p := range order {
				tag := uint64(p + 1)
				switch r := rng.IntN(10); {
				case r == 0:
					unsettled[tag] = true // never settled
				case r == 2:
					// Settled by a transaction: its own basic.ack, and
					// then the acker must not take it again.
					b.settledByUs[tag] = true
					require.NoError(t, b.ack(tag, false))
					a.ch.Lock()
					a.settledLocked([]uint64{tag})
					a.ch.Unlock()
				case r == 1:
					b.settledByUs[tag] = true
					require.NoError(t, a.nack(tag, func() error { b.frames++; delete(b.outstanding, tag); return nil }))
				default:
					b.settledByUs[tag] = true
					a.ack(tag)
				}
				if rng.IntN(4) == 0 || i == len(order)-1 {
					require.NoError(t, a.flush())
				}
			}
			require.Equal(t, unsettled, b.outstanding, "left unacknowledged")
		})
	}
}

// TestAckerCoalesces: a run of acknowledgements in order is one frame.
func TestAckerCoalesces(t *testing.T) {
	b := &broker{t: t, outstanding: map[uint64]bool{}, settledByUs: map[uint64]bool{}}
	for tag := uint64(1); tag <= 100; tag++ {
		b.outstanding[tag], b.settledByUs[tag] = true, true
	}
	a := newAcker(&chanAcks{}, b.ack)
	for tag := uint64(1); tag <= 50; tag++ {
		a.ack(tag)
	}
	require.NoError(t, a.flush())
	require.Equal(t, 1, b.frames, "50 acknowledgements in order")
	// 52..60 past the gap at 51: one each; then 51 closes the gap.
	for tag := uint64(52); tag <= 60; tag++ {
		a.ack(tag)
	}
	require.NoError(t, a.flush())
	require.Equal(t, 10, b.frames)
	a.ack(51)
	for tag := uint64(61); tag <= 100; tag++ {
		a.ack(tag)
	}
	require.NoError(t, a.flush())
	require.Equal(t, 11, b.frames, "51 and 61..100 in one")
	require.Empty(t, b.outstanding)
}
