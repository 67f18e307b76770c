package amqpactor

import (
	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// partitionOf is the partition queue a publish to addr goes to when addr
// is Partitioned (else addr): the group-id's partition, or, for a message
// without one, the next partition in this App's round robin.
func (a *App) partitionOf(addr Address, groupID string) Address {
	n := addr.Partitions()
	if n == 0 {
		return addr
	}
	if groupID != "" {
		return addr.Partition(addr.PartitionFor(groupID))
	}
	return addr.Partition(int((a.partRR.Add(1) - 1) % uint64(n)))
}

// groupOf is the group-id of a message mapped already.
func groupOf(m *amqp.Message) string {
	if m == nil || m.Properties == nil || m.Properties.GroupID == nil {
		return ""
	}
	return *m.Properties.GroupID
}

// partitionSubs makes one subscription per partition queue of s's
// Partitioned address, each a copy of s's spec on its queue. The names are
// given later, under the App's lock, as s's is.
func partitionSubs(s *Subscription) []*Subscription {
	addr := s.spec.Address
	parts := make([]*Subscription, addr.Partitions())
	// The partitions' receivers share what they hold, to hand over what is
	// more than this replica's share (actors/receiver, balance.go).
	bal := protocol.NewBalance(protocol.CensusOf(addr), len(parts))
	for i := range parts {
		spec := *s.spec
		spec.Address = addr.Partition(i)
		spec.Balance, spec.Partition = bal, i
		parts[i] = &Subscription{app: s.app, spec: &spec, info: s.info}
	}
	return parts
}
