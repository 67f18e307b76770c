package amqpactor

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDestinationsAreBounded: past maxDestinations a send still gets a
// target, marked temporary for its spans, and AsyncAPI does not list it;
// uses of a kept address accumulate in its record.
func TestDestinationsAreBounded(t *testing.T) {
	var d destinations
	for i := range maxDestinations {
		require.True(t, d.target(Queue("q"+strconv.Itoa(i)), useUnsettled).kept)
	}
	over := d.target(Queue("over"), useSettled)
	require.False(t, over.kept)
	require.Equal(t, "publish over", over.publishName)

	require.Same(t, d.target(Queue("q0"), useRequest), d.target(Queue("q0"), useTransaction))
	recs := d.records()
	require.Len(t, recs, maxDestinations)
	require.Equal(t, Queue("q0"), recs[0].addr)
	require.Equal(t, Queue("q"+strconv.Itoa(maxDestinations-1)), recs[maxDestinations-1].addr)
	require.Equal(t, useUnsettled|useRequest|useTransaction, recs[0].uses.Load())
}

// TestCheckedSkipsOnlyWhatPublishChecked: App.Publish skips its address
// check only for an address it checked itself before; an address that got
// a target some other way (a partition, reached through its Partitioned
// address) is still checked.
func TestCheckedSkipsOnlyWhatPublishChecked(t *testing.T) {
	var d destinations
	q := Queue("checked")
	require.Nil(t, d.checked(q, useUnsettled))
	tg := d.target(q, useRequest)
	require.Nil(t, d.checked(q, useUnsettled))
	require.Same(t, tg, d.targetChecked(q, useUnsettled))
	require.Same(t, tg, d.checked(q, useSettled))
	require.Equal(t, useRequest|useUnsettled|useSettled, d.records()[0].uses.Load())
}
