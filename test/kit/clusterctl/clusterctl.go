// Package clusterctl is the three-node RabbitMQ 4 test cluster as the
// cluster tests and the soak use it: the nodes' URLs (AMQP_CLUSTER_URLS),
// an App's connector over them with failover, the management client of the
// first node that answers, and the test broker's script that kills and
// restarts a node. One copy, so the two harnesses kill nodes the same way.
package clusterctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// EnvURLs names the variable that lists the cluster's AMQP URLs, space
// separated, as `test/broker/rabbitmq4.sh cluster-urls` prints them.
const EnvURLs = "AMQP_CLUSTER_URLS"

// Nodes is how many nodes the test cluster has.
const Nodes = 3

// URLs returns the URLs EnvURLs names (nil when unset).
func URLs() []string { return strings.Fields(os.Getenv(EnvURLs)) }

// Dial returns a connector to the first of urls with the others as its
// failover endpoints, on the RabbitMQ 4 dialect, with opts after those.
func Dial(urls []string, opts ...amqpactor.DialOption) amqpactor.Connector {
	all := append([]amqpactor.DialOption{amqpactor.WithDialect(amqpactor.RabbitMQ4), amqpactor.WithFailover(urls[1:]...)}, opts...)
	return amqpactor.Dial(urls[0], all...)
}

// Script runs the test broker's script at path with args, bounded by ctx;
// a failure carries the script's output.
func Script(ctx context.Context, path string, args ...string) error {
	out, err := exec.CommandContext(ctx, "bash", append([]string{path}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", path, strings.Join(args, " "), err, out)
	}
	return nil
}

// Kill crashes node n (1..Nodes): kill -9 of its Erlang VM.
func Kill(ctx context.Context, script string, n int) error {
	return Script(ctx, script, "cluster-kill", fmt.Sprint(n))
}

// Restart starts node n again with its data; it returns once the node
// answers (it rejoins the cluster).
func Restart(ctx context.Context, script string, n int) error {
	return Script(ctx, script, "cluster-restart", fmt.Sprint(n))
}

// Management runs f with the management client of a connection to the
// first node of urls that answers, and returns the last dial's error when
// none does.
func Management(ctx context.Context, urls []string, f func(ctx context.Context, m *amqpwire.Management)) error {
	lastErr := errors.New("clusterctl: no node URLs")
	for _, u := range urls {
		c, err := amqpwire.New(amqpwire.Config{URL: u, Dialect: amqpactor.RabbitMQ4}).Connect(ctx)
		if err != nil {
			lastErr = err
			continue
		}
		defer func() { _ = c.Close(ctx) }()
		f(ctx, c.(*amqpwire.Conn).Management())
		return nil
	}
	return lastErr
}
