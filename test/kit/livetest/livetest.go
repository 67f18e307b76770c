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
	return fromEnv(t, "AMQP_URL", what, "the RabbitMQ 4 test broker", "rabbitmq4.sh")
}

// ArtemisURL returns the URL of the ActiveMQ Artemis test broker in
// ARTEMIS_URL; without one, the test is Missing it.
func ArtemisURL(t testing.TB, what string) string {
	t.Helper()
	return fromEnv(t, "ARTEMIS_URL", what, "the Artemis test broker", "artemis.sh")
}

// fromEnv returns the URL in the variable env, or says how to start the
// broker that script under test/broker runs.
func fromEnv(t testing.TB, env, what, broker, script string) string {
	t.Helper()
	u := os.Getenv(env)
	if u == "" {
		Missing(t, env+" is not set, so "+what+" cannot run. Start "+broker+" with "+
			"`bash test/broker/"+script+" start` and set "+env+"=$(bash test/broker/"+script+" url), "+
			"or run `make test` as root")
	}
	return u
}
