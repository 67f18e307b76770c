// Package messages owns what travels, as a user sees it: the Message with its
// AMQP 1.0 section mapping, the Outcome a delivery or publish was settled
// with, and the errors that carry one (OutcomeError, RemoteError). The
// package amqpactor aliases them; what the actors exchange among themselves
// is internal.
//
// # Sections
//
// A Message has no envelope of our own: the runtime puts every field in its
// standard section when it sends a Message and reads them back when it
// receives one, so a message we send reads as a plain AMQP message in any
// other client and a message from any other client arrives with its headers.
//
//	Body                     one data section (several received ones are joined)
//	Value                    amqp-value when Body is nil; received amqp-sequence
//	                         sections become one []any
//	MessageID … GroupID …    properties (GroupID is the partition key)
//	Headers                  application-properties, and nothing else goes there
//	Durable, Transient,      header, always on the wire: durable=true unless
//	Priority, TTL,           Transient is set and Durable is not
//	FirstAcquirer,
//	DeliveryCount
//	Annotations              message-annotations, string keys sent as symbols
//	DeliveryAnnotations      delivery-annotations
//	Footer                   footer
//
// # Types of values, received
//
// What a value of each AMQP type is in Message (Headers, Annotations, Value
// and the elements of lists and maps), as go-amqp v1.7 decodes it:
//
//	AMQP type     Go type in Message
//	null          nil
//	boolean       bool
//	ubyte         uint8
//	ushort        uint16
//	uint          uint32
//	ulong         uint64
//	byte          int8
//	short         int16
//	int           int32
//	long          int64
//	float         float32
//	double        float64
//	timestamp     time.Time (milliseconds, local time zone)
//	uuid          amqp.UUID
//	binary        []byte (an amqp-value binary body is Value, not Body)
//	string        string
//	symbol        string: not distinguishable from a string, see below
//	list          []any
//	map           map[string]any when every key is a string or a symbol,
//	              otherwise map[any]any
//	array         a slice of the element type ([]int32, []string, …)
//	described     go-amqp's own described value, passed through as it is
//	char,         not decoded by go-amqp v1.7: a message that holds one
//	decimal32/64/128  anywhere cannot be received (go-amqp ends the link)
//
// The properties: message-id and correlation-id are uint64 (ulong),
// amqp.UUID (uuid), []byte (binary) or string; content-type and
// content-encoding (symbols) are strings; creation-time and
// absolute-expiry-time are time.Time in UTC; the header's ttl is a
// time.Duration of whole milliseconds, and Priority is the header's
// priority, or 4 when it is absent.
//
// # Types of values, sent
//
// The AMQP type that each Go type goes on the wire as, and how two
// independent clients show it (Qpid Proton for Python, rhea for Node.js; the
// interop suite in test/interop checks every row against both, through
// RabbitMQ 4):
//
//	Go type           AMQP type   Proton (Python)    rhea (JavaScript)
//	string            string      str                string
//	amqp.Symbol       symbol      proton.symbol      string
//	bool              boolean     bool               boolean
//	int, int64        long        int                number (8-byte Buffer beyond 2^53)
//	int8              byte        proton.byte        number
//	int16             short       proton.short       number
//	int32             int         proton.int32       number
//	uint, uint64      ulong       proton.ulong       number (8-byte Buffer beyond 2^53)
//	uint8             ubyte       proton.ubyte       number
//	uint16            ushort      proton.ushort      number
//	uint32            uint        proton.uint        number
//	float32           float       proton.float32     number
//	float64           double      float              number
//	time.Time         timestamp   proton.timestamp   Date
//	                  (truncated to the millisecond)
//	amqp.UUID         uuid        uuid.UUID          16-byte Buffer
//	[]byte            binary      bytes              Buffer
//	nil, amqp.Null    null        None               null
//
// Headers (application-properties) take only those types; Annotations,
// DeliveryAnnotations, Footer and Value also take []any (list),
// map[string]any and map[any]any (map), map[amqp.Symbol]any (map with
// symbol keys) and typed slices such as []int32 (array). MessageID and
// CorrelationID go out as ulong (uint64), uuid (amqp.UUID), binary ([]byte)
// or string. Body is one data section; the other client sees its bytes as
// they are (bytes in Proton, a Buffer in rhea).
//
// # What does not round-trip
//
// A message received from another client and sent on unchanged arrives as
// it was sent, with every type above kept, except:
//
//   - a symbol becomes a string, in application-properties, annotation
//     values, amqp-value bodies and map keys alike (go-amqp decodes symbols
//     as strings). To send a symbol, put an amqp.Symbol in the Message.
//   - amqp-sequence sections become one amqp-value list, and several data
//     sections one data section.
//   - a priority of 0 goes out as no priority at all, which reads as 4: a
//     Message cannot say "priority 0", since its zero means "not set".
//   - annotation keys that are not symbols (ulong keys) become decimal
//     strings and go out as symbols. (RabbitMQ 4.0 never settles a message
//     whose annotations have a ulong key, so it cannot carry one anyway.)
//   - a time goes out truncated to the millisecond.
//
// # Through RabbitMQ 4.0
//
// The broker adds the message annotations x-exchange and x-routing-key to
// every message it delivers (they then show in Annotations, and are
// replaced by the broker's new ones when the Message is sent on), sets
// first-acquirer on a first delivery. RabbitMQ 4.0 treats a message without
// a header as durable, 4.2 and later as transient (the AMQP default); since
// a Message always says which, it is durable on both unless Transient.
package messages
