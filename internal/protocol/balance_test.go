package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/address"
)

// A partition handed over that comes back, the census unchanged, is taken
// for a wrong census once the next read says the same: the replica pauses
// for pauseFirst and keeps what it holds; a trip again at the same census
// doubles the pause, up to pauseMax.
func TestGuardPausesOnAPartitionThatCameStraightBack(t *testing.T) {
	b := NewBalance(address.Queue("orders.replicas"), 4)
	now := time.Unix(1000, 0)
	ok, p := b.MayHandOver(now, 22, []int{0, 1}, 1)
	require.True(t, ok)
	require.Nil(t, p)
	b.HandOver(1, now, 22)
	b.HandedOver(1, now.Add(100*time.Millisecond))

	now = now.Add(time.Second)
	ok, p = b.MayHandOver(now, 22, []int{0, 1}, 1)
	require.False(t, ok, "p1 came back: not handed over again while the next read is awaited")
	require.Nil(t, p)
	now = now.Add(time.Second)
	ok, p = b.MayHandOver(now, 22, []int{0, 1}, 1)
	require.False(t, ok)
	require.Equal(t, &HandoverPause{Part: 1, Census: 22, For: pauseFirst}, p)

	// Paused: nothing handed over, and nothing said again.
	ok, p = b.MayHandOver(now.Add(pauseFirst-time.Second), 22, []int{0, 1}, 1)
	require.False(t, ok)
	require.Nil(t, p)

	// After the pause it balances again; the same again doubles the pause.
	now = now.Add(pauseFirst)
	ok, _ = b.MayHandOver(now, 22, []int{0, 1}, 1)
	require.True(t, ok)
	b.HandOver(1, now, 22)
	b.HandedOver(1, now)
	for range 2 {
		now = now.Add(time.Second)
		ok, p = b.MayHandOver(now, 22, []int{0, 1}, 1)
		require.False(t, ok)
	}
	require.Equal(t, &HandoverPause{Part: 1, Census: 22, For: 2 * pauseFirst}, p)
}

// A partition that comes back because its holder left is no evidence: the
// census read next has dropped (the leaver's census link can outlive its
// partition links by a read), and what was handed over before is void.
func TestGuardTakesAReturnAfterALeaveForNoEvidence(t *testing.T) {
	b := NewBalance(address.Queue("orders.replicas"), 12)
	now := time.Unix(1000, 0)
	ok, _ := b.MayHandOver(now, 3, []int{0, 1, 2, 3, 4, 5}, 2)
	require.True(t, ok)
	b.HandOver(4, now, 3)
	b.HandOver(5, now, 3)
	b.HandedOver(4, now)
	b.HandedOver(5, now)

	// The holder of 5 stops: 5 comes back before its census link goes.
	now = now.Add(time.Second)
	ok, p := b.MayHandOver(now, 3, []int{0, 1, 2, 3, 5}, 1)
	require.False(t, ok)
	require.Nil(t, p)
	now = now.Add(time.Second)
	ok, p = b.MayHandOver(now, 2, []int{0, 1, 2, 3, 5}, 0)
	require.True(t, ok)
	require.Nil(t, p)
	// A new replica joins: the census is 3 again, and 5 is no return.
	now = now.Add(time.Second)
	ok, p = b.MayHandOver(now, 3, []int{0, 1, 2, 3, 5}, 1)
	require.True(t, ok)
	require.Nil(t, p)
}

// More hand-overs in guardWindow than the budget pause the
// replica; a census that changes (a replica joined or left) ends the
// pause, and the budget still bounds what follows.
func TestGuardBudgetAndACensusThatChanges(t *testing.T) {
	b := NewBalance(address.Queue("orders.replicas"), 4)
	now := time.Unix(1000, 0)
	for i := range budgetPer * 4 {
		ok, p := b.MayHandOver(now, 5, nil, 1)
		require.True(t, ok, "hand-over %d", i)
		require.Nil(t, p)
		b.HandOver(i%4, now, 5)
		now = now.Add(time.Second)
	}
	ok, p := b.MayHandOver(now, 5, nil, 1)
	require.False(t, ok)
	require.Equal(t, &HandoverPause{Part: -1, Census: 5, For: pauseFirst}, p)
	ok, _ = b.MayHandOver(now.Add(time.Second), 5, nil, 1)
	require.False(t, ok, "the same census: paused")
	// The census grows (a replica joined): the pause ends, but the
	// window's budget is spent, so a surplus pauses again at once.
	ok, p = b.MayHandOver(now.Add(2*time.Second), 6, nil, 1)
	require.False(t, ok, "the budget still holds")
	require.NotNil(t, p)
	// The census drops: balance again; holding no surplus is always fine.
	ok, _ = b.MayHandOver(now.Add(3*time.Second), 4, nil, 0)
	require.True(t, ok)
	ok, _ = b.MayHandOver(now.Add(guardWindow), 4, nil, budgetPer*4)
	require.True(t, ok, "a window later the budget is whole again")
}

// A hand-over the receiver did not make after all is forgotten: the
// partition still held is no return.
func TestGuardForgetsAHandoverNotMade(t *testing.T) {
	b := NewBalance(address.Queue("orders.replicas"), 2)
	now := time.Unix(1000, 0)
	b.HandOver(1, now, 3)
	b.Handing(1, time.Time{})
	for range 2 {
		now = now.Add(time.Second)
		ok, p := b.MayHandOver(now, 3, []int{0, 1}, 1)
		require.True(t, ok)
		require.Nil(t, p)
	}
}
