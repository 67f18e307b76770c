// Package scenario holds the measured runs of docs/BENCHMARKS.md as plain
// functions, shared by the go test benchmarks of test/bench and by the A/B
// program test/bench/cmd/ab. A function runs one measured run and returns a
// Result (or an error) instead of failing a *testing.B; the benchmarks pass
// b.ResetTimer and b.StopTimer as Params.OnStart and Params.OnStop so that
// go test's own ns/op, B/op and allocs/op cover exactly the measured part.
//
// The live runs (ThroughputActor, ThroughputActorAsync, ThroughputRaw,
// RequestActor, RequestRaw, Backlog, and ThroughputActor091 and
// ThroughputRaw091 over AMQP 0-9-1) need a RabbitMQ 4 broker; they compare
// amqpactor with a raw go-amqp (or amqp091-go) pipeline of the same shape on
// the same broker, queue type, body size, credit and in-flight window. Each
// run:
//
//   - uses queues of its own (a random suffix) and deletes them afterwards
//     through the management node, whatever happened;
//   - attaches its links and sees one message (or one round trip) through
//     before the clock starts;
//   - uses one AMQP connection per side, with the sessions laid out as the
//     App lays them out (publisher and subscription in separate sessions);
//   - stops its App or closes its connection and checks, after the clock,
//     that its queue is a durable queue of the expected type holding what
//     it should: nothing (every message received was accepted), or for
//     Backlog exactly the messages not handled; anything else is an error.
//
// InprocThroughput runs amqpactor end to end on the in-process broker.
// MicroBenchmarks lists allocation micro-benchmarks for testing.Benchmark.
//
// Nothing here asserts a time: a Result reports, its reader judges.
package scenario
