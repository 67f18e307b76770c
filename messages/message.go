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

	// Header section.
	Durable       bool
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
