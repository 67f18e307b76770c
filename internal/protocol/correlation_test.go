package protocol

import (
	"testing"

	"github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

// AppendCorrelationKey spells every kind of id as CorrelationKey does: the
// reply pump looks waiters up with the one, callers register with the other.
func TestAppendCorrelationKeyIsCorrelationKey(t *testing.T) {
	for _, id := range []any{nil, "", "app-1", []byte{1, 2}, amqp.UUID{1}, uint64(7), int32(3)} {
		require.Equal(t, CorrelationKey(id), string(AppendCorrelationKey([]byte("junk")[:0], id)), "%#v", id)
	}
}
