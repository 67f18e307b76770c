package faults

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// proxy is a loopback TCP proxy in front of the broker that can cut every
// connection, black-hole traffic without closing anything, and add latency.
type proxy struct {
	ln     net.Listener
	target string

	blackhole atomic.Bool
	latency   atomic.Int64 // nanoseconds per forwarded chunk

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	cuts   atomic.Int64
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is host:port of the proxy.
func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		p.wg.Add(2)
		go p.pipe(client, server)
		go p.pipe(server, client)
	}
}

// pipe forwards from → to. While black-holed it reads and drops, as a
// network that loses every packet would: nothing is closed, nothing arrives.
func (p *proxy) pipe(from, to net.Conn) {
	defer p.wg.Done()
	defer p.untrack(to)
	defer p.untrack(from)
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d) // the added latency itself, not synchronisation
			}
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return
			}
			return
		}
	}
}

// Cut closes every proxied connection at once (both sides).
func (p *proxy) Cut() int {
	p.mu.Lock()
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.cuts.Add(1)
	return n
}

// BlackHole stops (on) or resumes (off) forwarding without closing.
func (p *proxy) BlackHole(on bool) { p.blackhole.Store(on) }

// Latency delays every forwarded chunk by d.
func (p *proxy) Latency(d time.Duration) { p.latency.Store(int64(d)) }

func (p *proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
