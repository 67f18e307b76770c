// Package amqpscan checks an AMQP 1.0 message payload before go-amqp decodes
// it: in one pass and without allocating, it proves that decoding cannot
// panic, overflow the stack, allocate beyond the payload's size or fail on a
// type go-amqp does not know. A payload that fails is poison: the runtime
// rejects it alone instead of letting it end its link.
package amqpscan
