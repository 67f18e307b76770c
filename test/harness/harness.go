// Package harness is what the App-level test suites share (the root
// package's tests, test/faults, test/cluster, test/chaos, test/live): unique
// names, bounded contexts, a log kept for a failing test, a tally of
// deliveries by message-id, a publisher of many ids, the tree as text, and a
// recorder of state changes by node path. It is test code: it takes a
// testing.TB and fails it.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// Unique returns prefix with a random suffix, so that tests sharing a broker
// never meet on a queue.
func Unique(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + "." + hex.EncodeToString(b[:])
}

// Bound is a context that ends after d or with the test.
func Bound(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// IDs returns n message-ids: prefix-00000, prefix-00001, ...
func IDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

// First returns at most the first n of s, for a failure message.
func First(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// LogBuffer collects log output from several goroutines. With Max set it
// keeps at most about Max bytes, so that a long run cannot fill memory with
// its log.
type LogBuffer struct {
	Max int
	mu  sync.Mutex
	b   bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Max > 0 && l.b.Len() >= l.Max {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// NewLog returns a logger at info level into a buffer that is printed if the
// test fails, and only then: a passing test stays quiet.
func NewLog(t testing.TB) (*slog.Logger, *LogBuffer) {
	buf := &LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("App log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelInfo})), buf
}

// EarlyEnd is the context of the i-th of a series of Starts that must end
// early, in turn: cancelled before it (i%4 == 0), cancelled while it runs
// (1), or ending after d (2 and 3).
func EarlyEnd(i int, d time.Duration) (context.Context, context.CancelFunc) {
	switch i % 4 {
	case 0:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	case 1:
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		return ctx, cancel
	default:
		return context.WithTimeout(context.Background(), d)
	}
}
