package token

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSource hands out tok-1, tok-2, … each living life.
type fakeSource struct {
	life  time.Duration
	calls atomic.Int64
}

func (s *fakeSource) get(context.Context) (string, time.Time, error) {
	n := s.calls.Add(1)
	return fmt.Sprintf("tok-secret-%d", n), time.Now().Add(s.life), nil
}

// testRefresher runs a Renewer on k with put and short retries; the
// returned func stops it and waits for it.
func testRefresher(t *testing.T, k *Cache, put func(context.Context, string) error, log *slog.Logger) (*State, func()) {
	t.Helper()
	g, err := k.Grant(context.Background(), "amqp://broker/")
	require.NoError(t, err)
	done := make(chan struct{})
	st := &State{}
	r := &Renewer{Cache: k, Put: put, Log: log, State: st, Done: done, RetryFirst: 50 * time.Millisecond, MinLead: 100 * time.Millisecond}
	finished := make(chan struct{})
	go func() { defer close(finished); r.Run(g) }()
	var once sync.Once
	stop := func() { once.Do(func() { close(done); <-finished }) }
	t.Cleanup(stop)
	return st, stop
}

// The broker is handed a new token before the one it holds expires, every
// time, and the next Connect uses the newest.
func TestRefresherRenewsBeforeExpiry(t *testing.T) {
	src := &fakeSource{life: 400 * time.Millisecond}
	k := NewCache(src.get)
	var mu sync.Mutex
	var puts []string
	var late atomic.Int64
	heldUntil := time.Now().Add(src.life)
	put := func(_ context.Context, tok string) error {
		mu.Lock()
		defer mu.Unlock()
		if time.Now().After(heldUntil) {
			late.Add(1)
		}
		heldUntil = time.Now().Add(src.life)
		puts = append(puts, tok)
		return nil
	}
	st, stop := testRefresher(t, k, put, slog.New(slog.DiscardHandler))
	time.Sleep(2 * time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(puts), 4, "renewed every token: %v", puts)
	require.Zero(t, late.Load(), "no token expired before its successor came")
	for i, p := range puts {
		require.Equal(t, fmt.Sprintf("tok-secret-%d", i+2), p, "each renewal a fresh token")
	}
	require.NoError(t, st.ExpiredWith(time.Now().Add(time.Hour)), "no failure recorded")
	require.Equal(t, puts[len(puts)-1], k.Newest(), "a reconnect uses the newest token")
}

// A renewal the broker keeps refusing is retried a bounded number of times
// and logged without the token; once the token expires the cause is kept
// for the connection's error, and nothing more is tried.
func TestRefresherFailsBoundedAndSaysWhy(t *testing.T) {
	src := &fakeSource{life: 2 * time.Second}
	k := NewCache(src.get)
	var tries atomic.Int64
	put := func(_ context.Context, tok string) error {
		tries.Add(1)
		return errors.New("broker says no to " + tok) // a peer that quotes the token
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&logs, &logMu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, stop := testRefresher(t, k, put, log)
	require.Eventually(t, func() bool { return st.ExpiredWith(time.Now()) != nil }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	stop()
	n := tries.Load()
	require.GreaterOrEqual(t, n, int64(2), "retried")
	require.LessOrEqual(t, n, int64(Tries), "bounded")
	err := st.ExpiredWith(time.Now())
	require.ErrorContains(t, err, "unrenewed")
	logMu.Lock()
	text := logs.String()
	logMu.Unlock()
	require.Contains(t, text, "token refresh failed")
	for _, s := range []string{text, err.Error()} {
		require.NotContains(t, s, "tok-secret", "no token printed")
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// A failing source fails the Connect, retried as an unreachable broker is.
func TestGrantFailingSource(t *testing.T) {
	k := NewCache(func(context.Context) (string, time.Time, error) { return "", time.Time{}, errors.New("idp down") })
	_, err := k.Grant(context.Background(), "amqp://broker/")
	require.ErrorContains(t, err, "idp down")
	var term interface{ Terminal() bool }
	require.False(t, errors.As(err, &term) && term.Terminal(), "a source that fails now may answer later")
	k = NewCache(func(context.Context) (string, time.Time, error) { return "", time.Time{}, nil })
	_, err = k.Grant(context.Background(), "amqp://broker/")
	require.ErrorContains(t, err, "empty token")
	var none *Cache
	g, err := none.Grant(context.Background(), "amqp://broker/")
	require.NoError(t, err)
	require.Empty(t, g.Token, "no source, no token")
}

// A token the broker refused at connect is not offered again.
func TestRefusedTokenNotReused(t *testing.T) {
	src := &fakeSource{life: time.Hour}
	k := NewCache(src.get)
	g1, err := k.Grant(context.Background(), "amqp://broker/")
	require.NoError(t, err)
	g2, err := k.Grant(context.Background(), "amqp://broker/")
	require.NoError(t, err)
	require.Equal(t, g1.Token, g2.Token, "a live token is reused")
	k.Refused()
	g3, err := k.Grant(context.Background(), "amqp://broker/")
	require.NoError(t, err)
	require.NotEqual(t, g1.Token, g3.Token, "a refused one is not")
}
