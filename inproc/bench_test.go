package inproc

import (
	"context"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport"
)

// benchMessage is what the runtime's mapping produces for a typical message:
// header, properties and a 100-byte data section.
func benchMessage() *amqp.Message {
	id := "order-000001"
	ct := "application/json"
	return &amqp.Message{
		Header:     &amqp.MessageHeader{Durable: true, Priority: 4},
		Properties: &amqp.MessageProperties{MessageID: id, ContentType: &ct},
		Data:       [][]byte{make([]byte, 100)},
	}
}

// BenchmarkPublishReceive: one sender, one receiver with a 256 window topped
// up as the runtime does (the full window again each time half of it has
// been settled), every message accepted.
func BenchmarkPublishReceive(b *testing.B) {
	const window = 256
	ctx := context.Background()
	br := New()
	c, err := br.Connect(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	sess, _ := c.NewSession(ctx)
	a := address.Queue("bench")
	r, err := sess.NewReceiver(ctx, transport.ReceiverOptions{Address: a, Credit: window})
	if err != nil {
		b.Fatal(err)
	}
	s, err := sess.NewSender(ctx, transport.SenderOptions{Address: a})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.IssueCredit(window); err != nil {
		b.Fatal(err)
	}
	msg := benchMessage()

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		settled := 0
		for i := 0; i < b.N; i++ {
			m, err := r.Receive(ctx)
			if err != nil {
				done <- err
				return
			}
			if err := r.Settle(ctx, m, accept); err != nil {
				done <- err
				return
			}
			if settled++; settled == window/2 {
				settled = 0
				if err := r.IssueCredit(window / 2); err != nil {
					done <- err
					return
				}
			}
		}
		done <- nil
	}()
	for i := 0; i < b.N; i++ {
		rc, err := s.Send(ctx, msg, false)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := rc.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
}

// BenchmarkCopy measures what the broker does to a message instead of
// encoding it: its own copy at publish and one copy per delivery.
func BenchmarkCopy(b *testing.B) {
	msg := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		s, err := own(msg)
		if err != nil {
			b.Fatal(err)
		}
		_ = s.deliver(true, 0)
	}
}

// BenchmarkCodec measures the wire form the broker used to keep, for
// comparison: one MarshalBinary and one UnmarshalBinary.
func BenchmarkCodec(b *testing.B) {
	msg := benchMessage()
	b.ReportAllocs()
	for b.Loop() {
		data, err := msg.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		m := new(amqp.Message)
		if err := m.UnmarshalBinary(data); err != nil {
			b.Fatal(err)
		}
	}
}
