package protocol

import (
	"encoding/hex"
	"fmt"

	"github.com/Azure/go-amqp"
)

// CorrelationKey turns a message-id or correlation-id (string, uint64, UUID
// or binary) into a map key, so a reply matches its request whatever type
// the other side used.
func CorrelationKey(id any) string {
	switch v := id.(type) {
	case nil:
		return ""
	case string:
		return "s:" + v
	case []byte:
		return "b:" + hex.EncodeToString(v)
	case amqp.UUID:
		return "u:" + v.String()
	case uint64:
		return fmt.Sprintf("n:%d", v)
	}
	return fmt.Sprintf("?:%v", id)
}
