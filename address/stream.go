package address

import (
	"fmt"
	"strconv"
	"time"
)

// Stream names a stream: an append-only log that every subscription reads
// with a cursor of its own, from where its StreamOffset says. Reading does
// not take a message off it, and a publish appends. On RabbitMQ 4 it is a
// queue declared with x-queue-type stream; its Kind is KindQueue.
func Stream(name string) Address { return Address{kind: KindQueue, name: name, stream: true} }

// IsStream reports an address made by Stream.
func (a Address) IsStream() bool { return a.stream }

// StreamOffsetKind says where a StreamOffset starts.
type StreamOffsetKind uint8

const (
	// OffsetNext: the messages appended after the receiver attaches (the
	// zero StreamOffset, as on RabbitMQ).
	OffsetNext StreamOffsetKind = iota
	// OffsetFirst: the first message the stream still holds.
	OffsetFirst
	// OffsetLast: the last chunk of messages (RabbitMQ) or the last message
	// (in-process) the stream holds, then what is appended.
	OffsetLast
	// OffsetAt: the message at an offset (the first one after it, where
	// that one is gone or filtered out).
	OffsetAt
	// OffsetSince: the first message appended at or after a time (RabbitMQ
	// may start a little earlier: it attaches at a chunk's start).
	OffsetSince
)

// StreamOffset is where a subscription to a stream starts reading. The
// zero value is OffsetNext.
type StreamOffset struct {
	kind StreamOffsetKind
	at   int64
	t    time.Time
}

// StreamFirst starts at the first message the stream holds.
func StreamFirst() StreamOffset { return StreamOffset{kind: OffsetFirst} }

// StreamLast starts at the last chunk (the last message in-process).
func StreamLast() StreamOffset { return StreamOffset{kind: OffsetLast} }

// StreamNext starts with the next message appended.
func StreamNext() StreamOffset { return StreamOffset{kind: OffsetNext} }

// StreamAt starts at offset (0 is the stream's first message ever).
func StreamAt(offset int64) StreamOffset { return StreamOffset{kind: OffsetAt, at: offset} }

// StreamSince starts at the first message appended at or after t.
func StreamSince(t time.Time) StreamOffset { return StreamOffset{kind: OffsetSince, t: t} }

// Kind says where o starts.
func (o StreamOffset) Kind() StreamOffsetKind { return o.kind }

// Offset is the offset of a StreamAt, 0 for any other.
func (o StreamOffset) Offset() int64 { return o.at }

// Time is the time of a StreamSince, the zero time for any other.
func (o StreamOffset) Time() time.Time { return o.t }

func (o StreamOffset) String() string {
	switch o.kind {
	case OffsetFirst:
		return "first"
	case OffsetLast:
		return "last"
	case OffsetAt:
		return "offset " + strconv.FormatInt(o.at, 10)
	case OffsetSince:
		return "since " + o.t.UTC().Format(time.RFC3339Nano)
	}
	return "next"
}

// CheckStreamOffset reports whether a subscription to a may start at o: a
// StreamOffset other than the zero value is for a stream only, and an
// offset may not be negative.
func CheckStreamOffset(a Address, o StreamOffset, given bool) error {
	if given && !a.stream {
		return &Error{Address: a, Reason: "a stream offset applies to a Stream address only"}
	}
	if o.kind == OffsetAt && o.at < 0 {
		return &Error{Address: a, Reason: fmt.Sprintf("negative stream offset %d", o.at)}
	}
	if o.kind == OffsetSince && o.t.IsZero() {
		return &Error{Address: a, Reason: "StreamSince needs a time"}
	}
	return nil
}

// CheckStream reports whether dialect d can receive from the stream a:
// RabbitMQ 4 only, with an error naming the broker's limit elsewhere.
func CheckStream(d Dialect, a Address) error {
	if !a.stream || d == RabbitMQ4 {
		return nil
	}
	reason := "streams are a RabbitMQ feature"
	if d == Artemis {
		reason = "Artemis has no streams (a stream is a RabbitMQ 4 queue of type stream)"
	}
	return &Error{Address: a, Dialect: d, Reason: reason}
}
