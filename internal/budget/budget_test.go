package budget

import (
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const kib = 1024

func TestNilIsNoBound(t *testing.T) {
	var b *Budget
	require.Nil(t, New(0))
	require.Nil(t, New(-1))
	l := b.Link()
	require.Nil(t, l)
	require.EqualValues(t, 256, l.Grant(256), "no budget grants all")
	require.False(t, l.Arrived(10))
	l.Settled(10)
	l.Await()
	l.Close()
	require.Nil(t, l.Wake())
	require.Zero(t, b.InFlight())
	require.Zero(t, b.Limit())
}

func TestSize(t *testing.T) {
	require.EqualValues(t, 1, Size(nil))
	require.EqualValues(t, 1, Size(&amqp.Message{Value: "a value body counts one"}))
	require.EqualValues(t, 7, Size(&amqp.Message{Data: [][]byte{[]byte("abc"), []byte("defg")}}))
}

// The first grant is one credit; once a delivery is seen, grants are what
// the budget has room for at that size, reserved.
func TestSlowStartThenGrantByEstimate(t *testing.T) {
	b := New(10 * kib)
	l := b.Link()
	defer l.Close()
	require.EqualValues(t, 1, l.Grant(100), "slow start")
	require.EqualValues(t, 0, l.Grant(100), "one credit out, size still unknown")
	require.True(t, l.Arrived(kib), "the first delivery tells the settler")
	require.EqualValues(t, kib, b.InFlight())
	require.EqualValues(t, 9, l.Grant(100), "room for nine more of 1 KiB")
	require.EqualValues(t, 10*kib, b.InFlight(), "reserved counts")
	require.EqualValues(t, 0, l.Grant(100), "full")
	for range 9 {
		require.False(t, l.Arrived(kib))
	}
	require.EqualValues(t, 10*kib, b.InFlight(), "a reservation turns into the real size")
	l.Settled(kib)
	require.EqualValues(t, 9*kib, b.InFlight())
	require.EqualValues(t, 1, l.Grant(100))
	require.EqualValues(t, 10*kib, b.Peak())
}

// A delivery larger than the estimate is counted at its size and the
// credit still out re-reserved at it; nothing more is granted meanwhile.
func TestLargerDeliveryRaisesEstimate(t *testing.T) {
	b := New(10 * kib)
	l := b.Link()
	defer l.Close()
	require.EqualValues(t, 1, l.Grant(100))
	l.Arrived(kib)
	require.EqualValues(t, 4, l.Grant(4))
	require.EqualValues(t, 5*kib, b.InFlight())
	l.Arrived(2 * kib)
	// held 3 KiB, three credits at 2 KiB.
	require.EqualValues(t, 9*kib, b.InFlight())
	require.EqualValues(t, 0, l.Grant(100), "1 KiB left, the estimate is 2 KiB")
	l.Settled(kib)
	require.EqualValues(t, 1, l.Grant(100))
	require.EqualValues(t, 10*kib, b.InFlight())
}

// A link that holds nothing and has no credit gets one, even past the
// budget: so the bound is the limit plus one message per link.
func TestAlwaysOne(t *testing.T) {
	b := New(4 * kib)
	a, c := b.Link(), b.Link()
	defer a.Close()
	defer c.Close()
	require.EqualValues(t, 1, a.Grant(10))
	a.Arrived(4 * kib)
	require.EqualValues(t, 0, a.Grant(10), "full, and a holds something")
	require.EqualValues(t, 1, c.Grant(10))
	c.Arrived(4 * kib)
	require.EqualValues(t, 8*kib, b.InFlight(), "limit plus one message")
	require.EqualValues(t, 0, c.Grant(10))
	c.Settled(4 * kib)
	require.EqualValues(t, 1, c.Grant(10), "c holds nothing: one again")
	require.EqualValues(t, 0, c.Grant(10))
}

// Each link grants within its fair share, so an idle link's credit cannot
// take the whole budget.
func TestFairShare(t *testing.T) {
	b := New(8 * kib)
	a, c := b.Link(), b.Link()
	defer c.Close()
	require.EqualValues(t, 1, a.Grant(100))
	a.Arrived(kib)
	require.EqualValues(t, 3, a.Grant(100), "a's share is 4 KiB")
	require.EqualValues(t, 4*kib, a.Bytes())
	require.EqualValues(t, 1, c.Grant(100))
	c.Arrived(kib)
	require.EqualValues(t, 3, c.Grant(100))
	a.Close()
	require.EqualValues(t, 4*kib, b.InFlight(), "a's held and reserved bytes went back at once")
	require.EqualValues(t, 4, c.Grant(100), "alone now: the whole budget")
}

// Close gives back held and reserved bytes, and what its link settles or
// receives afterwards is not counted.
func TestCloseReleasesEverything(t *testing.T) {
	b := New(100 * kib)
	l := b.Link()
	l.Grant(1)
	l.Arrived(kib)
	require.EqualValues(t, 9, l.Grant(9))
	l.Arrived(kib)
	require.EqualValues(t, 10*kib, b.InFlight())
	l.Close()
	require.Zero(t, b.InFlight())
	l.Settled(kib)
	l.Arrived(kib)
	require.Zero(t, l.Grant(1))
	require.Zero(t, b.InFlight())
	l.Close()
	require.Zero(t, b.InFlight())
}

// A settler that came up short waits on Wake; a settle of another link
// wakes it, and its grant then succeeds.
func TestWakeOnSettle(t *testing.T) {
	b := New(4 * kib)
	a := b.Link()
	defer a.Close()
	a.Grant(1)
	a.Arrived(kib)
	require.EqualValues(t, 3, a.Grant(5), "alone: the whole budget")
	for range 3 {
		a.Arrived(kib)
	}
	c := b.Link()
	defer c.Close()
	require.EqualValues(t, 1, c.Grant(5), "slow start, past the budget")
	c.Arrived(kib)
	require.Zero(t, c.Grant(5), "the budget is full")
	c.Await()
	require.Zero(t, c.Grant(5), "still full after Await")
	select {
	case <-c.Wake():
		t.Fatal("woken before anything was given back")
	default:
	}
	got := make(chan uint32)
	go func() {
		<-c.Wake()
		got <- c.Grant(5)
	}()
	a.Settled(2 * kib)
	select {
	case k := <-got:
		require.EqualValues(t, 1, k, "room for one within c's share of 2 KiB")
	case <-time.After(10 * time.Second):
		t.Fatal("a settle did not wake the waiting link")
	}
}

// Many links granting, receiving and settling at once never count more
// than the limit plus one message per link, and end at zero.
func TestConcurrentBound(t *testing.T) {
	const links, size, limit = 8, kib, 16 * kib
	b := New(limit)
	var wg sync.WaitGroup
	for range links {
		l := b.Link()
		wg.Go(func() {
			defer l.Close()
			arrived := make(chan struct{}, 64)
			done := make(chan struct{})
			var pump sync.WaitGroup
			pump.Go(func() {
				for range arrived {
					l.Arrived(size)
					done <- struct{}{}
				}
			})
			held := 0
			for i := 0; i < 2000; {
				k := l.Grant(8)
				for range k {
					arrived <- struct{}{}
				}
				for range k {
					<-done
					held++
				}
				if held > 0 {
					l.Settled(size)
					held--
					i++
				}
				require.LessOrEqual(t, b.InFlight(), int64(limit+links*size))
			}
			for ; held > 0; held-- {
				l.Settled(size)
			}
			close(arrived)
			pump.Wait()
		})
	}
	wg.Wait()
	require.Zero(t, b.InFlight())
	require.LessOrEqual(t, b.Peak(), int64(limit+links*size))
	require.Greater(t, b.Peak(), int64(size), "the links did run at once")
}
