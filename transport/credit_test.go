package transport_test

import (
	"errors"
	"testing"

	"github.com/amqpactor/amqpactor/transport"
)

// A grant that fills the window exactly is taken; one more credit is
// refused, wrapping ErrCreditWindow and saying what was outstanding.
func TestCheckCredit(t *testing.T) {
	if err := transport.CheckCredit(6, 4, 10); err != nil {
		t.Fatalf("a grant up to the window: %v", err)
	}
	err := transport.CheckCredit(7, 4, 10)
	if !errors.Is(err, transport.ErrCreditWindow) {
		t.Fatalf("a grant past the window: %v, want ErrCreditWindow", err)
	}
	const want = "credit above the receiver's window: granting 7 with 4 outstanding exceeds the window of 10"
	if err.Error() != want {
		t.Fatalf("got %q, want %q", err, want)
	}
}
