package protocol

import (
	"encoding/hex"
	"fmt"

	"github.com/Azure/go-amqp"
)

// StringKeyPrefix begins the key of a string id: a caller that makes the
// id may spell its key with it in one go.
const StringKeyPrefix = "s:"

// CorrelationKey turns a message-id or correlation-id (string, uint64, UUID
// or binary) into a map key, so a reply matches its request whatever type
// the other side used.
func CorrelationKey(id any) string {
	switch v := id.(type) {
	case nil:
		return ""
	case string:
		return StringKeyPrefix + v
	case []byte:
		return "b:" + hex.EncodeToString(v)
	case amqp.UUID:
		return "u:" + v.String()
	case uint64:
		return fmt.Sprintf("n:%d", v)
	}
	return fmt.Sprintf("?:%v", id)
}

// AppendCorrelationKey appends CorrelationKey(id) to dst, a string id
// without allocating: a lookup by key needs no string of its own.
func AppendCorrelationKey(dst []byte, id any) []byte {
	if s, ok := id.(string); ok {
		return append(append(dst, StringKeyPrefix...), s...)
	}
	return append(dst, CorrelationKey(id)...)
}
