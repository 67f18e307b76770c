package address_test

import (
	"strings"
	"testing"

	"github.com/amqpactor/amqpactor/address"
)

func TestMatchBindingKey(t *testing.T) {
	cases := []struct {
		pattern, key string
		want         bool
	}{
		{"#", "", true},
		{"#", "a", true},
		{"#", "a.b.c", true},
		{"*", "", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"orders.*.eu", "orders.new.eu", true},
		{"orders.*.eu", "orders.eu", false},
		{"orders.*.eu", "orders.new.big.eu", false},
		{"orders.*.eu", "orders.new.us", false},
		{"orders.#", "orders", true},
		{"orders.#", "orders.new", true},
		{"orders.#", "orders.new.eu", true},
		{"orders.#", "ordersx.new", false},
		{"orders.#", "payments.orders", false},
		{"#.us", "us", true},
		{"#.us", "orders.new.us", true},
		{"#.us", "orders.us.eu", false},
		{"#.us", "", false},
		{"a.#.b", "a.b", true},
		{"a.#.b", "a.x.y.b", true},
		{"a.#.b", "a.x.y", false},
		{"a.#.#.b", "a.b", true},
		{"#.#", "", true},
		{"*.#", "", false},
		{"*.#", "a", true},
		{"#.*", "a.b.c", true},
		{"a.*", "a.", true}, // an empty last word is a word
		{"a.b", "a.b", true},
		{"a.b", "a.bc", false},
	}
	for _, c := range cases {
		if got := address.MatchBindingKey(c.pattern, c.key); got != c.want {
			t.Errorf("MatchBindingKey(%q, %q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
		k, err := address.ParseBindingKeys(address.Topic("t"), []string{c.pattern})
		if err != nil {
			if !strings.HasSuffix(c.key, ".") {
				t.Fatalf("ParseBindingKeys(%q): %v", c.pattern, err)
			}
			continue
		}
		if got := k.Match(c.key); got != c.want {
			t.Errorf("BindingKeys{%q}.Match(%q) = %v, want %v", c.pattern, c.key, got, c.want)
		}
	}
}

func TestBindingKeysSet(t *testing.T) {
	k, err := address.ParseBindingKeys(address.Topic("t"), []string{"orders.*.eu", "#.us", "orders.*.eu"})
	if err != nil {
		t.Fatal(err)
	}
	if got := k.String(); got != "#.us orders.*.eu" {
		t.Fatalf("keys %q, want sorted and without duplicates", got)
	}
	for key, want := range map[string]bool{"orders.new.eu": true, "x.us": true, "orders.new": false, "": false} {
		if k.Match(key) != want {
			t.Errorf("Match(%q) = %v, want %v", key, !want, want)
		}
	}
	none, err := address.ParseBindingKeys(address.Topic("t"), nil)
	if err != nil || !none.All() || none.String() != "#" || !none.Match("") {
		t.Fatalf("no patterns: %v %q %v", err, none.String(), none.All())
	}
	all, err := address.ParseBindingKeys(address.Topic("t"), []string{"a.b", "#"})
	if err != nil || !all.All() {
		t.Fatalf(`"#" among others: all=%v, %v`, all.All(), err)
	}
}

func TestBindingKeysInvalid(t *testing.T) {
	for _, p := range []string{"", "a..b", ".a", "a.", "ord*", "a.#b", "a\nb", "a\x00", "\xff", strings.Repeat("a", 256)} {
		_, err := address.ParseBindingKeys(address.Topic("events"), []string{"ok", p})
		if err == nil {
			t.Errorf("pattern %q: no error", p)
			continue
		}
		if !strings.Contains(err.Error(), "topic:events") {
			t.Errorf("pattern %q: error %q does not name the address", p, err)
		}
	}
	_, err := address.ParseBindingKeys(address.Queue("orders"), []string{"a.*"})
	if err == nil || !strings.Contains(err.Error(), "queue:orders") {
		t.Fatalf("keys on a queue: %v", err)
	}
	if _, err := address.ParseBindingKeys(address.Queue("orders"), nil); err != nil {
		t.Fatalf("no keys on a queue: %v", err)
	}
}
