package amqp091_test

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

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/transport/amqp091"
)

// amqps:// verifies the server's certificate unless told otherwise, as on
// amqpwire. An HTTPS test server stands in for the broker: its certificate
// is for 127.0.0.1, signed by a CA nobody trusts by default.
func TestTLSVerifiesByDefault(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "https://")
	url := "amqps://user:" + secret + "@" + hostPort + "/"

	_, err := amqp091.New(amqp091.Config{URL: url, DialTimeout: 5 * time.Second}).Connect(context.Background())
	var unknown x509.UnknownAuthorityError
	require.True(t, errors.As(err, &unknown), "untrusted certificate: %v, want x509.UnknownAuthorityError", err)
	require.NotContains(t, err.Error(), "p@ss")

	// The server name is checked against the certificate: one it does not
	// name fails even with the CA trusted.
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	_, err = amqp091.New(amqp091.Config{URL: url, TLS: &tls.Config{RootCAs: pool, ServerName: "other.example"},
		DialTimeout: 5 * time.Second}).Connect(context.Background())
	var invalidHost x509.HostnameError
	require.True(t, errors.As(err, &invalidHost), "wrong server name: %v, want x509.HostnameError", err)

	// Trusting the CA gets past TLS (and then fails: the peer speaks HTTP).
	_, err = amqp091.New(amqp091.Config{URL: url, TLS: &tls.Config{RootCAs: pool}, DialTimeout: time.Second}).Connect(context.Background())
	require.Error(t, err, "an HTTP server passed for an AMQP broker")
	require.False(t, errors.As(err, &unknown), "TLS failed with the CA trusted: %v", err)
	require.NotContains(t, err.Error(), "p@ss")
	srv.CloseClientConnections()
}
