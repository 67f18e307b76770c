package amqpscan

import (
	"bytes"
	"testing"

	"github.com/Azure/go-amqp"
)

// typical is a 100-byte message as a service sends it: header,
// properties, an application property and a small body.
var typical = mustMarshal(&amqp.Message{
	Header: &amqp.MessageHeader{Durable: true},
	Properties: &amqp.MessageProperties{
		MessageID: uint64(4242),
		To:        ptr("/queues/orders"),
		Subject:   ptr("placed"),
	},
	ApplicationProperties: map[string]any{"tenant": "acme"},
	Data:                  [][]byte{[]byte(`{"order":42}`)},
})

func TestTypicalIsTypical(t *testing.T) {
	if n := len(typical); n < 90 || n > 110 {
		t.Errorf("the typical message is %d bytes, not about 100", n)
	}
}

// large is a 64 KiB message: the same envelope around a 64 KiB map body
// of short strings, the worst realistic shape for a scanner (every few
// bytes a new value), rather than one opaque binary.
var large = func() []byte {
	m := make(map[string]any)
	for i := 0; len(m)*24 < 64<<10; i++ {
		m[string(rune('a'+i%26))+string(rune('a'+i/26%26))+string(rune('a'+i/676%26))] = "value-of-it"
	}
	b := mustMarshal(&amqp.Message{Header: &amqp.MessageHeader{Durable: true}, Value: m})
	return b
}()

var large64KiBData = mustMarshal(amqp.NewMessage(bytes.Repeat([]byte{'x'}, 64<<10)))

func benchmarkCheck(b *testing.B, payload []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := Check(payload, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCheckTypical(b *testing.B)   { benchmarkCheck(b, typical) }
func BenchmarkCheck64KiBMap(b *testing.B)  { benchmarkCheck(b, large) }
func BenchmarkCheck64KiBData(b *testing.B) { benchmarkCheck(b, large64KiBData) }
func BenchmarkDecodeTypical(b *testing.B)  { benchmarkDecode(b, typical) }
func BenchmarkDecode64KiBMap(b *testing.B) { benchmarkDecode(b, large) }

// benchmarkDecode is go-amqp's own decoding, to put Check's cost in
// proportion.
func benchmarkDecode(b *testing.B, payload []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		var m amqp.Message
		if err := m.UnmarshalBinary(payload); err != nil {
			b.Fatal(err)
		}
	}
}
