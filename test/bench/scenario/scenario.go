package scenario

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// Defaults of the zero fields of Params: the figures of docs/BENCHMARKS.md.
const (
	DefaultBody   = 100
	DefaultCredit = 256
	DefaultWindow = 256
)

// replyCredit is the credit of the requester's reply receiver on the raw
// side: the App's reply receiver has a fixed window of 256
// (actors/session), whatever the responder's credit.
const replyCredit = 256

// adminTimeout bounds every management request and every close made outside
// the clock: declares, deletes, queue checks, App stops.
const adminTimeout = 30 * time.Second

// QueueType is the type of the queue under test.
type QueueType string

const (
	// Quorum is a durable quorum queue: what the RabbitMQ4 dialect declares
	// for Queue(name).
	Quorum QueueType = "quorum"
	// Classic is a durable classic queue: what the RabbitMQ4 dialect
	// declares for a subscription with WithClassicQueue.
	Classic QueueType = "classic"
)

// ParseQueueType reads "quorum" or "classic".
func ParseQueueType(s string) (QueueType, error) {
	switch q := QueueType(s); q {
	case Quorum, Classic:
		return q, nil
	}
	return "", fmt.Errorf("scenario: unknown queue type %q (want quorum or classic)", s)
}

// spec is the declaration both sides make for a queue of type q: durable,
// neither exclusive nor auto-delete, no arguments. That is exactly what
// amqpwire declares for Queue(name) (quorum) and for a subscription with
// WithClassicQueue (classic).
func (q QueueType) spec(name string) amqpwire.QueueSpec {
	typ := amqpwire.Quorum
	if q == Classic {
		typ = amqpwire.Classic
	}
	return amqpwire.QueueSpec{Name: name, Type: typ}
}

// Params are the settings of one live run, the same for both sides.
type Params struct {
	// URL names the RabbitMQ 4 broker.
	URL string
	// Queue is the type of the queue under test (of the request queue for
	// request/reply); zero means Quorum.
	Queue QueueType
	// Body is the body size in bytes; zero means DefaultBody.
	Body int
	// Credit is the receivers' link credit (the subscription's, the
	// responder's); zero means DefaultCredit.
	Credit int
	// Window is how many publishes may await their outcome at once in a
	// throughput run; zero means DefaultWindow. Request/reply runs one round
	// trip at a time and ignores it.
	Window int
	// N is the number of messages (round trips for request/reply) measured.
	N int
	// OnStart is called right before the clock starts and OnStop right
	// after it stops, on the caller's goroutine; benchmarks pass
	// b.ResetTimer and b.StopTimer. Either may be nil.
	OnStart, OnStop func()
}

func (p Params) normalize() (Params, error) {
	if p.URL == "" {
		return p, errors.New("scenario: Params.URL is empty")
	}
	if p.N <= 0 {
		return p, fmt.Errorf("scenario: Params.N is %d, want > 0", p.N)
	}
	if p.Queue == "" {
		p.Queue = Quorum
	}
	if _, err := ParseQueueType(string(p.Queue)); err != nil {
		return p, err
	}
	if p.Body <= 0 {
		p.Body = DefaultBody
	}
	if p.Credit <= 0 {
		p.Credit = DefaultCredit
	}
	if p.Window <= 0 {
		p.Window = DefaultWindow
	}
	return p, nil
}

// Result is what one measured run reports. Mallocs and Bytes are the
// runtime.MemStats deltas (Mallocs, TotalAlloc) of the whole process over
// the measured part, like go test's -benchmem.
type Result struct {
	// N is the number of ops measured: messages received and accepted, or
	// round trips.
	N int
	// Elapsed is the wall time of the measured part.
	Elapsed time.Duration
	// CPU is the CPU time (user + system) of the whole process over the
	// measured part: the client only, the broker is another process. CPUOK
	// is false where it cannot be measured.
	CPU   time.Duration
	CPUOK bool
	// Mallocs and Bytes are the heap allocations over the measured part.
	Mallocs, Bytes uint64
	// Latencies are the round-trip times of a request/reply run, sorted
	// ascending; nil for other runs.
	Latencies []time.Duration
}

// Rate is ops per second of wall time.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.N) / r.Elapsed.Seconds()
}

// CPUPerOp is the process CPU time per op; zero when CPUOK is false.
func (r Result) CPUPerOp() time.Duration {
	if !r.CPUOK || r.N <= 0 {
		return 0
	}
	return r.CPU / time.Duration(r.N)
}

// AllocsPerOp is heap allocations per op.
func (r Result) AllocsPerOp() float64 {
	if r.N <= 0 {
		return 0
	}
	return float64(r.Mallocs) / float64(r.N)
}

// BytesPerOp is heap bytes allocated per op.
func (r Result) BytesPerOp() float64 {
	if r.N <= 0 {
		return 0
	}
	return float64(r.Bytes) / float64(r.N)
}

// Percentile is the p-quantile (0 <= p <= 1, e.g. 0.99) of Latencies: the
// element at index p*(len-1), rounded down. Zero without latencies.
func (r Result) Percentile(p float64) time.Duration {
	lat := r.Latencies
	if len(lat) == 0 {
		return 0
	}
	if !slices.IsSorted(lat) {
		lat = slices.Clone(lat)
		slices.Sort(lat)
	}
	p = min(max(p, 0), 1)
	return lat[int(p*float64(len(lat)-1))]
}

// Median is the median of v (the mean of the middle two for an even count),
// 0 for none: how the A/B tools summarise the runs of one side.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// meter measures the part of a run between start and stop.
type meter struct {
	onStop func()
	ms     runtime.MemStats
	cpu    time.Duration
	cpuOK  bool
	t0     time.Time
}

func startMeter(onStart, onStop func()) *meter {
	if onStart != nil {
		onStart()
	}
	m := &meter{onStop: onStop}
	runtime.ReadMemStats(&m.ms)
	m.cpu, m.cpuOK = processCPU()
	m.t0 = time.Now()
	return m
}

func (m *meter) stop(n int) Result {
	elapsed := time.Since(m.t0)
	cpu, ok := processCPU()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if m.onStop != nil {
		m.onStop()
	}
	return Result{
		N: n, Elapsed: elapsed, CPU: cpu - m.cpu, CPUOK: ok && m.cpuOK,
		Mallocs: ms.Mallocs - m.ms.Mallocs, Bytes: ms.TotalAlloc - m.ms.TotalAlloc,
	}
}

// cleanups runs what a run must undo, last added first, whatever happened;
// its errors join the run's.
type cleanups []func() error

func (c *cleanups) add(f func() error) { *c = append(*c, f) }

func (c *cleanups) run() error {
	var errs []error
	for i := len(*c) - 1; i >= 0; i-- {
		errs = append(errs, (*c)[i]())
	}
	*c = nil
	return errors.Join(errs...)
}

// bounded returns a context for work outside the clock that must happen
// even when the run's context has ended (cleanup).
func bounded() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), adminTimeout)
}

// Admin opens the connection through which the live runs declare, check
// and delete their queues (RabbitMQ 4's management node); use
// conn.Management() and close it with conn.Close. It is never measured.
func Admin(ctx context.Context, url string) (*amqpwire.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	conn, err := amqpwire.New(amqpwire.Config{URL: url, Dialect: address.RabbitMQ4, ContainerID: "bench-admin"}).Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("scenario: admin connection: %w", err)
	}
	return conn.(*amqpwire.Conn), nil
}

// queueName returns a fresh queue name and has cl delete the queue.
func queueName(cl *cleanups, m *amqpwire.Management, prefix string) string {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := prefix + "." + hex.EncodeToString(rnd[:])
	cl.add(func() error {
		ctx, cancel := bounded()
		defer cancel()
		if err := brokeradmin.DeleteQueue(ctx, m, name); err != nil {
			return fmt.Errorf("delete queue %s: %w", name, err)
		}
		return nil
	})
	return name
}

// declare declares q through the management node.
func declare(ctx context.Context, m *amqpwire.Management, q amqpwire.QueueSpec) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if _, err := m.DeclareQueue(ctx, q); err != nil {
		return fmt.Errorf("declare queue %s: %w", q.Name, err)
	}
	return nil
}

// checkQueue fails unless the queue name is a durable queue of type typ
// holding want messages: every message received was accepted. Quorum
// queues apply the accepts asynchronously, so it waits a little for the
// count.
func checkQueue(m *amqpwire.Management, name string, typ QueueType, want uint64) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := m.QueueInfo(ctx, name)
		cancel()
		switch {
		case err != nil:
			return fmt.Errorf("queue %s: %w", name, err)
		case string(info.Type) != string(typ) || !info.Durable:
			return fmt.Errorf("queue %s is %s (durable %t), want a durable %s queue", name, info.Type, info.Durable, typ)
		case info.Messages == want:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("queue %s holds %d messages, want %d: not every message received was accepted", name, info.Messages, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
