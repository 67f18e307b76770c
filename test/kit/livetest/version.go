package livetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Azure/go-amqp"
)

// Version is a RabbitMQ release, major.minor, as a test that holds for
// some releases only states it.
type Version struct{ Major, Minor int }

func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// AtLeast reports whether v is major.minor or later.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

var versions sync.Map // url -> Version

// RabbitMQ returns the release of the RabbitMQ broker at url, read from
// the product and version properties of its AMQP 1.0 open frame (RabbitMQ
// serves 0-9-1 on the same port). A broker that does not answer, or is not
// RabbitMQ, fails t: a test that asks holds for some releases only.
func RabbitMQ(t testing.TB, url string) Version {
	t.Helper()
	if v, ok := versions.Load(url); ok {
		return v.(Version)
	}
	v, err := rabbitMQ(url)
	if err != nil {
		t.Fatalf("the RabbitMQ version of the test broker: %v", err)
	}
	versions.Store(url, v)
	return v
}

func rabbitMQ(url string) (Version, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// go-amqp authenticates with the URL's userinfo (SASL PLAIN) when it has one.
	c, err := amqp.Dial(ctx, url, nil)
	if err != nil {
		return Version{}, fmt.Errorf("dial: %w", err)
	}
	defer func() { _ = c.Close() }()
	props := c.Properties()
	product, _ := props["product"].(string)
	version, _ := props["version"].(string)
	if product != "RabbitMQ" {
		return Version{}, fmt.Errorf("the broker says it is %q (version %q), not RabbitMQ", product, version)
	}
	return ParseVersion(version)
}

// ParseVersion reads "4.3.6" (or "4.3.6+1", "4.3") as 4.3.
func ParseVersion(s string) (Version, error) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("version %q is not major.minor[.patch]", s)
	}
	major, err1 := strconv.Atoi(parts[0])
	digits := parts[1]
	if i := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = digits[:i]
	}
	minor, err2 := strconv.Atoi(digits)
	if err1 != nil || err2 != nil {
		return Version{}, fmt.Errorf("version %q is not major.minor[.patch]", s)
	}
	return Version{major, minor}, nil
}
