package amqpwire_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// amqps:// verifies the server's certificate unless told otherwise. An HTTPS
// test server stands in for the broker: its certificate is for 127.0.0.1 and
// example.com, signed by a CA nobody trusts by default.
func TestTLSVerifiesByDefault(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	url := "amqps://user:" + secret + "@" + hostPort + "/"

	_, err := amqpwire.New(amqpwire.Config{URL: url, DialTimeout: 5 * time.Second}).Connect(context.Background())
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Fatalf("untrusted certificate: %v, want x509.UnknownAuthorityError", err)
	}
	expect(t, strings.Contains(err.Error(), "TLS handshake"), "the error does not say TLS: %v", err)
	noSecret(t, err.Error(), secret)

	// Trusting the CA gets past TLS (and then fails, the peer speaking HTTP
	// and never answering the AMQP header).
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	_, err = amqpwire.New(amqpwire.Config{URL: url, TLS: &tls.Config{RootCAs: pool}, DialTimeout: 500 * time.Millisecond}).Connect(context.Background())
	if err == nil {
		t.Fatal("an HTTP server passed for an AMQP broker")
	}
	expect(t, !strings.Contains(err.Error(), "TLS handshake"), "TLS failed with the CA trusted: %v", err)
	noSecret(t, err.Error(), secret)

	// The server name is checked against the certificate: one it does not
	// name fails even with the CA trusted.
	_, err = amqpwire.New(amqpwire.Config{URL: url, TLS: &tls.Config{RootCAs: pool, ServerName: "other.example"}, DialTimeout: 5 * time.Second}).Connect(context.Background())
	var invalidHost x509.HostnameError
	expect(t, errors.As(err, &invalidHost), "wrong server name: %v, want x509.HostnameError", err)
	srv.CloseClientConnections()
}
