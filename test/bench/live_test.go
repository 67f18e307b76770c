package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// The live benchmarks run amqpactor and raw go-amqp side by side against the
// RabbitMQ 4 broker named by AMQP_URL, e.g. the test broker:
//
//	bash test/broker/rabbitmq4.sh start
//	AMQP_URL=$(bash test/broker/rabbitmq4.sh url) go test -run '^$' -bench Live -benchmem ./test/bench/
//
// Every run of a sub-benchmark uses queues of its own (a random suffix) and
// deletes them afterwards, so runs never see each other's messages.

const (
	// liveCredit is the receiver's link credit on both sides.
	liveCredit = 256
	// liveWindow is how many publishes may await their outcome at once on
	// both sides.
	liveWindow = 256
	// liveBody is the body size of every message.
	liveBody = 100
)

func liveURL(b *testing.B) string {
	b.Helper()
	u := os.Getenv("AMQP_URL")
	if u == "" {
		const msg = "AMQP_URL is not set: SKIPPING THE LIVE RabbitMQ 4 BENCHMARKS. " +
			"Start the test broker with `bash test/broker/rabbitmq4.sh start` and set " +
			"AMQP_URL=$(bash test/broker/rabbitmq4.sh url), or run `bash test/bench/run.sh`"
		// go test shows a benchmark's skip message only with -v: say it
		// on stderr too, once, so that a plain -bench run cannot miss it.
		skipOnce.Do(func() { fmt.Fprintln(os.Stderr, "bench: "+msg) })
		b.Skip(msg)
	}
	return u
}

var skipOnce sync.Once

// admin opens the connection through which the benchmarks declare and
// delete their queues (RabbitMQ 4's management node). It is never measured.
func admin(b *testing.B, url string) *amqpwire.Management {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := amqpwire.New(amqpwire.Config{URL: url, Dialect: address.RabbitMQ4, ContainerID: "bench-admin"}).Connect(ctx)
	if err != nil {
		b.Fatalf("admin connection: %v", err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn.(*amqpwire.Conn).Management()
}

// queueName returns a fresh queue name and deletes the queue when the
// calling (sub-)benchmark run ends.
func queueName(b *testing.B, m *amqpwire.Management, prefix string) string {
	b.Helper()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := prefix + "." + hex.EncodeToString(rnd[:])
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := m.DeleteQueue(ctx, name); err != nil {
			b.Errorf("delete queue %s: %v", name, err)
		}
	})
	return name
}

// declare declares q through the management node.
func declare(b *testing.B, m *amqpwire.Management, q amqpwire.QueueSpec) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := m.DeclareQueue(ctx, q); err != nil {
		b.Fatalf("declare queue %s: %v", q.Name, err)
	}
}

// expectEmpty fails the benchmark when messages are left in the queue: every
// message must have been received and accepted. Quorum queues apply the
// accepts asynchronously, so it waits a little for the count to reach zero.
func expectEmpty(b *testing.B, m *amqpwire.Management, name string) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		info, err := m.QueueInfo(ctx, name)
		cancel()
		switch {
		case err != nil:
			b.Errorf("queue %s: %v", name, err)
			return
		case info.Messages == 0:
			return
		case time.Now().After(deadline):
			b.Errorf("queue %s still holds %d messages: not every message was accepted", name, info.Messages)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func liveContext(b *testing.B) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	return ctx
}

func dialRaw(b *testing.B, ctx context.Context, url string) *amqp.Conn {
	b.Helper()
	conn, err := amqp.Dial(ctx, url, &amqp.ConnOptions{ContainerID: "bench-raw"})
	if err != nil {
		b.Fatalf("raw go-amqp dial: %v", err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return conn
}

func rawSession(b *testing.B, ctx context.Context, conn *amqp.Conn) *amqp.Session {
	b.Helper()
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		b.Fatalf("raw go-amqp session: %v", err)
	}
	return s
}

// rawReceiver attaches a receiver with go-amqp's own credit management and
// the settle modes amqpactor asks for: unsettled deliveries settled by the
// receiver first (at-least-once), or pre-settled ones when settled is true.
func rawReceiver(b *testing.B, ctx context.Context, s *amqp.Session, addr string, settled bool) *amqp.Receiver {
	b.Helper()
	o := &amqp.ReceiverOptions{Credit: liveCredit}
	if settled {
		ssm := amqp.SenderSettleModeSettled
		o.RequestedSenderSettleMode = &ssm
	} else {
		ssm, rsm := amqp.SenderSettleModeUnsettled, amqp.ReceiverSettleModeFirst
		o.RequestedSenderSettleMode, o.SettlementMode = &ssm, &rsm
	}
	r, err := s.NewReceiver(ctx, addr, o)
	if err != nil {
		b.Fatalf("raw go-amqp receiver on %s: %v", addr, err)
	}
	return r
}

func rawSender(b *testing.B, ctx context.Context, s *amqp.Session, addr string) *amqp.Sender {
	b.Helper()
	snd, err := s.NewSender(ctx, addr, nil)
	if err != nil {
		b.Fatalf("raw go-amqp sender on %s: %v", addr, err)
	}
	return snd
}

func accepted(st amqp.DeliveryState) error {
	if _, ok := st.(*amqp.StateAccepted); ok {
		return nil
	}
	return fmt.Errorf("publish not accepted: %T %+v", st, st)
}

func reportRate(b *testing.B, n int, start time.Time) {
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msg/s")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// cpuMeter measures the CPU time the whole benchmark process (client side
// only: the broker is another process) spends between start and report.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	d, ok := processCPU()
	return cpuMeter{start: d, ok: ok}
}

// report adds cpu-µs/op: client CPU per op, a figure the broker's speed and
// other load on the machine disturb far less than the rate does.
func (c cpuMeter) report(b *testing.B, n int) {
	end, ok := processCPU()
	if ok && c.ok && n > 0 {
		b.ReportMetric(float64(end-c.start)/float64(time.Microsecond)/float64(n), "cpu-µs/op")
	}
}

// BenchmarkLiveThroughput: end-to-end at-least-once on a fresh RabbitMQ 4
// quorum queue, 100-byte messages. Publishes are pipelined with at most 256
// awaiting their outcome; the receiver has credit 256 and accepts every
// message. One op is one message received and accepted. Both sides publish
// and consume on one connection, in separate sessions.
func BenchmarkLiveThroughput(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	b.Run("amqpactor", func(b *testing.B) { benchThroughputActor(b, url, m) })
	b.Run("raw-go-amqp", func(b *testing.B) { benchThroughputRaw(b, url, m) })
}

// benchThroughputActor: 256 goroutines each call app.Publish and wait for its
// outcome (so 256 are in flight, pipelined by the sender actor); the
// subscription (credit 256, the default 8 partitions) counts and accepts.
func benchThroughputActor(b *testing.B, url string, m *amqpwire.Management) {
	ctx := liveContext(b)
	name := queueName(b, m, "bench.tput.amqpactor")
	app := amqpactor.New(amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	var handled atomic.Int64
	var target atomic.Int64
	target.Store(1) // the warm-up message
	done := make(chan struct{}, 1)
	_, err := app.Subscribe(amqpactor.Queue(name), func(ctx context.Context, _ *amqpactor.Message) error {
		if handled.Add(1) == target.Load() {
			done <- struct{}{}
		}
		return nil
	}, amqpactor.WithCredit(liveCredit))
	if err != nil {
		b.Fatal(err)
	}
	stop := startApp(b, ctx, app)
	body := make([]byte, liveBody)
	// Warm up: attach the sender link and see one message through.
	if err := app.Publish(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}); err != nil {
		b.Fatal(err)
	}
	wait(b, ctx, done, &handled, 1)
	total := int64(b.N)
	handled.Store(0)
	target.Store(total)

	b.ReportAllocs()
	b.SetBytes(liveBody)
	b.ResetTimer()
	start, cpu := time.Now(), startCPU()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range liveWindow {
		wg.Go(func() {
			for next.Add(1) <= total {
				if err := app.Publish(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	wait(b, ctx, done, &handled, total)
	b.StopTimer()
	cpu.report(b, b.N)
	reportRate(b, b.N, start)
	stop()
	expectEmpty(b, m, name)
}

// startApp starts app; it is stopped by the returned func or, at the latest,
// when the run ends (a b.Fatal included).
func startApp(b *testing.B, ctx context.Context, app *amqpactor.App) (stop func()) {
	b.Helper()
	if err := app.Start(ctx); err != nil {
		b.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			if err := app.Stop(context.Background()); err != nil {
				b.Errorf("stop: %v", err)
			}
		})
	}
	b.Cleanup(stop)
	return stop
}

func wait(b *testing.B, ctx context.Context, done <-chan struct{}, handled *atomic.Int64, n int64) {
	b.Helper()
	select {
	case <-done:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
}

// benchThroughputRaw: the same with go-amqp alone. One goroutine writes with
// SendWithReceipt while fewer than 256 transfers await their outcome; a
// second awaits the receipts in order and frees a slot for each accepted one
// (the shape of amqpactor's sender actor, minus the actor). One goroutine
// receives (go-amqp's own credit, 256) and accepts each message.
func benchThroughputRaw(b *testing.B, url string, m *amqpwire.Management) {
	ctx := liveContext(b)
	name := queueName(b, m, "bench.tput.raw")
	declare(b, m, amqpwire.QueueSpec{Name: name}) // durable quorum, as the RabbitMQ4 dialect declares
	addr := "/queues/" + name
	conn := dialRaw(b, ctx, url)
	snd := rawSender(b, ctx, rawSession(b, ctx, conn), addr)
	rcv := rawReceiver(b, ctx, rawSession(b, ctx, conn), addr, false)
	body := make([]byte, liveBody)

	// Warm up: one message through.
	if err := snd.Send(ctx, amqp.NewMessage(body), nil); err != nil {
		b.Fatal(err)
	}
	if msg, err := rcv.Receive(ctx, nil); err != nil {
		b.Fatal(err)
	} else if err := rcv.AcceptMessage(ctx, msg); err != nil {
		b.Fatal(err)
	}

	total := b.N
	b.ReportAllocs()
	b.SetBytes(liveBody)
	b.ResetTimer()
	start, cpu := time.Now(), startCPU()
	received := make(chan error, 1)
	go func() {
		for range total {
			msg, err := rcv.Receive(ctx, nil)
			if err == nil {
				err = rcv.AcceptMessage(ctx, msg)
			}
			if err != nil {
				received <- err
				return
			}
		}
		received <- nil
	}()
	sendErr := sendPipelined(ctx, snd, body, total)
	if err := <-received; err != nil {
		b.Fatalf("receive: %v", err)
	}
	if sendErr != nil {
		b.Fatalf("send: %v", sendErr)
	}
	b.StopTimer()
	cpu.report(b, b.N)
	reportRate(b, b.N, start)
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = snd.Close(cctx)
	_ = rcv.Close(cctx)
	expectEmpty(b, m, name)
}

// sendPipelined sends n messages from one goroutine with SendWithReceipt,
// never more than liveWindow awaiting their outcome; a second goroutine awaits
// the receipts in order and frees a slot for each.
func sendPipelined(ctx context.Context, snd *amqp.Sender, body []byte, n int) error {
	slots := make(chan struct{}, liveWindow)
	receipts := make(chan amqp.SendReceipt, liveWindow)
	confirmed := make(chan error, 1)
	go func() {
		var first error
		for r := range receipts {
			st, err := r.Wait(ctx)
			if err == nil {
				err = accepted(st)
			}
			if err != nil && first == nil {
				first = err
			}
			<-slots
		}
		confirmed <- first
	}()
	var err error
	for range n {
		slots <- struct{}{}
		var r amqp.SendReceipt
		if r, err = snd.SendWithReceipt(ctx, amqp.NewMessage(body), nil); err != nil {
			<-slots
			break
		}
		receipts <- r
	}
	close(receipts)
	if cerr := <-confirmed; err == nil {
		err = cerr
	}
	return err
}

// BenchmarkLiveRequestReply: sequential request/reply round trips on
// RabbitMQ 4, 100-byte request and reply. The request queue is a quorum
// queue; replies go to a private classic reply queue and arrive pre-settled.
// The responder receives with credit 256, publishes the reply at-least-once
// (waits for its outcome) and then accepts the request. One op is one round
// trip; p50 and p99 are the round-trip latencies in microseconds.
func BenchmarkLiveRequestReply(b *testing.B) {
	url := liveURL(b)
	m := admin(b, url)
	b.Run("amqpactor", func(b *testing.B) { benchRequestActor(b, url, m) })
	b.Run("raw-go-amqp", func(b *testing.B) { benchRequestRaw(b, url, m) })
}

func reportLatencies(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p * float64(len(lat)-1))
		return float64(lat[i]) / float64(time.Microsecond)
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

// benchRequestActor: app.Request to a Responder subscription of the same App
// (the RabbitMQ4 dialect gives the App a private reply queue).
func benchRequestActor(b *testing.B, url string, m *amqpwire.Management) {
	ctx := liveContext(b)
	name := queueName(b, m, "bench.rpc.amqpactor")
	app := amqpactor.New(amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4)))
	_, err := app.Subscribe(amqpactor.Queue(name), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: req.Body}, nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	stop := startApp(b, ctx, app)
	body := make([]byte, liveBody)
	// Warm up: attach the request sender, the reply queue and receiver, and
	// the responder's reply sender.
	if _, err := app.Request(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body}); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for i := range b.N {
		t0 := time.Now()
		rep, err := app.Request(ctx, amqpactor.Queue(name), &amqpactor.Message{Body: body})
		lat[i] = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if len(rep.Body) != liveBody {
			b.Fatalf("reply of %d bytes", len(rep.Body))
		}
	}
	b.StopTimer()
	cpu.report(b, b.N)
	reportLatencies(b, lat)
	stop()
	expectEmpty(b, m, name)
}

// benchRequestRaw: the same with go-amqp alone, on one connection like the
// App: a sender session (request sender, reply sender), a responder session
// (receiver on the request queue, credit 256, accept after the reply is
// accepted) and a reply session (pre-settled receiver on the reply queue,
// credit 256). The requester sends each request with SendWithReceipt, waits
// for the reply and then checks the request's outcome, as App.Request does.
func benchRequestRaw(b *testing.B, url string, m *amqpwire.Management) {
	ctx := liveContext(b)
	rpc := queueName(b, m, "bench.rpc.raw")
	reply := queueName(b, m, "bench.reply.raw")
	declare(b, m, amqpwire.QueueSpec{Name: rpc})
	// Classic, transient, auto-delete like the App's reply queue; not
	// exclusive, because it is declared on the admin connection and RabbitMQ
	// lets only the declaring connection use an exclusive queue.
	declare(b, m, amqpwire.QueueSpec{Name: reply, Type: amqpwire.Classic, Transient: true, AutoDelete: true})
	rpcAddr, replyAddr := "/queues/"+rpc, "/queues/"+reply

	conn := dialRaw(b, ctx, url)
	sendSess := rawSession(b, ctx, conn)
	reqSnd := rawSender(b, ctx, sendSess, rpcAddr)
	replies := rawReceiver(b, ctx, rawSession(b, ctx, conn), replyAddr, true)
	requests := rawReceiver(b, ctx, rawSession(b, ctx, conn), rpcAddr, false)

	// The responder: one reply sender per reply-to address, attached on
	// first use and reused, as the App's publisher does.
	rctx, stop := context.WithCancel(ctx)
	responderDone := make(chan error, 1)
	go func() {
		err := respond(rctx, requests, sendSess)
		if rctx.Err() != nil {
			err = nil // stopped
		}
		responderDone <- err
	}()
	var once sync.Once
	stopResponder := func() {
		once.Do(func() {
			stop()
			if err := <-responderDone; err != nil {
				b.Errorf("responder: %v", err)
			}
		})
	}
	defer stopResponder()

	body := make([]byte, liveBody)
	var seq uint64
	roundTrip := func() error {
		seq++
		id := "raw-" + strconv.FormatUint(seq, 10)
		req := amqp.NewMessage(body)
		req.Properties = &amqp.MessageProperties{MessageID: id, ReplyTo: &replyAddr}
		receipt, err := reqSnd.SendWithReceipt(ctx, req, nil)
		if err != nil {
			return err
		}
		for {
			rep, err := replies.Receive(ctx, nil)
			if err != nil {
				return err
			}
			if rep.Properties != nil && rep.Properties.CorrelationID == id {
				if len(rep.GetData()) != liveBody {
					return fmt.Errorf("reply of %d bytes", len(rep.GetData()))
				}
				break
			}
		}
		st, err := receipt.Wait(ctx)
		if err != nil {
			return err
		}
		return accepted(st)
	}
	if err := roundTrip(); err != nil { // warm up: attach the reply sender
		b.Fatal(err)
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	for i := range b.N {
		t0 := time.Now()
		err := roundTrip()
		lat[i] = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu.report(b, b.N)
	reportLatencies(b, lat)
	stopResponder()
	expectEmpty(b, m, rpc)
}

// respond answers every request from requests until ctx ends: one reply
// sender per reply-to address, attached on first use and reused, as the
// App's publisher does; the reply is sent at-least-once (Send returns with
// its outcome) and then the request is accepted.
func respond(ctx context.Context, requests *amqp.Receiver, sess *amqp.Session) error {
	senders := map[string]*amqp.Sender{}
	for {
		req, err := requests.Receive(ctx, nil)
		if err != nil {
			return err
		}
		if req.Properties == nil || req.Properties.ReplyTo == nil {
			if err := requests.RejectMessage(ctx, req, nil); err != nil {
				return err
			}
			continue
		}
		to := *req.Properties.ReplyTo
		snd, ok := senders[to]
		if !ok {
			if snd, err = sess.NewSender(ctx, to, nil); err != nil {
				return err
			}
			senders[to] = snd
		}
		rep := amqp.NewMessage(req.GetData())
		rep.Properties = &amqp.MessageProperties{CorrelationID: req.Properties.MessageID}
		if err := snd.Send(ctx, rep, nil); err != nil {
			return err
		}
		if err := requests.AcceptMessage(ctx, req); err != nil {
			return err
		}
	}
}
