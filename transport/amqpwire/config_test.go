package amqpwire_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

const secret = "s3cr3t-Pa55"

// Every URL here carries the password; none of String, or the error Connect
// returns, may contain it.
func TestRedaction(t *testing.T) {
	urls := []string{
		"amqp://user:" + secret + "@192.0.2.1:5672/",     // refused: PLAIN over TCP to a remote host
		"amqp://user:" + secret + "@127.0.0.1:1/",        // dial fails (nothing listens on port 1)
		"amqps://user:" + secret + "@127.0.0.1:1/",       // same, TLS
		"http://user:" + secret + "@127.0.0.1:5672/",     // bad scheme
		"amqp://user:" + secret + "@host:port/",          // bad port
		"amqp://user:" + secret + "@[::1/",               // bad IPv6 literal
		"amqp://user:" + secret + "@127.0.0.1:5672/%zz",  // bad escape
		"amqp://user:" + secret + "\x7f@127.0.0.1:5672/", // control character
		"amqp://user:" + secret + "@/",                   // no host
		"user:" + secret + "@127.0.0.1:5672",             // no scheme
	}
	for _, u := range urls {
		t.Run(strings.ReplaceAll(u, "/", "_"), func(t *testing.T) {
			c := amqpwire.New(amqpwire.Config{URL: u, DialTimeout: time.Second})
			noSecret(t, c.String(), secret)
			conn, err := c.Connect(context.Background())
			if conn != nil {
				_ = conn.Close(context.Background())
			}
			if err == nil {
				t.Fatal("Connect succeeded")
			}
			noSecret(t, err.Error(), secret)
			expect(t, strings.HasPrefix(err.Error(), "amqpactor: connect "), "error does not name the connect: %v", err)
			t.Log(err)
		})
	}
}

func TestStringIsRedactedURL(t *testing.T) {
	c := amqpwire.New(amqpwire.Config{URL: "amqps://alice:" + secret + "@broker.example:5671/vh", Dialect: address.RabbitMQ4})
	expect(t, c.String() == "amqps://alice:xxxxx@broker.example:5671/vh", "String() = %q", c.String())
	expect(t, c.Dialect() == address.RabbitMQ4, "Dialect() = %v", c.Dialect())
}

// PLAIN over plain TCP to a host that is not loopback is refused before
// anything is dialled: 192.0.2.1 (TEST-NET-1) never answers, so a dial would
// take the whole DialTimeout.
func TestPlainToRemoteHostRefusedBeforeDial(t *testing.T) {
	c := amqpwire.New(amqpwire.Config{URL: "amqp://user:" + secret + "@192.0.2.1:5672/", DialTimeout: 5 * time.Second})
	start := time.Now()
	_, err := c.Connect(context.Background())
	if err == nil {
		t.Fatal("Connect succeeded")
	}
	expect(t, time.Since(start) < time.Second, "Connect took %v: it must refuse without dialling", time.Since(start))
	expect(t, errors.Is(err, amqpwire.ErrCleartextCredentials), "not ErrCleartextCredentials: %v", err)
	expect(t, strings.Contains(err.Error(), "InsecurePlain") && strings.Contains(err.Error(), "amqps://"),
		"the error does not say how to opt in: %v", err)
	noSecret(t, err.Error(), secret)
	t.Log(err)

	// Opting in dials (and here times out).
	c = amqpwire.New(amqpwire.Config{URL: "amqp://user:" + secret + "@192.0.2.1:5672/",
		InsecurePlain: true, DialTimeout: 200 * time.Millisecond})
	_, err = c.Connect(context.Background())
	if err == nil {
		t.Fatal("Connect succeeded")
	}
	expect(t, !errors.Is(err, amqpwire.ErrCleartextCredentials), "refused despite InsecurePlain: %v", err)
	noSecret(t, err.Error(), secret)

	// Anonymous and loopback are fine: the refusal is about passwords on the wire.
	for _, u := range []string{"amqp://192.0.2.1:1/", "amqp://u:" + secret + "@127.0.0.1:1/", "amqp://u:" + secret + "@[::1]:1/", "amqp://u:" + secret + "@localhost:1/"} {
		_, err = amqpwire.New(amqpwire.Config{URL: u, DialTimeout: 200 * time.Millisecond}).Connect(context.Background())
		if err == nil {
			t.Fatalf("%s: Connect succeeded", u)
		}
		expect(t, !errors.Is(err, amqpwire.ErrCleartextCredentials), "%s: refused: %v", u, err)
		noSecret(t, err.Error(), secret)
	}
}

// A password holding what ends a URL's authority ('/', '?', '#'), an '@',
// a ':' or a '%' that starts no escape is the password: the URL still
// dials its host, and neither String nor the error shows any part of it.
func TestRedactionReservedCharacters(t *testing.T) {
	for _, pw := range []string{"Kq7/Zv9Wm", "4817/2930xQ", "Kq7#Zv9Wm", "Kq7?Zv9Wm", "Kq7%zzZv9Wm", "Kq7@Zv9Wm", "Kq7:Zv9Wm", "Kq/7#Z?v%zz9@W:m"} {
		c := amqpwire.New(amqpwire.Config{URL: "amqp://user:" + pw + "@127.0.0.1:1/vh", DialTimeout: time.Second})
		expect(t, c.String() == "amqp://user:xxxxx@127.0.0.1:1/vh", "%q: String() = %q", pw, c.String())
		_, err := c.Connect(context.Background())
		if err == nil {
			t.Fatalf("%q: Connect succeeded", pw)
		}
		expect(t, strings.Contains(err.Error(), "dial tcp 127.0.0.1:1"), "%q: not the URL's host: %v", pw, err)
		for i := range len(pw) {
			for j := i + 3; j <= len(pw); j++ {
				noSecret(t, err.Error(), pw[i:j])
				noSecret(t, c.String(), pw[i:j])
			}
		}
	}
}
