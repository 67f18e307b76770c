package amqpwire

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/Azure/go-amqp"
)

// TestArtemisResult: a reply's JSON array is the result, numbers kept
// exact; a failed operation is an *ArtemisError with the broker's message
// and code, naming the resource.
func TestArtemisResult(t *testing.T) {
	ok := &amqp.Message{ApplicationProperties: map[string]any{artemisSucceeded: true}, Value: "[3]"}
	res, err := artemisResult("queue.q", "attribute consumerCount", ok)
	if err != nil || len(res) != 1 || res[0] != json.Number("3") {
		t.Fatalf("result %#v, %v", res, err)
	}
	data := &amqp.Message{ApplicationProperties: map[string]any{artemisSucceeded: true}, Data: [][]byte{[]byte("[true]")}}
	if res, err := artemisResult("queue.q", "attribute exclusive", data); err != nil || res[0] != true {
		t.Fatalf("a data body: %#v, %v", res, err)
	}
	failed := &amqp.Message{ApplicationProperties: map[string]any{artemisSucceeded: false},
		Value: `["AMQ229019: Queue q already exists on address q"]`}
	_, err = artemisResult("broker", "createQueue", failed)
	var ae *ArtemisError
	if !errors.As(err, &ae) || ae.Code() != "AMQ229019" || ae.Resource != "broker" || !IsArtemisCode(err, "AMQ229019") {
		t.Fatalf("failed: %v", err)
	}
	if want := "amqpactor: artemis management createQueue of broker: AMQ229019: Queue q already exists on address q"; err.Error() != want {
		t.Fatalf("error %q, want %q", err, want)
	}
	// No succeeded property is a failure; a message without a code has none.
	noCode := &amqp.Message{Value: `["Problem while retrieving attribute exclusive"]`}
	_, err = artemisResult("queue.x", "attribute exclusive", noCode)
	if !errors.As(err, &ae) || ae.Code() != "" || ae.Message != "Problem while retrieving attribute exclusive" {
		t.Fatalf("no code: %v", err)
	}
	if _, err := artemisResult("broker", "x", &amqp.Message{Value: int64(1)}); err == nil {
		t.Fatal("a reply body that is no text decoded")
	}
}

// TestArtemisQueueJSON: createQueue gets the whole configuration, an
// anycast queue on the address of its name by default; updateQueue only
// what it changes.
func TestArtemisQueueJSON(t *testing.T) {
	for _, tc := range []struct {
		q      ArtemisQueue
		create bool
		want   string
	}{
		{ArtemisQueue{Name: "q", Exclusive: true}, true,
			`{"address":"q","auto-create-address":true,"durable":true,"exclusive":true,"name":"q","routing-type":"ANYCAST"}`},
		{ArtemisQueue{Name: "s", Address: "t", Multicast: true, Transient: true}, true,
			`{"address":"t","auto-create-address":true,"durable":false,"exclusive":false,"name":"s","routing-type":"MULTICAST"}`},
		{ArtemisQueue{Name: "q", Exclusive: true}, false, `{"exclusive":true,"name":"q"}`},
	} {
		got, err := tc.q.json(tc.create)
		if err != nil || got != tc.want {
			t.Errorf("%+v: %s, %v; want %s", tc.q, got, err, tc.want)
		}
	}
	if _, err := (ArtemisQueue{}).json(true); err == nil {
		t.Error("a queue without a name")
	}
}
