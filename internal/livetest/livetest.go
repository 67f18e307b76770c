// Package livetest holds the one rule of every test that needs something
// outside the test process (a live broker, a peer client, a parser, root):
// without it the test skips, loudly; under REQUIRE_LIVE=1, which CI sets,
// it fails instead, so that nothing CI should test is skipped unseen.
package livetest

import (
	"os"
	"testing"
)

// Missing skips t, saying why, or fails it under REQUIRE_LIVE=1.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("REQUIRE_LIVE") == "1" {
		t.Fatal("REQUIRE_LIVE=1: " + why)
	}
	t.Skip("SKIPPING: " + why)
}

// URL returns the broker URL in AMQP_URL; without one, the test is Missing
// the broker (what names the tests that need it).
func URL(t testing.TB, what string) string {
	t.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		Missing(t, "AMQP_URL is not set, so "+what+" cannot run. Start the RabbitMQ 4 test broker with "+
			"`bash test/broker/rabbitmq4.sh start` and set AMQP_URL=$(bash test/broker/rabbitmq4.sh url), "+
			"or run `make test` as root")
	}
	return u
}

// ArtemisURL returns the URL of the ActiveMQ Artemis test broker in
// ARTEMIS_URL; without one, the test is Missing it.
func ArtemisURL(t testing.TB, what string) string {
	t.Helper()
	u := os.Getenv("ARTEMIS_URL")
	if u == "" {
		Missing(t, "ARTEMIS_URL is not set, so "+what+" cannot run. Start the Artemis test broker with "+
			"`bash test/broker/artemis.sh start` and set ARTEMIS_URL=$(bash test/broker/artemis.sh url), "+
			"or run `make test` as root")
	}
	return u
}
