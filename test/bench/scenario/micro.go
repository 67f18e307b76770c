package scenario

import (
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/internal/protocol"
	"github.com/amqpactor/amqpactor/messages"
)

// Micro is one allocation micro-benchmark of a hot path, for
// testing.Benchmark (or b.Run).
type Micro struct {
	Name string
	F    func(b *testing.B)
}

// DispatchNote says where the micro-benchmark of dispatch lives: it needs
// the dispatcher's test rig (actors/dispatcher's BenchmarkDispatch), and
// the dispatcher has no exported entry point of its own to drive from here.
const DispatchNote = "dispatch (dispatcher -> partition -> handler -> disposition) is measured by " +
	"`go test -run '^$' -bench Dispatch -benchmem ./actors/dispatcher/`; end to end it is in the in-process table"

// typicalMessage is the message of internal/protocol/convert_test.go's
// BenchmarkToFromAMQP: a body, the common properties, two headers.
func typicalMessage() *messages.Message {
	return &messages.Message{
		Body:          make([]byte, 100),
		MessageID:     "msg-0001",
		ContentType:   "application/json",
		GroupID:       "customer-7",
		CreationTime:  time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600)),
		Headers:       map[string]any{"tenant": "acme", "attempt": int64(1)},
		Durable:       true,
		TTL:           time.Minute,
		DeliveryCount: 1,
	}
}

// MicroBenchmarks returns the micro-benchmarks of the message mapping, the
// per-message work on both the publish and the receive path: ToAMQP (the
// user's Message to go-amqp's), FromAMQP (a delivery to a Message), both,
// both for a message with a body only (the benchmarks' messages), and both
// with one message annotation (RabbitMQ adds some to every
// delivery, and they are copied into Message.Annotations).
func MicroBenchmarks() []Micro {
	toFrom := func(m *messages.Message) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				am, err := protocol.ToAMQP(m)
				if err != nil {
					b.Fatal(err)
				}
				_ = protocol.FromAMQP(am)
			}
		}
	}
	withAnn := typicalMessage()
	withAnn.Annotations = map[string]any{"x-opt-partition-key": "p"}
	return []Micro{
		{"messages.ToAMQP", func(b *testing.B) {
			m := typicalMessage()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := protocol.ToAMQP(m); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"messages.FromAMQP", func(b *testing.B) {
			am, err := protocol.ToAMQP(typicalMessage())
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				_ = protocol.FromAMQP(am)
			}
		}},
		{"messages.ToAMQP+FromAMQP", toFrom(typicalMessage())},
		{"messages.ToAMQP+FromAMQP/body only", toFrom(&messages.Message{Body: make([]byte, 100)})},
		{"messages.ToAMQP+FromAMQP/annotated", toFrom(withAnn)},
	}
}
