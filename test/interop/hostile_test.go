package interop

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/internal/amqpscan"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// Hostile input, live: Qpid Proton sends, as raw bytes, a message that
// go-amqp cannot decode safely (it would panic, overflow its stack or end
// the link), then 300 ordinary messages, to one queue an App consumes at
// the default credit. The App must reject the hostile message once, with
// amqp:decode-error, and handle each ordinary one exactly once with
// delivery-count 0, without a link restart.

// A small encoder of the sections of an AMQP message, enough for the cases.

func vbin32(code byte, b []byte) []byte {
	out := binary.BigEndian.AppendUint32([]byte{code}, uint32(len(b)))
	return append(out, b...)
}

func str32(s string) []byte { return vbin32(0xb1, []byte(s)) }

// compound32 encodes a list32 (0xd0) or map32 (0xd1) of the encoded items.
func compound32(code byte, items ...[]byte) []byte {
	var content []byte
	for _, it := range items {
		content = append(content, it...)
	}
	out := binary.BigEndian.AppendUint32([]byte{code}, uint32(4+len(content)))
	out = binary.BigEndian.AppendUint32(out, uint32(len(items)))
	return append(out, content...)
}

func section(code byte, value []byte) []byte { return append([]byte{0x00, 0x53, code}, value...) }

func withID(id string, sections ...[]byte) []byte {
	out := section(0x73, compound32(0xd0, str32(id)))
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

func dataSection(b []byte) []byte { return section(0x75, vbin32(0xb0, b)) }

// nestedMaps is an amqp-value of n maps, each the value of the one key of
// the map around it: 12 bytes a level.
func nestedMaps(n int) []byte {
	out := make([]byte, 0, 3+12*n+9)
	out = append(out, 0x00, 0x53, 0x77)
	for i := 0; i < n; i++ {
		inner := 12*(n-i-1) + 9 // the map this one holds
		out = append(out, 0xd1)
		out = binary.BigEndian.AppendUint32(out, uint32(4+3+inner))
		out = binary.BigEndian.AppendUint32(out, 2)
		out = append(out, 0xa3, 1, 'k')
	}
	out = append(out, 0xd1, 0, 0, 0, 4, 0, 0, 0, 0)
	return out
}

const hostileID = "hostile"

type hostileCase struct {
	name    string
	payload func() []byte
	// maxMessageSize is the App's WithMaxMessageSize (0: the default).
	maxMessageSize uint64
}

var nestedOnce = sync.OnceValue(func() []byte {
	return withID(hostileID, nestedMaps(1_100_000))
})

var hostileCases = []hostileCase{
	{
		name: "footer with a list key",
		payload: func() []byte {
			return withID(hostileID, dataSection([]byte("x")),
				section(0x78, compound32(0xd1, compound32(0xd0, []byte{0x54, 1}), str32("v"))))
		},
	},
	{
		name: "footer with a binary key",
		payload: func() []byte {
			return withID(hostileID, dataSection([]byte("x")),
				section(0x78, compound32(0xd1, vbin32(0xb0, []byte("k")), str32("v"))))
		},
	},
	{
		name:    "amqp-value of 1.1 million nested maps (13 MB)",
		payload: nestedOnce,
	},
	{
		name: "char application-property",
		payload: func() []byte {
			return withID(hostileID, section(0x74, compound32(0xd1, str32("c"), []byte{0x73, 0, 0, 0, 'A'})),
				dataSection([]byte("x")))
		},
	},
	{
		name: "decimal64 application-property",
		payload: func() []byte {
			return withID(hostileID, section(0x74, compound32(0xd1, str32("d"), []byte{0x84, 0x30, 0x8c, 0, 0, 0, 0, 0, 1})),
				dataSection([]byte("x")))
		},
	},
	{
		name: "map body with list keys",
		payload: func() []byte {
			return withID(hostileID, section(0x77, compound32(0xd1, compound32(0xd0, []byte{0x54, 1}), str32("v"))))
		},
	},
	{
		name:           "message over WithMaxMessageSize (80 KiB, max 64 KiB)",
		payload:        func() []byte { return withID(hostileID, dataSection(make([]byte, 80<<10))) },
		maxMessageSize: 64 << 10,
	},
}

const hostileNormal = 300

// writePayloads writes the payloads in the form proton_peer.py send-raw
// reads.
func writePayloads(t *testing.T, payloads [][]byte) string {
	t.Helper()
	var b []byte
	for _, p := range payloads {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	path := filepath.Join(t.TempDir(), "payloads")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func findReceiver(n *amqpactor.Node, queue string) *amqpactor.Node {
	if n.Kind == "receiver" && strings.Contains(n.Address, queue) {
		return n
	}
	for _, c := range n.Children {
		if r := findReceiver(c, queue); r != nil {
			return r
		}
	}
	return nil
}

func restarts(n *amqpactor.Node) int {
	r := n.Restarts
	for _, c := range n.Children {
		r += restarts(c)
	}
	return r
}

// TestHostileInput runs every hostile case on a RabbitMQ quorum and classic
// queue and on an Artemis queue. The figures go to docs/RELIABILITY.md
// ("Hostile input").
func TestHostileInput(t *testing.T) {
	p := peers[0] // proton
	for _, kind := range []string{"quorum", "classic", "artemis"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			b := rabbitmq4
			if kind == "artemis" {
				b = artemis
			}
			e := newEnvOn(t, b, p)
			for _, c := range hostileCases {
				t.Run(c.name, func(t *testing.T) { runHostile(t, e, c, kind) })
			}
		})
	}
}

func runHostile(t *testing.T, e *env, c hostileCase, kind string) {
	hostile := c.payload()
	if c.maxMessageSize == 0 {
		if amqpscan.Check(hostile, amqpscan.Limits{MaxSize: 16 << 20}) == nil {
			livetest.Missing(t, "the payload scanner (internal/amqpscan) passes this hostile payload, "+
				"so go-amqp would decode it and crash or end the link; this case needs the scanner")
		}
	}
	q := e.queue("hostile")

	type seen struct {
		count         int
		deliveryCount uint32
	}
	var mu sync.Mutex
	got := map[string]*seen{}
	handled := make(chan struct{}, hostileNormal*2)
	h := func(ctx context.Context, m *amqpactor.Message) error {
		id := fmt.Sprint(m.MessageID)
		mu.Lock()
		s := got[id]
		if s == nil {
			s = &seen{}
			got[id] = s
		}
		s.count++
		s.deliveryCount = max(s.deliveryCount, m.DeliveryCount)
		mu.Unlock()
		handled <- struct{}{}
		return nil
	}

	dial := []amqpactor.DialOption{amqpactor.WithDialect(e.broker.dialect), amqpactor.WithContainerID("interop-hostile")}
	if c.maxMessageSize > 0 {
		dial = append(dial, amqpactor.WithMaxMessageSize(c.maxMessageSize))
	}
	app := amqpactor.New(amqpactor.Dial(e.url, dial...), amqpactor.WithName("hostile"))
	var opts []amqpactor.SubscribeOption
	if kind == "classic" {
		opts = append(opts, amqpactor.WithClassicQueue())
	}
	if _, err := app.Subscribe(amqpactor.Queue(q), h, opts...); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	ctx := testContext(t, 90*time.Second)
	if err := app.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := app.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
	})

	payloads := [][]byte{hostile}
	for i := 0; i < hostileNormal; i++ {
		payloads = append(payloads, withID(fmt.Sprintf("normal-%03d", i), dataSection([]byte(fmt.Sprintf("normal %d", i)))))
	}
	began := time.Now()
	var res peerResult
	e.peer.run(t, "send-raw", e.peerEnv(e.addr(q), "PEER_PAYLOADS", writePayloads(t, payloads)), &res)
	if res.Sent != len(payloads) {
		t.Fatalf("proton sent %d payloads, want %d", res.Sent, len(payloads))
	}
	for i := 0; i < hostileNormal; i++ {
		select {
		case <-handled:
		case <-ctx.Done():
			t.Fatalf("handled %d of %d ordinary messages", i, hostileNormal)
		}
	}
	took := time.Since(began)

	// The hostile message is settled rejected once; nothing else was.
	var rn, tree *amqpactor.Node
	require.Eventually(t, func() bool {
		var err error
		if tree, err = app.Tree(ctx); err != nil {
			return false
		}
		rn = findReceiver(tree, q)
		return rn != nil && rn.Counters["poison"] >= 1 && rn.Counters["accepted"] >= hostileNormal
	}, 10*time.Second, 10*time.Millisecond, "the receiver counts the poison message and %d accepts", hostileNormal)
	if n := rn.Counters["poison"]; n != 1 {
		t.Errorf("poison counter %d, want 1", n)
	}
	if n := rn.Counters["rejected"]; n != 1 {
		t.Errorf("rejected counter %d, want 1", n)
	}
	if n := rn.Counters["accepted"]; n != hostileNormal {
		t.Errorf("accepted counter %d, want %d", n, hostileNormal)
	}
	if n := restarts(tree); n != 0 {
		t.Errorf("%d restarts in the tree, want 0", n)
	}

	mu.Lock()
	if s := got[hostileID]; s != nil {
		t.Errorf("the hostile message reached the handler %d times", s.count)
	}
	once, dc0 := 0, 0
	for i := 0; i < hostileNormal; i++ {
		s := got[fmt.Sprintf("normal-%03d", i)]
		if s == nil {
			t.Errorf("normal-%03d never handled", i)
			continue
		}
		if s.count == 1 {
			once++
		}
		if s.deliveryCount == 0 {
			dc0++
		}
	}
	mu.Unlock()
	if once != hostileNormal || dc0 != hostileNormal {
		t.Errorf("%d of %d handled exactly once, %d with delivery-count 0", once, hostileNormal, dc0)
	}

	// The broker no longer has it.
	var left uint64
	require.Eventually(t, func() bool {
		var err error
		left, err = e.queued(ctx, q)
		return err == nil && left == 0
	}, 10*time.Second, 20*time.Millisecond, "the queue is empty")
	t.Logf("FIGURES %s | %s | poison %d, rejected %d | %d/%d handled once, %d with delivery-count 0 | link restarts %d | %v",
		kind, c.name, rn.Counters["poison"], rn.Counters["rejected"],
		once, hostileNormal, dc0, restarts(tree), took.Round(time.Millisecond))
}
