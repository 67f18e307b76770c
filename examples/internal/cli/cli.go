// Package cli holds what every example shares: the -url and -dialect flags
// that choose the broker (the in-process one by default), the App on it, its
// bounded start and stop, a quiet logger, and a run id that keeps one run's
// messages apart from an earlier run's on a live broker.
package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

// Broker is the broker an example runs on.
type Broker struct {
	URL     string
	Dialect string
	AMQP091 bool
}

// Flags registers -url and -dialect on the default flag set.
func Flags() *Broker {
	b := &Broker{}
	flag.StringVar(&b.URL, "url", "", "AMQP URL of a live broker (empty: the in-process broker)")
	flag.StringVar(&b.Dialect, "dialect", "rabbitmq4", "dialect of the live broker: artemis, rabbitmq4 or servicebus")
	flag.BoolVar(&b.AMQP091, "amqp091", false, "speak AMQP 0-9-1 to the live broker, which must be RabbitMQ (Dial091)")
	return b
}

// Live reports whether the example runs on a live broker.
func (b *Broker) Live() bool { return b.URL != "" }

// Connector returns the in-process broker, or Dial for -url (Dial091 with
// -amqp091).
func (b *Broker) Connector(containerID string) (amqpactor.Connector, error) {
	if b.URL == "" {
		return inproc.New(), nil
	}
	if b.AMQP091 {
		return amqpactor.Dial091(b.URL, amqpactor.WithContainerID(containerID+"-"+RunID())), nil
	}
	d := map[string]amqpactor.Dialect{"artemis": amqpactor.Artemis, "rabbitmq4": amqpactor.RabbitMQ4, "servicebus": amqpactor.ServiceBus}
	dl, ok := d[strings.ToLower(b.Dialect)]
	if !ok {
		return nil, fmt.Errorf("unknown dialect %q (artemis, rabbitmq4 or servicebus)", b.Dialect)
	}
	return amqpactor.Dial(b.URL, amqpactor.WithDialect(dl), amqpactor.WithContainerID(containerID+"-"+RunID())), nil
}

// Main registers the broker's flags (an example registers its own before),
// parses the command line, runs run on the broker and exits 1 with its error.
func Main(name string, run func(*Broker) error) {
	b := Flags()
	flag.Parse()
	Exit(name, run(b))
}

// App is an App named name on the broker (its container id is the name and
// the run id), logging with Logger; opts come after those.
func (b *Broker) App(name string, opts ...amqpactor.Option) (*amqpactor.App, error) {
	c, err := b.Connector(name)
	if err != nil {
		return nil, err
	}
	return amqpactor.New(c, append([]amqpactor.Option{amqpactor.WithLogger(Logger()), amqpactor.WithName(name)}, opts...)...), nil
}

// StopTimeout bounds the stop Start returns.
const StopTimeout = 5 * time.Second

// Start starts app with a context that ends after d and returns that
// context and stop, for a defer: stop stops the App (bounded by StopTimeout,
// logging a failure) and ends the context.
func Start(app *amqpactor.App, d time.Duration) (ctx context.Context, stop func(), err error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	if err := app.Start(ctx); err != nil {
		cancel()
		return nil, nil, err
	}
	return ctx, func() {
		defer cancel()
		sctx, scancel := context.WithTimeout(context.Background(), StopTimeout)
		defer scancel()
		if err := app.Stop(sctx); err != nil {
			Logger().Error("stop", "error", err)
		}
	}, nil
}

// Logger logs warnings and errors to stderr.
func Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

var runID = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// RunID names this run. Examples stamp their messages with it and ignore
// (accept) messages of other runs that a live queue may still hold.
func RunID() string { return runID }

// Exit prints err and exits 1, or returns when err is nil.
func Exit(name string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
