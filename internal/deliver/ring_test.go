package deliver_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/deliver"
	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// Handlers settle at random while transactions find and claim deliveries
// and a drain is cut short under them: no delivery is settled on the link
// twice (by its handler and released by the cut), a claimed one not at
// all, and one that is neither (taken by the pump as the cut came) is
// left to the link's close, which gives it back to the broker.
func TestHeldDeliveriesUnderAConcurrentCut(t *testing.T) {
	for run := range 5 {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			const n = 2000
			fl := &fakeLink{msgs: make(chan *amqp.Message, n), done: make(chan struct{})}
			for i := range n {
				fl.msgs <- amqp.NewMessage([]byte(fmt.Sprint("m", i)))
			}
			var (
				mu       sync.Mutex
				taken    = map[string]bool{}
				claimed  = map[string]bool{}
				handlers sync.WaitGroup
				hs       deliver.Holders // set once started; deliveries may come before
				started  = make(chan struct{})
			)
			route := func(d *protocol.Delivery) {
				body := string(d.Raw.GetData())
				mu.Lock()
				taken[body] = true
				mu.Unlock()
				handlers.Go(func() {
					<-started
					rng := rand.New(rand.NewPCG(uint64(len(body)), uint64(time.Now().UnixNano())))
					if rng.IntN(10) == 0 {
						if h, err := deliver.Find(hs, d.Message); err == nil && h.Claim() == nil {
							mu.Lock()
							claimed[body] = true
							mu.Unlock()
						}
					}
					if rng.IntN(4) == 0 {
						time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond) // a slow handler, not synchronisation
					}
					d.Settle(messages.Outcome{Kind: messages.Accepted})
				})
			}
			l := start(t, fl, 64, route)
			hs = l.hs
			close(started)
			require.Eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(taken) >= n/4
			}, 5*time.Second, time.Millisecond)
			hard, cancelHard := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancelHard()
			time.Sleep(time.Millisecond) // the drain's graceful part
			l.cut(t, hard)
			// Once the pump has returned, no handler can start after the
			// wait.
			l.wg.Wait()
			handlers.Wait()

			settled := map[string]int{}
			for _, e := range fl.events() {
				if f := strings.Fields(e); len(f) == 3 && f[0] == "settle" {
					settled[f[1]]++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			left := 0
			for body := range taken {
				switch {
				case claimed[body]:
					require.Zero(t, settled[body], "%s was claimed by a transaction, yet settled on the link", body)
				case settled[body] == 0:
					left++
				default:
					require.Equal(t, 1, settled[body], "settles of %s", body)
				}
			}
			for body := range settled {
				require.True(t, taken[body], "%s settled but never taken", body)
			}
			require.Less(t, left, 8, "deliveries neither settled nor released: only those the pump took as the cut came")
			t.Logf("taken %d, claimed %d, left to the link's close %d", len(taken), len(claimed), left)
		})
	}
}
