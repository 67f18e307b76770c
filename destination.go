package amqpactor

import (
	"cmp"
	"slices"
	"sync/atomic"

	"github.com/amqpactor/amqpactor/internal/cowmap"
)

// destination is what the App keeps per address it sends to: telemetry's
// target (telemetry.go) and AsyncAPI's record of how the address is used
// (asyncapi.go). They share one table only so that a send looks its
// address up once.
type destination struct {
	tel  *target
	sent *sentRecord
	// sendOK: App.Publish or App.Request checked the address itself for
	// sending (a partition's address is checked through its Partitioned
	// address).
	sendOK atomic.Bool
}

// destinations holds at most maxDestinations addresses, so a service sending
// to ever new addresses does not grow without bound; past that a send gets
// a target that is not kept, and AsyncAPI does not list its address.
type destinations struct {
	m   cowmap.Map[Address, *destination]
	n   atomic.Int64
	seq atomic.Uint64
}

const maxDestinations = 1024

// target returns addr's telemetry target, noting the use for AsyncAPI.
func (d *destinations) target(addr Address, use uint32) *target {
	if dst, ok := d.m.Load(addr); ok {
		dst.sent.note(use)
		return dst.tel
	}
	if d.n.Load() >= maxDestinations {
		return newTarget(addr, false)
	}
	dst, loaded := d.m.LoadOrStore(addr, &destination{tel: newTarget(addr, true), sent: &sentRecord{addr: addr, seq: d.seq.Add(1)}})
	if !loaded {
		d.n.Add(1)
	}
	dst.sent.note(use)
	return dst.tel
}

// checked returns addr's target when App.Publish has checked addr itself,
// noting the use; nil otherwise.
func (d *destinations) checked(addr Address, use uint32) *target {
	dst, ok := d.m.Load(addr)
	if !ok {
		return nil
	}
	if !dst.sendOK.Load() {
		return nil
	}
	dst.sent.note(use)
	return dst.tel
}

// targetChecked is target for an address App.Publish or App.Request has
// just checked.
func (d *destinations) targetChecked(addr Address, use uint32) *target {
	tg := d.target(addr, use)
	if dst, ok := d.m.Load(addr); ok && !dst.sendOK.Load() {
		dst.sendOK.Store(true)
	}
	return tg
}

// records lists AsyncAPI's records, in order of first use.
func (d *destinations) records() []*sentRecord {
	var out []*sentRecord
	d.m.Range(func(_ Address, v *destination) bool {
		out = append(out, v.sent)
		return true
	})
	slices.SortFunc(out, func(a, b *sentRecord) int { return cmp.Compare(a.seq, b.seq) })
	return out
}
