// Package amqpscan checks an AMQP 1.0 message payload before go-amqp decodes
// it: in one pass and without allocating, it proves that decoding cannot
// panic, overflow the stack, allocate beyond the payload's size or fail on a
// type go-amqp does not know. A payload that fails is poison: the runtime
// rejects it alone instead of letting it end its link.
//
// The payload is what a transfer (or the transfers of one delivery) carries:
// a sequence of described sections, header (0x70) through footer (0x78).
// Check follows go-amqp's decoder through it section by section and value by
// value, and answers nil only when (*amqp.Message).UnmarshalBinary would
// decode it without error; otherwise an *Error names the first thing wrong,
// the section it is in and its byte offset, e.g. "list key in footer".
//
// # What Check refuses
//
//   - A payload over Limits.MaxSize, when that is set.
//   - Lists, maps, arrays and described values nested deeper than
//     Limits.MaxDepth (DefaultMaxDepth, 32). A section's value is level 1.
//     go-amqp decodes recursively, so without this bound a few megabytes of
//     nested maps overflow the stack, which no recover catches.
//   - Map keys go-amqp cannot hash or decode. go-amqp panics on a list, map,
//     array, binary or described key in annotations and footers, and errors
//     on most of them elsewhere. Application-properties must have string or
//     symbol keys; every other map, annotations and footer included, scalar
//     keys other than binary (the spec's symbol or ulong is not enforced,
//     since go-amqp decodes a string key there without harm).
//   - Types go-amqp does not decode: char, decimal32, decimal64,
//     decimal128, unknown and reserved constructors, arrays of anything but
//     the fixed and variable width scalars and maps, and described values
//     whose descriptor is not a ulong or symbol, or names a frame, a
//     section, a terminus or a delivery state.
//   - Anything cut short, any size or count beyond the bytes that follow,
//     counts over go-amqp's 65536, maps of an odd count, arrays whose
//     zero-width elements claim more than their size (go-amqp pre-allocates
//     by count), and lists, maps and arrays whose size does not match what
//     they hold: go-amqp ignores sizes and reads on, so such a payload would
//     not decode as its sender meant.
//   - Sections go-amqp refuses or misreads: a descriptor that is not a
//     ulong from 0x70 to 0x78; a header or properties that is not a list of
//     at most 5 or 13 fields, each null or of the type go-amqp decodes it
//     into (durable a boolean, priority a ubyte, delivery-count a uint,
//     user-id binary, to a string or symbol, creation-time a timestamp, and
//     so on); annotations, application-properties or a footer that is not
//     null or a map; data that is not null or binary; an amqp-sequence that
//     is not null or a list.
//
// # What it lets through
//
// Every message go-amqp's own encoder writes, and the other forms peers use
// for the same values (str8 and str32, list0, list8 and list32, map8 and
// map32, array8 and array32, uint0 and smalluint, and so on). Sections in
// any order, and repeated, since go-amqp accepts both. Application-property
// values of any type go-amqp decodes: the spec's simple types are not
// enforced, since go-amqp decodes lists and maps there without harm.
//
// What go-amqp allocates decoding a payload Check passes is a constant
// multiple of its size: every element it pre-allocates for has at least a
// byte behind it; the tests check that multiple on the cheapest shapes.
//
// # Cost
//
// One pass, no allocation, and recursion at most MaxDepth deep, so a check
// costs less than go-amqp's own decode of the same payload, which it
// precedes on every delivery; an opaque data section of any size is
// skipped in constant time. BenchmarkCheck* measure it.
//
// # Tied to go-amqp's decoder
//
// The rules mirror the decoder of the go-amqp version in go.mod (v1.7.0).
// FuzzCheck and FuzzCheckGenerated prove them against it, with go-amqp as
// the oracle: when go-amqp is upgraded, run them before trusting Check.
package amqpscan
