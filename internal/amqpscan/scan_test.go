package amqpscan

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNormalMessagesPass(t *testing.T) {
	for _, c := range normalMessages() {
		t.Run(c.name, func(t *testing.T) {
			if p, err := decode(c.payload); p != nil || err != nil {
				t.Fatalf("go-amqp itself fails on this normal message: panic %v, error %v", p, err)
			}
			if err := Check(c.payload, Limits{}); err != nil {
				t.Fatalf("Check(% x...) = %v, want nil", head(c.payload), err)
			}
		})
	}
}

func TestHostileMessagesRejected(t *testing.T) {
	for _, c := range hostileMessages() {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			err := Check(c.payload, c.lim)
			took := time.Since(start)
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Check = %v, want an *Error", err)
			}
			if !strings.Contains(e.Reason, c.reason) {
				t.Errorf("Reason %q, want it to contain %q", e.Reason, c.reason)
			}
			if e.Offset < 0 || e.Offset > len(c.payload) {
				t.Errorf("Offset %d outside the payload of %d bytes", e.Offset, len(c.payload))
			}
			if took > 100*time.Millisecond {
				t.Errorf("Check took %v", took)
			}
			// Why the scanner rejects it: what go-amqp does with it.
			if c.goamqp == "" {
				return
			}
			p, derr := decode(c.payload)
			switch c.goamqp {
			case "panic":
				if p == nil {
					t.Errorf("go-amqp did not panic (error %v): the case no longer shows why it is rejected", derr)
				} else {
					t.Logf("go-amqp panics: %v", p)
				}
			case "error":
				if p != nil || derr == nil {
					t.Errorf("go-amqp: panic %v, error %v; want an error", p, derr)
				} else {
					t.Logf("go-amqp fails: %v", derr)
				}
			case "ok":
				if p != nil || derr != nil {
					t.Errorf("go-amqp: panic %v, error %v; want it to decode (a policy rejection)", p, derr)
				}
			}
		})
	}
}

// TestTruncations cuts normal messages at every byte: Check must pass a
// prefix exactly when go-amqp decodes it (a cut between sections), and
// reject every cut inside a section.
func TestTruncations(t *testing.T) {
	msgs := []sample{{"small", smallNormal}}
	for _, c := range normalMessages() {
		if len(c.payload) < 4096 {
			msgs = append(msgs, c)
		}
	}
	for _, c := range msgs {
		for n := range len(c.payload) {
			cut := c.payload[:n]
			err := Check(cut, Limits{})
			p, derr := decode(cut)
			ok := p == nil && derr == nil
			if err == nil && !ok {
				t.Fatalf("%s cut at %d: Check passes, go-amqp: panic %v, error %v", c.name, n, p, derr)
			}
			if err != nil && ok {
				t.Fatalf("%s cut at %d: go-amqp decodes it, Check: %v", c.name, n, err)
			}
		}
	}
}

func TestZeroAllocations(t *testing.T) {
	for _, c := range normalMessages() {
		allocs := testing.AllocsPerRun(20, func() {
			if Check(c.payload, Limits{MaxSize: 1 << 30}) != nil {
				panic("rejected")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations a check", c.name, allocs)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	for _, tc := range []struct {
		depth, limit int
		ok           bool
	}{
		{32, 0, true}, {33, 0, false}, {1, 1, true}, {2, 1, false}, {100, 100, true}, {101, 100, false},
	} {
		for name, wrap := range map[string]func(...[]byte) []byte{
			"list": list8, "list32": list32, "map": func(v ...[]byte) []byte { return map32(sym8("k"), v[0]) },
			"described": func(v ...[]byte) []byte { return descSym("d", v[0]) },
		} {
			if name == "list" && tc.depth > 60 {
				continue
			}
			err := Check(nested(tc.depth, wrap), Limits{MaxDepth: tc.limit})
			if (err == nil) != tc.ok {
				t.Errorf("%d nested %s, limit %d: %v", tc.depth, name, tc.limit, err)
			}
		}
	}
	// An array of maps is two levels.
	arr := sec(0x77, array8(0xc1, 1, []byte{1, 0}))
	if err := Check(arr, Limits{MaxDepth: 2}); err != nil {
		t.Errorf("array of maps at limit 2: %v", err)
	}
	if err := Check(arr, Limits{MaxDepth: 1}); err == nil {
		t.Error("array of maps at limit 1 passed")
	}
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
