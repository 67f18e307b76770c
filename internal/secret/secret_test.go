package secret

import (
	"fmt"
	"strings"
	"testing"
)

type holder struct {
	url  String
	next *holder
}

// TestNeverPrinted: no verb, at any depth, shows the secret.
func TestNeverPrinted(t *testing.T) {
	h := &holder{url: New("pw-Kq7Zv9"), next: &holder{url: New("pw-Kq7Zv9")}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		for _, v := range []any{h, *h, []*holder{h}, map[string]holder{"k": *h}} {
			if s := fmt.Sprintf(verb, v); strings.Contains(s, "Kq7Zv9") {
				t.Fatalf("%s shows the secret: %s", verb, s)
			}
		}
	}
	if h.url() != "pw-Kq7Zv9" {
		t.Fatal("the value is kept")
	}
}
