package livetest

import (
	"testing"
)

// recorder is a testing.TB that records how the test ended.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(args ...any)      { r.skipped = args[0].(string) }
func (r *recorder) Fatal(args ...any)     { r.failed = args[0].(string) }
func (r *recorder) Setenv(k, v string)    {}
func (r *recorder) Cleanup(f func())      {}
func (r *recorder) Logf(string, ...any)   {}
func (r *recorder) Errorf(string, ...any) {}

func TestMissingSkipsOrFails(t *testing.T) {
	t.Setenv("REQUIRE_LIVE", "")
	r := &recorder{TB: t}
	Missing(r, "no broker")
	if r.skipped != "SKIPPING: no broker" || r.failed != "" {
		t.Fatalf("without REQUIRE_LIVE: skipped %q, failed %q; want a skip", r.skipped, r.failed)
	}

	t.Setenv("REQUIRE_LIVE", "1")
	r = &recorder{TB: t}
	Missing(r, "no broker")
	if r.failed != "REQUIRE_LIVE=1: no broker" {
		t.Fatalf("under REQUIRE_LIVE=1: skipped %q, failed %q; want a failure", r.skipped, r.failed)
	}
}

func TestURL(t *testing.T) {
	t.Setenv("AMQP_URL", "amqp://127.0.0.1:5673/")
	if u := URL(t, "x"); u != "amqp://127.0.0.1:5673/" {
		t.Fatalf("URL = %q", u)
	}
	t.Setenv("AMQP_URL", "")
	t.Setenv("REQUIRE_LIVE", "1")
	r := &recorder{TB: t}
	URL(r, "the live tests")
	if r.failed == "" {
		t.Fatal("an unset AMQP_URL under REQUIRE_LIVE=1 must fail")
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string]Version{"4.0.5": {4, 0}, "4.3.6": {4, 3}, "4.3": {4, 3}, "4.10.0-rc.1": {4, 10}, "4.2+1": {4, 2}} {
		got, err := ParseVersion(in)
		if err != nil || got != want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4", "x.y", "4.x"} {
		if v, err := ParseVersion(in); err == nil {
			t.Errorf("ParseVersion(%q) = %v; want an error", in, v)
		}
	}
	if !(Version{4, 3}).AtLeast(4, 2) || (Version{4, 0}).AtLeast(4, 3) || !(Version{5, 0}).AtLeast(4, 3) {
		t.Error("AtLeast")
	}
}

func TestRabbitMQVersionLive(t *testing.T) {
	u := URL(t, "the broker version probe")
	v := RabbitMQ(t, u)
	if !v.AtLeast(4, 0) {
		t.Fatalf("the test broker is RabbitMQ %v; the targets are 4.0 and later", v)
	}
	t.Logf("the test broker is RabbitMQ %v", v)
}
