package amqpwire_test

import (
	"strings"
	"testing"
)

// The helpers below stand in for an assertion library so that the tests need
// nothing beyond the standard library and the packages under test.

func must(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func expect(t testing.TB, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Errorf(format, args...)
	}
}

func noSecret(t testing.TB, s, secret string) {
	t.Helper()
	if strings.Contains(s, secret) {
		t.Errorf("the password leaked into %q", s)
	}
}
