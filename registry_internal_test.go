package amqpactor

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/inproc"
)

// TestAppActorSystemIsSmall: the actor system an App makes for itself
// does not keep protoactor's registry of 1,024 maps of 32 shards, a fixed
// heap that every garbage collection marks; what protoactor registered as
// it started is still found.
func TestAppActorSystemIsSmall(t *testing.T) {
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	app := New(inproc.New())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	defer func() { require.NoError(t, app.Stop(ctx)) }()
	grown := int64(heap()) - int64(before)
	t.Logf("FIGURES an App started in-process holds %d KiB of heap", grown/1024)
	require.Less(t, grown, int64(3<<19), "heap held by a started App")

	for _, id := range []string{"deadletter", "eventstream"} {
		_, ok := app.sys.ProcessRegistry.GetLocal(id)
		require.True(t, ok, "protoactor's %s is registered", id)
	}
}
