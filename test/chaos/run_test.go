package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/inproc"
	"github.com/amqpactor/amqpactor/internal/testhook"
	"github.com/amqpactor/amqpactor/test/harness"
)

// Bounds of one run. Every wait of the harness has one.
const (
	startBound   = 10 * time.Second
	stopBound    = 10 * time.Second
	stopSlack    = 2 * time.Second // over stopBound, for the goroutine that measures it
	publishBound = 2 * time.Second
	stepBound    = 30 * time.Second // for the workload to reach a step
	settleBound  = 60 * time.Second // for every confirmed message to be handled at the end
	reqSlack     = 2 * time.Second  // a request may answer this late past its deadline
)

var ignoreThrottle = goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1")

// incarnation is one started App: the svc App (restarted by stop-svc) or
// one fleet replica.
type incarnation struct {
	id   int64
	name string
	sys  *actor.ActorSystem
	app  *amqpactor.App
	subs map[string]*amqpactor.Subscription
}

// result is what a run measured, for the figures.
type result struct {
	published, handled, dups, failures int64
	overlaps                           int // handovers after a lost link while the old handler ran
	faults                             map[string]int
	requests, reqErrs                  int
	txCommitted, txRolledBack          int
	maxStop                            time.Duration
}

type run struct {
	t   testing.TB
	sc  *scenario
	b   *inproc.Broker
	rec *recorder
	log *harness.LogBuffer

	nextInc atomic.Int64
	mu      sync.Mutex
	svc     *incarnation
	fleet   []*incarnation
	retired []*incarnation // stopped, their actor systems shut at the end

	txns     []*txOutcome
	progress atomic.Int64 // operations confirmed (or given up at the end)
	res      result
	resMu    sync.Mutex
}

// runSeed runs the scenario of seed and fails t, naming the seed and its
// schedule, if an invariant broke.
func runSeed(t *testing.T, seed uint64) result {
	t.Helper()
	sc := generate(seed)
	if testing.Verbose() {
		t.Logf("%s", sc)
	}
	baseline := goleak.IgnoreCurrent()
	r := &run{t: t, sc: sc, b: inproc.New(), rec: newRecorder(), log: &harness.LogBuffer{Max: 1 << 20}}
	r.res.faults = map[string]int{}
	failed := false
	fail := func(format string, args ...any) {
		failed = true
		t.Errorf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	r.execute(fail)
	if err := goleak.Find(baseline, ignoreThrottle); err != nil {
		fail("goroutines left after the run: %v", err)
	}
	if failed || t.Failed() {
		t.Logf("replay: go test -race ./test/chaos -seed %d -v\n%s", seed, sc)
		if testing.Verbose() {
			var keep []string
			for _, l := range strings.Split(r.log.String(), "\n") {
				if !strings.Contains(l, "handler panicked") && !strings.Contains(l, "handler failed") {
					keep = append(keep, l)
				}
			}
			t.Logf("App log (tail, without handler failures):\n%s", tail(strings.Join(keep, "\n"), 12000))
		}
	}
	return r.res
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (r *run) execute(fail func(string, ...any)) {
	defer r.shutdownSystems()
	svc, err := r.startSvc()
	if err != nil {
		fail("starting svc: %v", err)
		return
	}
	r.svc = svc
	for range r.sc.Replicas {
		inc, err := r.startReplica()
		if err != nil {
			fail("starting a fleet replica: %v", err)
			r.stopAll(fail)
			return
		}
		r.fleet = append(r.fleet, inc)
	}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	r.workload(ctx, &wg, fail)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()

	total := int64(r.sc.ops())
	for i, s := range r.sc.Steps {
		at := total * int64(s.At) / 1000
		if !waitFor(stepBound, func() bool { return r.progress.Load() >= at || isClosed(finished) }) {
			fail("step %d (%s): the workload stalled at %d of %d operations\n%s", i, s, r.progress.Load(), total, r.treeText())
			break
		}
		if err := r.inject(s); err != nil {
			fail("step %d (%s): %v", i, s, err)
			break
		}
		r.res.faults[s.Kind]++
	}
	r.b.ClearRefusals()
	r.b.ClearRejects()
	r.resumeAll()
	if !waitFor(stepBound+settleBound, func() bool { return isClosed(finished) }) {
		fail("the workload did not finish (%d of %d operations)\n%s", r.progress.Load(), total, r.treeText())
	}
	cancel()
	wg.Wait()

	r.checkDelivered(fail)
	r.checkTransactions(fail)
	r.checkTrees(fail)
	if msg, n := r.rec.report(); n > 0 {
		fail("%d invariant violations:\n%s\n%s", n, msg, r.rec.histories())
	}
	r.stopAll(fail)
	r.res.published = int64(r.rec.confirmed())
	r.res.handled = r.rec.handledN.Load()
	r.res.dups = r.rec.dups.Load()
	r.res.failures = r.rec.failures.Load()
	r.rec.mu.Lock()
	r.res.overlaps = r.rec.forgiven
	r.rec.mu.Unlock()
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
}

func (r *run) newApp(name string) (*amqpactor.App, *actor.ActorSystem) {
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(slog.DiscardHandler)
	}))
	log := slog.New(slog.NewTextHandler(io.MultiWriter(r.log), &slog.HandlerOptions{Level: slog.LevelWarn}))
	app := amqpactor.New(r.b, amqpactor.WithName(name), amqpactor.WithActorSystem(sys), amqpactor.WithLogger(log),
		amqpactor.WithBackoff(2*time.Millisecond, 40*time.Millisecond), amqpactor.WithCloseTimeout(2*time.Second))
	return app, sys
}

// startSvc starts an incarnation of the svc App: the queue, topic, rpc and
// txq subscriptions.
func (r *run) startSvc() (*incarnation, error) {
	app, sys := r.newApp("svc")
	inc := &incarnation{id: r.nextInc.Add(1), name: "svc", sys: sys, app: app, subs: map[string]*amqpactor.Subscription{}}
	for _, c := range []string{"q0", "q1", "events/t0", "events/t1", "txq"} {
		addr, name := amqpactor.Queue(c), c
		if strings.HasPrefix(c, "events/") {
			addr, name = amqpactor.Topic("events"), strings.TrimPrefix(c, "events/")
		}
		s, err := r.subscribe(inc, c, addr, amqpactor.WithSubscriptionName(name))
		if err != nil {
			r.shutdown(inc)
			return nil, err
		}
		inc.subs[c] = s
	}
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: append([]byte("re:"), req.Body...)}, nil
	}), amqpactor.WithSubscriptionName("rpc"))
	if err != nil {
		r.shutdown(inc)
		return nil, err
	}
	if err := r.start(inc); err != nil {
		return nil, err
	}
	return inc, nil
}

func (r *run) startReplica() (*incarnation, error) {
	app, sys := r.newApp("fleet")
	inc := &incarnation{id: r.nextInc.Add(1), name: "fleet", sys: sys, app: app, subs: map[string]*amqpactor.Subscription{}}
	s, err := r.subscribe(inc, "fleet", amqpactor.Partitioned("fleet", r.sc.FleetN))
	if err != nil {
		r.shutdown(inc)
		return nil, err
	}
	inc.subs["fleet"] = s
	if err := r.start(inc); err != nil {
		return nil, err
	}
	return inc, nil
}

func (r *run) start(inc *incarnation) error {
	ctx, cancel := context.WithTimeout(context.Background(), startBound)
	defer cancel()
	if err := inc.app.Start(ctx); err != nil {
		r.shutdown(inc)
		return fmt.Errorf("start %s (incarnation %d): %w", inc.name, inc.id, err)
	}
	return nil
}

// shutdown stops an App that failed to start and keeps its system for the
// end.
func (r *run) shutdown(inc *incarnation) {
	ctx, cancel := context.WithTimeout(context.Background(), stopBound)
	defer cancel()
	_ = inc.app.Stop(ctx)
	r.mu.Lock()
	r.retired = append(r.retired, inc)
	r.mu.Unlock()
}

func (r *run) shutdownSystems() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, inc := range r.retired {
		inc.sys.Shutdown()
	}
	r.retired = nil
}

// stopInc stops inc and checks that Stop returned within its bound.
func (r *run) stopInc(inc *incarnation) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopBound)
	defer cancel()
	t0 := time.Now()
	err := inc.app.Stop(ctx)
	el := time.Since(t0)
	r.resMu.Lock()
	r.res.maxStop = max(r.res.maxStop, el)
	r.resMu.Unlock()
	r.mu.Lock()
	r.retired = append(r.retired, inc)
	r.mu.Unlock()
	if el > stopBound/2 {
		// Within its bound, but a graceful stop that long waited on
		// something: say which, to replay it.
		r.t.Logf("Stop of %s (incarnation %d) took %s (err %v)", inc.name, inc.id, el.Round(time.Millisecond), err)
	}
	if el > stopBound+stopSlack {
		return fmt.Errorf("Stop of %s (incarnation %d) took %s, over its bound %s (err %v)", inc.name, inc.id, el, stopBound, err)
	}
	return nil
}

func (r *run) stopAll(fail func(string, ...any)) {
	r.mu.Lock()
	incs := append([]*incarnation{}, r.fleet...)
	if r.svc != nil {
		incs = append(incs, r.svc)
	}
	r.fleet, r.svc = nil, nil
	r.mu.Unlock()
	for _, inc := range incs {
		if err := r.stopInc(inc); err != nil {
			fail("%v", err)
		}
	}
}

// subscribe subscribes the consumer c of inc, with its behaviour.
func (r *run) subscribe(inc *incarnation, c string, addr amqpactor.Address, opts ...amqpactor.SubscribeOption) (*amqpactor.Subscription, error) {
	b := r.sc.consumer(c).behaviour
	opts = append(opts, amqpactor.WithPartitions(b.Partitions), amqpactor.WithCredit(b.Credit))
	if b.Timeout > 0 {
		opts = append(opts, amqpactor.WithHandlerTimeout(b.Timeout))
	}
	if b.Backoff {
		opts = append(opts, amqpactor.WithRetry(amqpactor.RetryPolicy{Backoff: time.Millisecond, MaxBackoff: 4 * time.Millisecond, MaxDeliveries: 1000}))
	}
	h := r.handler(inc, c, b)
	if b.Actor {
		// Restarted after every panic: protoactor's default stops an actor
		// after ten, and a dead actor fails every delivery for good.
		always := actor.NewOneForOneStrategy(math.MaxInt32, 0, actor.DefaultDecider)
		pid := inc.sys.Root.WithGuardian(always).Spawn(actor.PropsFromFunc(r.actorHandler(inc, c, b)))
		// The group is busy while the partition waits for the actor: once
		// the handler's context ends the partition goes on, by design,
		// whatever the actor still does.
		ah := amqpactor.ActorHandler(pid)
		return inc.app.Subscribe(addr, func(ctx context.Context, m *amqpactor.Message) error {
			id, _ := m.MessageID.(string)
			exit := r.rec.enter(c, id, inc.id)
			err := ah(ctx, m)
			exit(err == nil, ctx)
			if err != nil {
				// Failed by the runtime (no answer in time, its context
				// ended), whatever the actor did: not a success at once.
				r.rec.markFailed(c, id)
			}
			return err
		}, opts...)
	}
	return inc.app.Subscribe(addr, h, opts...)
}

// errInjected is a handler's failure by its behaviour.
var errInjected = errors.New("chaos: injected handler failure")

// handler runs the behaviour b for consumer c of incarnation inc and
// records every handling. Its choices for a message depend on the seed, c
// and the message id only, so a replay makes them again.
func (r *run) handler(inc *incarnation, c string, b behaviour) amqpactor.Handler {
	return func(ctx context.Context, m *amqpactor.Message) (err error) {
		id, _ := m.MessageID.(string)
		exit := r.rec.enter(c, id, inc.id)
		defer func() {
			if v := recover(); v != nil {
				exit(false, ctx)
				r.rec.done(c, id, inc.id, false)
				panic(v)
			}
			exit(err == nil, ctx)
			r.rec.done(c, id, inc.id, err == nil)
		}()
		switch act, d := r.decide(c, id, m.DeliveryCount, b); act {
		case actFail:
			return errInjected
		case actPanic:
			panic("chaos: injected handler panic")
		case actHang:
			<-ctx.Done()
			return ctx.Err()
		case actSlow:
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
}

// What a handler does with one delivery.
const (
	actOK = iota
	actFail
	actPanic
	actHang
	actSlow
)

// decide is what behaviour b does with delivery count of message id at
// consumer c: it misbehaves only on a first delivery, but for slowness.
func (r *run) decide(c, id string, count uint32, b behaviour) (int, time.Duration) {
	roll := int(hash(r.sc.Seed, c, id) % 1000)
	first := count == 0
	switch {
	case first && roll < b.Fail:
		return actFail, 0
	case first && roll < b.Fail+b.Panic:
		return actPanic, 0
	case first && b.Timeout > 0 && roll < b.Fail+b.Panic+b.Hang:
		return actHang, 0
	case roll < b.Fail+b.Panic+b.Hang+b.Slow:
		return actSlow, time.Duration(1+roll%3) * time.Millisecond
	}
	return actOK, 0
}

// actorHandler is the actor behind an ActorHandler subscription. It
// decides in its Receive (a panic restarts the actor, a hang never answers
// and the handler's timeout fails the delivery) and answers a slow delivery
// from a timer, so the mailbox goes on. It never answers after the
// delivery's timeout, as a well-behaved actor does: ActorHandler drops a
// late answer, while a late answer to a protoactor Future races with the
// Future's own timeout (docs/RELIABILITY.md, "Known gaps", says where the
// runtime still asks through one).
func (r *run) actorHandler(inc *incarnation, c string, b behaviour) actor.ReceiveFunc {
	return func(ctx actor.Context) {
		d, ok := ctx.Message().(*amqpactor.Delivery)
		if !ok {
			return
		}
		id, _ := d.Message.MessageID.(string)
		act, wait := r.decide(c, id, d.Message.DeliveryCount, b)
		switch act {
		case actFail:
			r.rec.done(c, id, inc.id, false)
			ctx.Respond(amqpactor.Done(errInjected))
		case actPanic:
			r.rec.done(c, id, inc.id, false)
			panic("chaos: injected actor panic")
		case actHang:
			r.rec.done(c, id, inc.id, false)
		case actSlow:
			sender, root := ctx.Sender(), ctx.ActorSystem().Root
			time.AfterFunc(wait, func() {
				r.rec.done(c, id, inc.id, true)
				root.Send(sender, amqpactor.Done(nil))
			})
		default:
			r.rec.done(c, id, inc.id, true)
			ctx.Respond(amqpactor.Done(nil))
		}
	}
}

func hash(seed uint64, parts ...string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d", seed)
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	return h.Sum64()
}

// current is the svc incarnation publishers use now (nil between a stop and
// the next start).
func (r *run) current() *amqpactor.App {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.svc == nil {
		return nil
	}
	return r.svc.app
}

// consumersOf is who must handle a message published to the address named
// to.
func consumersOf(to string) []string {
	if to == "events" {
		return []string{"events/t0", "events/t1"}
	}
	return []string{to}
}

func addrOf(sc *scenario, to string) amqpactor.Address {
	switch to {
	case "events":
		return amqpactor.Topic("events")
	case "fleet":
		return amqpactor.Partitioned("fleet", sc.FleetN)
	}
	return amqpactor.Queue(to)
}

// workload starts every stream, the requests and the transactions. Each
// retries what failed until its publish returns nil or ctx ends (at the
// end of the run, after the steps).
func (r *run) workload(ctx context.Context, wg *sync.WaitGroup, fail func(string, ...any)) {
	for _, s := range r.sc.Streams {
		addr := addrOf(r.sc, s.To)
		switch s.Mode {
		case "group":
			for g := range s.Groups {
				wg.Go(func() {
					group := fmt.Sprintf("%s.g%d", s.Name, g)
					for i := range s.Count {
						id := fmt.Sprintf("%s/%d", group, i)
						r.rec.intend(id, &meta{consumers: consumersOf(s.To), group: group, seq: i, txn: -1})
						if !r.publishOne(ctx, addr, &amqpactor.Message{MessageID: id, GroupID: group, Body: []byte(id)}) {
							return
						}
					}
				})
			}
		case "publish":
			wg.Go(func() {
				for i := range s.Count {
					id := fmt.Sprintf("%s/%d", s.Name, i)
					r.rec.intend(id, &meta{consumers: consumersOf(s.To), txn: -1})
					if !r.publishOne(ctx, addr, &amqpactor.Message{MessageID: id, Body: []byte(id)}) {
						return
					}
				}
			})
		case "async", "batch":
			wg.Go(func() {
				for i := 0; i < s.Count; i += s.Window {
					var ms []*amqpactor.Message
					for j := i; j < min(i+s.Window, s.Count); j++ {
						id := fmt.Sprintf("%s/%d", s.Name, j)
						r.rec.intend(id, &meta{consumers: consumersOf(s.To), txn: -1})
						ms = append(ms, &amqpactor.Message{MessageID: id, Body: []byte(id)})
					}
					if !r.publishMany(ctx, addr, ms, s.Mode == "batch") {
						return
					}
				}
			})
		}
	}
	wg.Go(func() { r.requests(ctx) })
	wg.Go(func() { r.transactions(ctx, fail) })
}

// pause is the workload's own pace after a failed publish.
func pause(ctx context.Context) bool {
	t := time.NewTimer(2 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// publishOne publishes m until a publish returns nil; false when ctx ended
// first.
func (r *run) publishOne(ctx context.Context, addr amqpactor.Address, m *amqpactor.Message) bool {
	id := m.MessageID.(string)
	for ctx.Err() == nil {
		app := r.current()
		if app == nil {
			if !pause(ctx) {
				return false
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, publishBound)
		err := app.Publish(pctx, addr, m)
		cancel()
		if err == nil {
			r.rec.confirm(id)
			r.progress.Add(1)
			return true
		}
		if !pause(ctx) {
			return false
		}
	}
	return false
}

// publishMany publishes ms with PublishAsync or PublishBatch and publishes
// again those that failed.
func (r *run) publishMany(ctx context.Context, addr amqpactor.Address, ms []*amqpactor.Message, batch bool) bool {
	for len(ms) > 0 {
		if ctx.Err() != nil {
			return false
		}
		app := r.current()
		if app == nil {
			if !pause(ctx) {
				return false
			}
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, publishBound)
		var again []*amqpactor.Message
		if batch {
			err := app.PublishBatch(pctx, addr, ms)
			var be *amqpactor.BatchError
			switch {
			case err == nil:
			case errors.As(err, &be):
				for i, m := range ms {
					if _, bad := be.Failed[i]; bad {
						again = append(again, m)
					}
				}
			default:
				again = ms
			}
		} else {
			rs := make([]*amqpactor.Receipt, len(ms))
			for i, m := range ms {
				rs[i] = app.PublishAsync(pctx, addr, m)
			}
			for i, rc := range rs {
				if rc.Wait(pctx) != nil {
					again = append(again, ms[i])
				}
			}
		}
		cancel()
		failedIDs := map[*amqpactor.Message]bool{}
		for _, m := range again {
			failedIDs[m] = true
		}
		for _, m := range ms {
			if !failedIDs[m] {
				r.rec.confirm(m.MessageID.(string))
				r.progress.Add(1)
			}
		}
		ms = again
		if len(ms) > 0 && !pause(ctx) {
			return false
		}
	}
	return true
}

// requests makes the scenario's requests one after another; each must
// answer, with its reply or an error, before its deadline (and a little).
func (r *run) requests(ctx context.Context) {
	for i := range r.sc.Requests {
		if ctx.Err() != nil {
			return
		}
		app := r.current()
		if app == nil {
			if !pause(ctx) {
				return
			}
			continue
		}
		body := fmt.Sprintf("req-%d", i)
		rctx, cancel := context.WithTimeout(ctx, r.sc.ReqBound)
		t0 := time.Now()
		rep, err := app.Request(rctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte(body)})
		el := time.Since(t0)
		cancel()
		r.resMu.Lock()
		r.res.requests++
		if err != nil {
			r.res.reqErrs++
		}
		r.resMu.Unlock()
		if el > r.sc.ReqBound+reqSlack {
			r.rec.violate("request %d answered after %s, past its deadline %s (err %v)", i, el, r.sc.ReqBound, err)
		}
		if err == nil && string(rep.Body) != "re:"+body {
			r.rec.violate("request %d got the reply %q, not %q", i, rep.Body, "re:"+body)
		}
		r.progress.Add(1)
	}
}

var errRollback = errors.New("chaos: rolled back on purpose")

// txOutcome is what a transaction's caller learned.
type txOutcome struct {
	ids       []string
	committed bool // Transaction returned nil
	rolled    bool // fn returned an error
}

func (r *run) transactions(ctx context.Context, fail func(string, ...any)) {
	for k, tx := range r.sc.Txns {
		out := &txOutcome{}
		for i := range tx.Size {
			out.ids = append(out.ids, fmt.Sprintf("tx%d/%d", k, i))
		}
		for _, id := range out.ids {
			r.rec.intend(id, &meta{consumers: []string{"txq"}, txn: k})
		}
		app := r.current()
		for app == nil && pause(ctx) {
			app = r.current()
		}
		if app == nil {
			return
		}
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := app.Transaction(tctx, func(t *amqpactor.Tx) error {
			for _, id := range out.ids {
				if err := t.Publish(tctx, amqpactor.Queue("txq"), &amqpactor.Message{MessageID: id, Body: []byte(id)}); err != nil {
					return err
				}
			}
			if !tx.Commit {
				out.rolled = true
				return errRollback
			}
			return nil
		})
		cancel()
		out.committed = err == nil
		r.mu.Lock()
		r.txns = append(r.txns, out)
		r.mu.Unlock()
		r.resMu.Lock()
		if out.committed {
			r.res.txCommitted++
		} else if out.rolled {
			r.res.txRolledBack++
		}
		r.resMu.Unlock()
		r.progress.Add(1)
	}
}

// checkDelivered waits until every message whose publish returned nil was
// handled by each of its consumers (lost = 0), or fails naming the first.
func (r *run) checkDelivered(fail func(string, ...any)) {
	if waitFor(settleBound, func() bool { return len(r.rec.missing()) == 0 }) {
		return
	}
	for c, ids := range r.rec.missing() {
		fail("lost: %d messages confirmed to %s never handled, first %v", len(ids), c, ids[:min(5, len(ids))])
	}
	r.t.Logf("tree at the end:\n%s", r.treeText())
}

// checkTransactions: a committed transaction's messages all arrive, a
// rolled-back one's none; one whose commit failed, all or none.
func (r *run) checkTransactions(fail func(string, ...any)) {
	r.mu.Lock()
	txns := append([]*txOutcome{}, r.txns...)
	r.mu.Unlock()
	// The queue drains first, so a message that should not be there has
	// had its chance to arrive.
	waitFor(settleBound, func() bool { return r.b.QueueDepth("txq") == 0 && r.b.Unsettled("txq") == 0 })
	for k, tx := range txns {
		got := 0
		for _, id := range tx.ids {
			if r.rec.handledBy("txq", id) > 0 {
				got++
			}
		}
		switch {
		case tx.committed && got != len(tx.ids):
			fail("transaction %d committed, but %d of its %d messages arrived", k, got, len(tx.ids))
		case tx.rolled && got != 0:
			fail("transaction %d rolled back, but %d of its %d messages arrived", k, got, len(tx.ids))
		case got != 0 && got != len(tx.ids):
			fail("transaction %d (commit failed) delivered %d of its %d messages: not all or nothing", k, got, len(tx.ids))
		}
	}
}

// checkTrees checks every running App's tree: no node attached whose actor
// is gone, and each receiver's counters add up once nothing is in flight.
func (r *run) checkTrees(fail func(string, ...any)) {
	r.mu.Lock()
	incs := append([]*incarnation{}, r.fleet...)
	if r.svc != nil {
		incs = append(incs, r.svc)
	}
	r.mu.Unlock()
	for _, inc := range incs {
		var last string
		ok := waitFor(10*time.Second, func() bool {
			last = r.treeProblems(inc)
			return last == ""
		})
		if !ok {
			fail("%s incarnation %d: %s\n%s", inc.name, inc.id, last, harness.TreeText(r.tree(inc)))
		}
	}
}

func (r *run) tree(inc *incarnation) *amqpactor.Node {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, _ := inc.app.Tree(ctx)
	return n
}

func (r *run) treeProblems(inc *incarnation) string {
	root := r.tree(inc)
	if root == nil {
		return "no tree"
	}
	var problems []string
	var check func(n *amqpactor.Node, linkEnded bool)
	check = func(n *amqpactor.Node, linkEnded bool) {
		linkEnded = linkEnded || n.Restarts > 0 || n.LastError != ""
		if n.State == "attached" {
			if pid := n.ActorPID(); pid == nil {
				problems = append(problems, fmt.Sprintf("%s %s attached without a PID", n.Kind, n.Name))
			} else if _, alive := inc.sys.ProcessRegistry.GetLocal(pid.Id); !alive {
				problems = append(problems, fmt.Sprintf("%s %s (%s) attached but its actor is gone", n.Kind, n.Name, n.Address))
			}
		}
		if n.Kind == "receiver" {
			c := n.Counters
			settled := c["accepted"] + c["rejected"] + c["released"] + c["modified"] + c["late"]
			// A delivery whose link ended before its handler ran is taken
			// back by the broker and counted nowhere but in delivered, so
			// the sum is exact only for a receiver that never lost a link.
			switch {
			case !linkEnded && c["delivered"] != settled+c["unsettled"]:
				problems = append(problems, fmt.Sprintf("receiver %s: delivered %d != settled %d (accepted+rejected+released+modified+late) + unsettled %d",
					n.Address, c["delivered"], settled, c["unsettled"]))
			case c["delivered"] < settled+c["unsettled"]:
				problems = append(problems, fmt.Sprintf("receiver %s: delivered %d < settled %d (accepted+rejected+released+modified+late) + unsettled %d",
					n.Address, c["delivered"], settled, c["unsettled"]))
			}
		}
		for _, ch := range n.Children {
			check(ch, linkEnded)
		}
	}
	check(root, false)
	return strings.Join(problems, "; ")
}

func walk(n *amqpactor.Node, f func(*amqpactor.Node)) {
	f(n)
	for _, c := range n.Children {
		walk(c, f)
	}
}

func ofKind(n *amqpactor.Node, kind string) []*amqpactor.Node {
	var out []*amqpactor.Node
	if n != nil {
		walk(n, func(n *amqpactor.Node) {
			if n.Kind == kind {
				out = append(out, n)
			}
		})
	}
	return out
}

func (r *run) treeText() string {
	r.mu.Lock()
	incs := append([]*incarnation{}, r.fleet...)
	if r.svc != nil {
		incs = append(incs, r.svc)
	}
	r.mu.Unlock()
	var b strings.Builder
	for _, inc := range incs {
		fmt.Fprintf(&b, "%s incarnation %d:\n%s", inc.name, inc.id, harness.TreeText(r.tree(inc)))
	}
	return b.String()
}

func parseAddr(s string) amqpactor.Address {
	kind, name, _ := strings.Cut(s, ":")
	if kind == "topic" {
		return address.Topic(name)
	}
	return address.Queue(name)
}

func (r *run) resumeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, inc := range append(append([]*incarnation{}, r.fleet...), r.svc) {
		if inc == nil {
			continue
		}
		for _, s := range inc.subs {
			s.Resume()
		}
	}
}

func window(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	<-t.C
}

// inject carries out one step.
func (r *run) inject(s step) error {
	switch s.Kind {
	case "detach":
		r.b.DetachLinks(parseAddr(s.Target), "amqp:link:detach-forced", "chaos: detached")
	case "end-sessions":
		r.b.EndSessions(parseAddr(s.Target), "amqp:internal-error", "chaos: session ended")
	case "drop-connections":
		r.b.DropConnections(errors.New("chaos: connection dropped"))
	case "refuse-attach":
		// A transient condition: a terminal one (unauthorized-access,
		// not-found) fails the node for good after a few tries, by design.
		r.b.RefuseAttach(parseAddr(s.Target), "amqp:resource-limit-exceeded", "chaos: attach refused")
		window(s.For)
		r.b.ClearRefusals()
	case "reject-publish":
		r.b.RejectPublish(parseAddr(s.Target), "amqp:resource-limit-exceeded", "chaos: publish rejected")
		window(s.For)
		r.b.ClearRejects()
	case "pause":
		r.mu.Lock()
		var sub *amqpactor.Subscription
		if r.svc != nil {
			sub = r.svc.subs[s.Target]
		}
		r.mu.Unlock()
		if sub != nil {
			sub.Pause()
			window(s.For)
			sub.Resume()
		}
	case "crash":
		r.mu.Lock()
		inc := r.svc
		if strings.HasPrefix(s.Target, "fleet#") && len(r.fleet) > 0 {
			var i int
			fmt.Sscanf(s.Target, "fleet#%d", &i)
			inc = r.fleet[i%len(r.fleet)]
		}
		r.mu.Unlock()
		if inc == nil {
			return nil
		}
		nodes := ofKind(r.tree(inc), s.Actor)
		if len(nodes) == 0 {
			return nil
		}
		if pid := nodes[s.N%len(nodes)].ActorPID(); pid != nil {
			for i := range s.Burst {
				if i > 0 {
					time.Sleep(5 * time.Millisecond) // crashes in a row, not in one mailbox run
				}
				inc.sys.Root.Send(pid, &testhook.Crash{Reason: "chaos"})
			}
		}
	case "replica-swap":
		var i int
		fmt.Sscanf(s.Target, "fleet#%d", &i)
		r.mu.Lock()
		if len(r.fleet) == 0 {
			r.mu.Unlock()
			return nil
		}
		i %= len(r.fleet)
		old := r.fleet[i]
		r.mu.Unlock()
		if s.Actor == "start-first" {
			inc, err := r.startReplica()
			if err != nil {
				return err
			}
			r.mu.Lock()
			r.fleet[i] = inc
			r.mu.Unlock()
			return r.stopInc(old)
		}
		r.mu.Lock()
		r.fleet = append(r.fleet[:i:i], r.fleet[i+1:]...)
		r.mu.Unlock()
		if err := r.stopInc(old); err != nil {
			return err
		}
		inc, err := r.startReplica()
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.fleet = append(r.fleet, inc)
		r.mu.Unlock()
	case "stop-svc":
		r.mu.Lock()
		old := r.svc
		r.svc = nil
		r.mu.Unlock()
		if err := r.stopInc(old); err != nil {
			return err
		}
		inc, err := r.startSvc()
		if err != nil {
			return err
		}
		r.mu.Lock()
		r.svc = inc
		r.mu.Unlock()
	default:
		return fmt.Errorf("unknown step kind %q", s.Kind)
	}
	return nil
}
