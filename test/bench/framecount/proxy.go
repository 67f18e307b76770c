package framecount

import (
	"errors"
	"io"
	"net"
	"sync"
)

// Proxy accepts loopback TCP connections and forwards each to Target,
// tallying both directions of all of them: ToBroker what the clients
// write, FromBroker what the broker writes.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  []net.Conn
	parts  [][2]*Parser // per connection: to the broker, from the broker
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on 127.0.0.1 in front of target (host:port).
func Listen(target string) (*Proxy, error) {
	if target == "" {
		return nil, errors.New("framecount: empty target")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Counts sums both directions over every connection so far.
func (p *Proxy) Counts() (toBroker, fromBroker Counts) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pp := range p.parts {
		toBroker = toBroker.Add(pp[0].Counts())
		fromBroker = fromBroker.Add(pp[1].Counts())
	}
	return toBroker, fromBroker
}

// Close stops accepting, closes every connection and waits for the
// forwarding goroutines.
func (p *Proxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		up, down := NewParser(), NewParser()
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			_ = b.Close()
			return
		}
		p.conns = append(p.conns, c, b)
		p.parts = append(p.parts, [2]*Parser{up, down})
		p.wg.Add(2)
		p.mu.Unlock()
		go p.pipe(b, c, up)
		go p.pipe(c, b, down)
	}
}

// pipe copies src to dst, tallied by t first (so a reader of what arrived
// finds it counted); when either side ends it closes both,
// as a connection cut would.
func (p *Proxy) pipe(dst, src net.Conn, t *Parser) {
	defer p.wg.Done()
	_, _ = io.Copy(io.MultiWriter(t, dst), src)
	_ = dst.Close()
	_ = src.Close()
}
