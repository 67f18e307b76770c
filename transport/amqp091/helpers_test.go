package amqp091_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	rmq "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// waitFor bounds every wait of these tests.
const waitFor = 20 * time.Second

func unique(base string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return base + "-" + hex.EncodeToString(b[:])
}

// side is a plain amqp091-go connection the tests inspect and arrange the
// broker with, beside the connector under test.
type side struct {
	t    *testing.T
	conn *rmq.Connection
}

func newSide(t *testing.T, url string) *side {
	t.Helper()
	conn, err := rmq.Dial(url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &side{t: t, conn: conn}
}

// do runs f on a channel of its own.
func (s *side) do(f func(ch *rmq.Channel) error) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	return f(ch)
}

// depth is the number of ready messages on q.
func (s *side) depth(q string) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.do(func(ch *rmq.Channel) error {
		info, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		n = info.Messages
		return err
	}))
	return n
}

// deleteQueue deletes q when the test ends.
func (s *side) deleteQueue(q string) {
	s.t.Cleanup(func() {
		_ = s.do(func(ch *rmq.Channel) error { _, err := ch.QueueDelete(q, false, false, false); return err })
	})
}

// ctl runs rabbitmqctl on the test broker through its script; the test is
// Missing it where the script cannot run (not root, no broker chroot).
func ctl(t *testing.T, args ...string) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "test", "broker", "rabbitmq4.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args = append(args, "--quiet")
	if strings.HasPrefix(args[0], "list_") {
		args = append(args, "--no-table-headers")
	}
	out, err := exec.CommandContext(ctx, "bash", append([]string{script, "ctl"}, args...)...).Output()
	if err != nil {
		livetest.Missing(t, "rabbitmqctl through test/broker/rabbitmq4.sh ctl: "+err.Error())
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// unacked is, for every consumer of q, the deliveries its channel holds
// unacknowledged, as the broker counts them.
func unacked(t *testing.T, q string) []int {
	t.Helper()
	chans := map[string]bool{}
	for _, l := range ctl(t, "list_consumers", "queue_name", "channel_pid") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == q {
			chans[f[1]] = true
		}
	}
	var out []int
	for _, l := range ctl(t, "list_channels", "pid", "messages_unacknowledged") {
		f := strings.Fields(l)
		if len(f) == 2 && chans[f[0]] {
			n, err := strconv.Atoi(f[1])
			require.NoError(t, err, "list_channels: %q", l)
			out = append(out, n)
		}
	}
	return out
}

type rmqChannel = rmq.Channel
