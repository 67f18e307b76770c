package amqptypes

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInt(t *testing.T) {
	for _, c := range []struct {
		v  any
		n  int64
		ok bool
	}{
		{int(-3), -3, true}, {int8(-8), -8, true}, {int16(300), 300, true}, {int32(-1 << 31), -1 << 31, true},
		{int64(math.MinInt64), math.MinInt64, true}, {uint8(255), 255, true}, {uint16(65535), 65535, true},
		{uint32(math.MaxUint32), math.MaxUint32, true}, {uint(7), 7, true}, {uint64(math.MaxInt64), math.MaxInt64, true},
		{uint64(math.MaxUint64), math.MaxInt64, false}, {uint(math.MaxUint64), math.MaxInt64, false},
		{"1", 0, false}, {float64(1), 0, false}, {nil, 0, false},
	} {
		n, ok := Int(c.v)
		require.Equal(t, c.n, n, "%T %v", c.v, c.v)
		require.Equal(t, c.ok, ok, "%T %v", c.v, c.v)
	}
}

func TestIntRefusesNamedTypes(t *testing.T) {
	type count int32
	_, ok := Int(count(1))
	require.False(t, ok)
	_, ok = Int(time.Second)
	require.False(t, ok)
}
