package coalesce

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Conn's flusher returns by Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
