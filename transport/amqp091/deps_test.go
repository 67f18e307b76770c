package amqp091_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNoSiblingTransport: what both transports need lives under
// transport/internal, so that neither transport is built on the other.
func TestNoSiblingTransport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, dep, "/transport/amqpwire", "transport/amqp091 depends on %s", dep)
	}
}
