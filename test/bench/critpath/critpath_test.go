package main

import (
	"bytes"
	"net"
	"regexp"
	"runtime/trace"
	"strings"
	"testing"
)

// relay reads one byte at a time from in and hands it to a goroutine that
// writes it to out: the chain critpath must find back from each write is
// that goroutine, woken by the reader, woken by the network poller.
func relay(t *testing.T, in, out net.Conn, n int) {
	ch := make(chan byte)
	done := make(chan struct{})
	go func() { defer close(done); relayWrite(out, ch) }()
	relayRead(t, in, ch, n)
	close(ch)
	<-done
}

func relayRead(t *testing.T, in net.Conn, ch chan<- byte, n int) {
	b := make([]byte, 1)
	for range n {
		if _, err := in.Read(b); err != nil {
			t.Error(err)
			return
		}
		ch <- b[0]
	}
}

func relayWrite(out net.Conn, ch <-chan byte) {
	for b := range ch {
		_, _ = out.Write([]byte{b})
	}
}

func pipe(t *testing.T) (net.Conn, net.Conn) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func TestFindsTheChainBackToTheNetwork(t *testing.T) {
	const n = 200
	src, in := pipe(t)
	out, sink := pipe(t)
	back := make(chan struct{}, 1)
	go func() {
		b := make([]byte, n)
		for got := 0; got < n; {
			k, err := sink.Read(b)
			if err != nil {
				return
			}
			got += k
			for range k {
				back <- struct{}{}
			}
		}
	}()
	var buf bytes.Buffer
	if err := trace.Start(&buf); err != nil {
		t.Skip("tracing is on already:", err)
	}
	go func() {
		// One byte in flight at a time, so that each arrives on its own
		// and the network poller wakes the reader for it.
		for range n {
			_, _ = src.Write([]byte{1})
			<-back
		}
	}()
	relay(t, in, out, n)
	trace.Stop()

	tl, err := read(&buf, regexp.MustCompile(`critpath\.relayWrite`))
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.calls) < n {
		t.Fatalf("found %d writes under relayWrite, want %d", len(tl.calls), n)
	}
	gs := tl.groups()
	var found bool
	for _, g := range gs {
		if len(g.places) >= 2 && strings.Contains(g.places[0], "relayWrite") && strings.Contains(g.places[1], "relayRead") {
			found = len(g.chains) >= n/4
			break
		}
	}
	if !found {
		var b strings.Builder
		report(&b, gs, 0)
		t.Fatalf("no group of chains writer < reader for most writes:\n%s", b.String())
	}
}
