package livetest

import (
	"testing"

	"go.uber.org/goleak"
)

// RabbitMQ dials the broker: its connection's goroutines must end with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
