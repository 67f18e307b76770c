package interop

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/protocol"
)

// fe2o3Bin is the fe2o3-amqp peer (fe2o3/src/main.rs), which
// test/interop/setup.sh builds with cargo; the peers table runs it in every
// case beside Qpid Proton and rhea, on both brokers.
const fe2o3Bin = "fe2o3/target/release/fe2o3-peer"

func fe2o3Peer(t *testing.T) peer {
	for _, p := range peers {
		if p.name == "fe2o3" {
			return p
		}
	}
	t.Fatal("no fe2o3 in the peers table")
	return peer{}
}

// TestFe2o3PartitionByGroupID: amqpactor and fe2o3 each publish one message
// per group-id to Partitioned(NAME, 4), amqpactor through Publish, fe2o3 to
// the partition queue it works out from the group-id on its own (the
// documented FNV-1a, Address.PartitionFor). Both messages of a group are
// handled from the same partition queue, the one PartitionFor names, so an
// independent publisher that keeps the contract keeps each group's order
// with ours.
func TestFe2o3PartitionByGroupID(t *testing.T) {
	p := fe2o3Peer(t)
	for _, b := range brokers {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e := newEnvOn(t, b, p)
			addr := amqpactor.Partitioned(e.name("part"), 4)
			for i := range addr.Partitions() {
				e.deleteAtEnd(addr.Partition(i).Name())
			}
			e.deleteAtEnd(protocol.CensusOf(addr).Name())

			groups := []string{"customer-1", "customer-2", "customer-3", "customer-4", "customer-5", "customer-6", "customer-7", "customer-8"}
			var mu sync.Mutex
			from := map[string]string{} // message-id -> the partition queue it was handled from
			done := make(chan struct{}, 2*len(groups))
			app := e.app(func(app *amqpactor.App) {
				_, err := app.Subscribe(addr, func(ctx context.Context, m *amqpactor.Message) error {
					q := "?"
					if part := protocol.PartitionFrom(ctx); part != nil {
						q = part.Address.Name()
					}
					mu.Lock()
					from[m.MessageID.(string)] = q
					mu.Unlock()
					done <- struct{}{}
					return nil
				})
				if err != nil {
					t.Fatalf("subscribe: %v", err)
				}
			})

			ctx := testContext(t, 45*time.Second)
			var sp []peerMsg
			for _, g := range groups {
				if err := app.Publish(ctx, addr, &amqpactor.Message{MessageID: "amqpactor-" + g, GroupID: g, Body: []byte(g)}); err != nil {
					t.Fatalf("publish %s: %v", g, err)
				}
				sp = append(sp, peerMsg{
					Properties: &peerProps{MessageID: ptr(tvStr("fe2o3-" + g)), GroupID: ptr(g)},
					Body:       dataBody([]byte(g)),
				})
			}
			var res peerResult
			p.run(t, "send", e.peerEnv(e.addr(addr.Name()+".p{p}"), "PEER_PARTITIONS", "4", "PEER_MESSAGES", specs(sp...)), &res)
			if res.Sent != len(groups) {
				t.Fatalf("fe2o3 sent %d messages, want %d", res.Sent, len(groups))
			}
			for i := range 2 * len(groups) {
				select {
				case <-done:
				case <-ctx.Done():
					t.Fatalf("handled %d of %d messages", i, 2*len(groups))
				}
			}

			mu.Lock()
			defer mu.Unlock()
			used := map[string]bool{}
			for _, g := range groups {
				want := addr.Partition(addr.PartitionFor(g)).Name()
				used[want] = true
				if q := from["amqpactor-"+g]; q != want {
					t.Errorf("group %s: amqpactor's message handled from %s, want %s", g, q, want)
				}
				if q := from["fe2o3-"+g]; q != want {
					t.Errorf("group %s: fe2o3's message handled from %s, want %s (amqpactor's partition)", g, q, want)
				}
			}
			if len(used) < 2 {
				t.Errorf("the groups fell on %d partition, want several: %v", len(used), used)
			}
		})
	}
}
