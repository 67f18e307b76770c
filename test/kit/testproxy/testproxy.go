// Package testproxy is the loopback TCP proxy the fault tests put in front
// of a broker: it can cut every connection through it, black-hole traffic
// without closing anything, and add latency.
package testproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Proxy forwards to one target; New starts it and the test's cleanup stops
// it.
type Proxy struct {
	ln     net.Listener
	target string

	blackhole atomic.Bool
	latency   atomic.Int64 // nanoseconds per forwarded chunk

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// New listens on a loopback port and forwards every connection to target.
func New(t testing.TB, target string) *Proxy {
	p, err := Start(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// Start is New for a program that is not a test (the soak): it stops with
// Close.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is host:port of the proxy.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) accept() {
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
func (p *Proxy) pipe(from, to net.Conn) {
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
			return
		}
	}
}

// Cut closes every proxied connection at once (both sides).
func (p *Proxy) Cut() int {
	p.mu.Lock()
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	return n
}

// BlackHole stops (on) or resumes (off) forwarding without closing.
func (p *Proxy) BlackHole(on bool) { p.blackhole.Store(on) }

// Latency delays every forwarded chunk by d.
func (p *Proxy) Latency(d time.Duration) { p.latency.Store(int64(d)) }

// Close stops the proxy and cuts every connection through it.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}
