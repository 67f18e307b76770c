// Package amqpscan checks an AMQP 1.0 message payload before go-amqp decodes
// it: in one pass and without allocating, it proves that decoding cannot
// panic, overflow the stack, allocate beyond the payload's size or fail on a
// type go-amqp does not know. A payload that fails is poison: the runtime
// rejects it alone instead of letting it end its link.
package amqpscan

// DefaultMaxDepth is the deepest nesting of lists, maps, arrays and described
// values that Check accepts when Limits.MaxDepth is zero.
const DefaultMaxDepth = 32

// Limits bounds what Check accepts. The zero value means DefaultMaxDepth and
// no size limit.
type Limits struct {
	// MaxDepth bounds the nesting of compound and described values; zero
	// means DefaultMaxDepth.
	MaxDepth int
	// MaxSize bounds the payload's length in bytes; zero means no bound.
	MaxSize uint64
}

// Error says why a payload is poison, and where.
type Error struct {
	// Offset is the byte offset in the payload where the check failed.
	Offset int
	// Reason is a short description for the rejection and the log, e.g.
	// "char value in application-properties".
	Reason string
}

func (e *Error) Error() string { return "amqpscan: " + e.Reason }

// Check returns nil when go-amqp can decode payload safely, or an *Error
// saying why not.
func Check(payload []byte, lim Limits) error {
	// Placeholder: the scanner itself is being written.
	return nil
}
