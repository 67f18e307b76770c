package sqlfilter

import (
	"fmt"

	"github.com/amqpactor/amqpactor/messages"
)

// field is what an identifier refers to: an application property (its key
// is the token's text), the header's priority or a field of the properties
// section.
type field uint8

const (
	fApp field = iota
	fPriority
	fMessageID
	fUserID
	fTo
	fSubject
	fReplyTo
	fCorrelationID
	fContentType
	fContentEncoding
	fAbsoluteExpiryTime
	fCreationTime
	fGroupID
	fGroupSequence
	fReplyToGroupID
)

// properties are the properties section's fields by their names in an
// expression: the spec's names with underscores for dashes.
var properties = map[string]field{
	"message_id":           fMessageID,
	"user_id":              fUserID,
	"to":                   fTo,
	"subject":              fSubject,
	"reply_to":             fReplyTo,
	"correlation_id":       fCorrelationID,
	"content_type":         fContentType,
	"content_encoding":     fContentEncoding,
	"absolute_expiry_time": fAbsoluteExpiryTime,
	"creation_time":        fCreationTime,
	"group_id":             fGroupID,
	"group_sequence":       fGroupSequence,
	"reply_to_group_id":    fReplyToGroupID,
}

// resolveSection maps section.name to a field, as RabbitMQ's
// rabbit_amqp_util:section_field_name_to_atom does; msg says why it cannot.
func resolveSection(section, name string) (f field, key, msg string) {
	switch section {
	case "header", "h":
		if name == "priority" {
			return fPriority, "", ""
		}
		return 0, "", fmt.Sprintf("%s.%s: of the header section only priority can be filtered on", section, name)
	case "properties", "p":
		if f, ok := properties[name]; ok {
			return f, "", ""
		}
		return 0, "", fmt.Sprintf("%s.%s: not a field of the properties section, whose fields are written with underscores (message_id, user_id, to, subject, reply_to, correlation_id, content_type, content_encoding, absolute_expiry_time, creation_time, group_id, group_sequence, reply_to_group_id)", section, name)
	case "application_properties", "a":
		return fApp, name, ""
	case "delivery_annotations", "d", "message_annotations", "m", "footer", "f",
		"delivery-annotations", "message-annotations", "application-properties":
		return 0, "", fmt.Sprintf("%s.%s: RabbitMQ filters on the header (h), properties (p) and application_properties (a) sections only, written with underscores", section, name)
	}
	return 0, "", fmt.Sprintf("%s.%s: unknown section %q (a name with a dot in it goes in brackets: [%s.%s])", section, name, section, section, name)
}

// defaultPriority is AMQP's priority of a message that sets none; the
// messages package reports it as 0 on a message built here.
const defaultPriority = 4

// read returns the field's value in m. What the wire would leave out (an
// empty string, a zero time, an empty user id, a zero group sequence) is
// NULL, as RabbitMQ sees such a message.
func read(m *messages.Message, f field, key string) value {
	if m == nil {
		if f == fPriority {
			return intValue(defaultPriority)
		}
		return null
	}
	switch f {
	case fApp:
		v, ok := m.Headers[key]
		if !ok {
			return null
		}
		return goValue(v)
	case fPriority:
		if m.Priority == 0 {
			return intValue(defaultPriority)
		}
		return intValue(int64(m.Priority))
	case fMessageID:
		return goValue(m.MessageID)
	case fCorrelationID:
		return goValue(m.CorrelationID)
	case fUserID:
		if len(m.UserID) == 0 {
			return null
		}
		return strValue(string(m.UserID))
	case fTo:
		return optString(m.To)
	case fSubject:
		return optString(m.Subject)
	case fReplyTo:
		return optString(m.ReplyTo)
	case fContentType:
		return optString(m.ContentType)
	case fContentEncoding:
		return optString(m.ContentEncoding)
	case fGroupID:
		return optString(m.GroupID)
	case fReplyToGroupID:
		return optString(m.ReplyToGroupID)
	case fAbsoluteExpiryTime:
		if m.AbsoluteExpiryTime.IsZero() {
			return null
		}
		return intValue(m.AbsoluteExpiryTime.UnixMilli())
	case fCreationTime:
		if m.CreationTime.IsZero() {
			return null
		}
		return intValue(m.CreationTime.UnixMilli())
	case fGroupSequence:
		if m.GroupSequence == 0 {
			return null
		}
		return intValue(int64(m.GroupSequence))
	}
	return null
}

func optString(s string) value {
	if s == "" {
		return null
	}
	return strValue(s)
}
