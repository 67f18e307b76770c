package messages

import "time"

// Message is one AMQP 1.0 message as a plain struct. There is no envelope of
// our own: every field maps onto a standard section (see the package doc),
// so a message we send reads as a plain AMQP message in any other client.
type Message struct {
	// Body is the data section. Value holds an amqp-value body from other
	// clients (and is sent as amqp-value when Body is nil).
	Body  []byte
	Value any

	// Properties section.
	MessageID          any // string, uint64, UUID or []byte
	CorrelationID      any
	ContentType        string
	ContentEncoding    string
	ReplyTo            string
	Subject            string
	To                 string
	GroupID            string // the partition key
	ReplyToGroupID     string
	UserID             []byte
	CreationTime       time.Time
	AbsoluteExpiryTime time.Time
	GroupSequence      uint32

	// Headers are the application-properties.
	Headers map[string]any

	// Header section. A message is sent durable (the broker keeps it across
	// a restart) unless Transient is set and Durable is not: brokers differ
	// on a message without a header (RabbitMQ 4.0 kept it, 4.2 and later
	// and Artemis do not), so the runtime always says which. On a received
	// message exactly one of the two is true, so forwarding it keeps its
	// durability.
	Durable       bool
	Transient     bool
	Priority      uint8
	TTL           time.Duration
	FirstAcquirer bool
	DeliveryCount uint32

	// Annotations are the message-annotations.
	Annotations map[string]any
	// DeliveryAnnotations and Footer pass through untouched.
	DeliveryAnnotations map[string]any
	Footer              map[string]any
}
