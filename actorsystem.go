package amqpactor

import (
	"log/slog"

	"github.com/asynkron/protoactor-go/actor"
	cmap "github.com/orcaman/concurrent-map"
)

// registryBuckets is how many maps the process registry of an App's own
// actor system spreads its PIDs over. protoactor makes 1,024 of them, of 32
// shards each, sized for millions of actors: a fixed heap that every
// garbage collection marks. An App's actors are few, and the registry is
// read once per PID and written at spawn and stop.
const registryBuckets = 16

// newActorSystem is the actor system an App makes when it is given none,
// logging through log, with a registry of registryBuckets maps.
func newActorSystem(log *slog.Logger) *actor.ActorSystem {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return log.With("lib", "protoactor")
	}))
	// Nothing runs on the system yet: the registry is swapped before any
	// goroutine can read it, keeping what protoactor registered as it
	// started (its dead letters, its event stream).
	small := &actor.SliceMap{LocalPIDs: make([]cmap.ConcurrentMap, registryBuckets)}
	for i := range small.LocalPIDs {
		small.LocalPIDs[i] = cmap.New()
	}
	for _, bucket := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		if bucket.Count() == 0 {
			continue // Items would start a goroutine per shard
		}
		for id, p := range bucket.Items() {
			small.GetBucket(id).Set(id, p)
		}
	}
	sys.ProcessRegistry.LocalPIDs = small
	return sys
}
