package faults

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/test/harness"
	"github.com/amqpactor/amqpactor/test/kit/brokeradmin"
	"github.com/amqpactor/amqpactor/test/kit/livetest"
	"github.com/amqpactor/amqpactor/test/kit/testproxy"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// liveBroker is a live broker the fault tests run on: where it is and the
// dialect that speaks to it. What differs between brokers (how a test
// removes what it made, how the broker is restarted) hangs off it, so that
// a scenario is written once and run on each.
type liveBroker struct {
	url     string
	dialect amqpactor.Dialect
	// ctl runs the broker's test script with args; set only for the
	// broker a restart test may restart.
	ctl func(t *testing.T, args ...string)
}

func rabbitMQ(t *testing.T) liveBroker {
	return liveBroker{url: livetest.URL(t, "the live fault tests"), dialect: amqpactor.RabbitMQ4}
}

func artemis(t *testing.T) liveBroker {
	return liveBroker{url: livetest.ArtemisURL(t, "the live fault tests on Artemis"), dialect: amqpactor.Artemis}
}

// liveBrokers are the brokers every broker-neutral live scenario runs on,
// each as a subtest of that name.
var liveBrokers = []struct {
	name string
	get  func(t *testing.T) liveBroker
}{
	{"rabbitmq4", rabbitMQ},
	{"artemis", artemis},
}

// eachBroker runs f as a subtest per live broker; a subtest whose broker's
// URL is not set skips, or fails under REQUIRE_LIVE=1.
func eachBroker(t *testing.T, f func(t *testing.T, b liveBroker)) {
	for _, lb := range liveBrokers {
		t.Run(lb.name, func(t *testing.T) { f(t, lb.get(t)) })
	}
}

// app is an App on b, dialled at u (b's URL, or a proxy's in front of it).
func (b liveBroker) app(t *testing.T, u string, opts ...amqpactor.DialOption) (*amqpactor.App, *harness.LogBuffer) {
	log, buf := harness.NewLog(t)
	opts = append([]amqpactor.DialOption{amqpactor.WithDialect(b.dialect)}, opts...)
	return amqpactor.New(amqpactor.Dial(u, opts...), amqpactor.WithLogger(log),
		amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second)), buf
}

// maker makes named Apps on b, dialled at u.
func (b liveBroker) maker(u string) appMaker {
	return func(t *testing.T, name string) *amqpactor.App {
		log, _ := harness.NewLog(t)
		return amqpactor.New(amqpactor.Dial(u, amqpactor.WithDialect(b.dialect)), amqpactor.WithName(name),
			amqpactor.WithLogger(log), amqpactor.WithBackoff(backoffInitial, backoffMax), amqpactor.WithCloseTimeout(3*time.Second))
	}
}

// admin runs f, bounded by d, with a connection of its own to b, whose
// management clients (RabbitMQ's /management, Artemis's
// activemq.management) the tests use to remove and inspect what they made.
func (b liveBroker) admin(d time.Duration, f func(ctx context.Context, c *amqpwire.Conn) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c, err := amqpwire.New(amqpwire.Config{URL: b.url, Dialect: b.dialect}).Connect(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	return f(ctx, c.(*amqpwire.Conn))
}

// Artemis's code for a queue it does not have.
const artemisNoQueue = "AMQ229017"

// deleteQueue deletes the queue name, closing its consumers' links (on
// Artemis destroyQueue with removeConsumers; RabbitMQ ends them itself).
// Deleting a missing queue succeeds.
func (b liveBroker) deleteQueue(ctx context.Context, c *amqpwire.Conn, name string) error {
	if b.dialect == amqpactor.RabbitMQ4 {
		return brokeradmin.DeleteQueue(ctx, c.Management(), name)
	}
	_, err := c.ArtemisManagement().Invoke(ctx, "broker", "destroyQueue", name, true)
	if amqpwire.IsArtemisCode(err, artemisNoQueue) {
		return nil
	}
	return err
}

// Artemis's code for a queue that exists already.
const artemisQueueExists = "AMQ229019"

// declareQueue declares the queue name as an operator would; one that
// exists already is left as it is.
func (b liveBroker) declareQueue(ctx context.Context, c *amqpwire.Conn, name string) error {
	if b.dialect == amqpactor.RabbitMQ4 {
		_, err := c.Management().DeclareQueue(ctx, amqpwire.QueueSpec{Name: name})
		return err
	}
	err := c.ArtemisManagement().CreateQueue(ctx, amqpwire.ArtemisQueue{Name: name})
	if amqpwire.IsArtemisCode(err, artemisQueueExists) {
		return nil
	}
	return err
}

// queueAnswers asks the broker about the queue name: nil once it has it
// and answers for it.
func (b liveBroker) queueAnswers(ctx context.Context, c *amqpwire.Conn, name string) error {
	if b.dialect == amqpactor.RabbitMQ4 {
		_, err := c.Management().QueueInfo(ctx, name)
		return err
	}
	_, err := c.ArtemisManagement().Attribute(ctx, "queue."+name, "messageCount")
	return err
}

// queue names a queue for a live test and deletes it when the test ends.
func (b liveBroker) queue(t *testing.T, prefix string) amqpactor.Address {
	name := harness.Unique(prefix)
	t.Cleanup(func() {
		if err := b.admin(30*time.Second, func(ctx context.Context, c *amqpwire.Conn) error {
			return b.deleteQueue(ctx, c, name)
		}); err != nil {
			t.Logf("cleanup: deleting %s: %v", name, err)
		}
	})
	return amqpactor.Queue(name)
}

// topic names a topic for a live test and deletes, when the test ends, the
// durable subscription queue each of subs (the names the subscriptions
// report) left on the shared broker, and on RabbitMQ its exchange (Artemis
// removes an address it created once its last queue goes).
func (b liveBroker) topic(t *testing.T, prefix string, subs *[]string) amqpactor.Address {
	tp := amqpactor.Topic(harness.Unique(prefix))
	t.Cleanup(func() {
		if err := b.admin(30*time.Second, func(ctx context.Context, c *amqpwire.Conn) error {
			for _, s := range *subs {
				queue := s // Artemis names the subscription queue after the subscription
				if b.dialect == amqpactor.RabbitMQ4 {
					node, err := address.Render(address.RabbitMQ4, tp, address.Receive, s)
					if err != nil {
						t.Logf("cleanup: %v", err)
						continue
					}
					queue = node.Queue
				}
				if err := b.deleteQueue(ctx, c, queue); err != nil {
					t.Logf("cleanup: deleting %s: %v", queue, err)
				}
			}
			if b.dialect == amqpactor.RabbitMQ4 {
				return brokeradmin.DeleteExchange(ctx, c.Management(), tp.Name())
			}
			return nil
		}); err != nil {
			t.Logf("cleanup: %v", err)
		}
	})
	return tp
}

// viaProxy returns a proxy in front of the broker of u and the URL that
// dials it (same credentials and vhost).
func viaProxy(t *testing.T, u string) (*testproxy.Proxy, string) {
	pu, err := url.Parse(u)
	require.NoError(t, err)
	p := testproxy.New(t, pu.Host)
	pu.Host = p.Addr()
	return p, pu.String()
}

// rabbitMQRestartable is the RabbitMQ 4 broker of AMQP_URL, restarted
// through test/broker/rabbitmq4.sh, which must select that node; it needs
// root.
func rabbitMQRestartable(t *testing.T) liveBroker {
	b := rabbitMQ(t)
	needRoot(t)
	requireScriptNode(t, b.url)
	b.ctl = brokerCtl
	return b
}

// artemisRestartable is the Artemis instance that test/broker/artemis.sh
// runs on the port in ARTEMIS_FAULTS_PORT, started here when nothing
// answers there. A restart test kills it, so it must be one nothing else
// uses while the test runs: an instance of its own beside the shared one
// (5683), or the shared one's port where the fault tests run alone.
func artemisRestartable(t *testing.T) liveBroker {
	port := os.Getenv("ARTEMIS_FAULTS_PORT")
	if port == "" {
		livetest.Missing(t, "ARTEMIS_FAULTS_PORT is not set, so the Artemis restart tests cannot run: they kill -9 "+
			"and restart the Artemis instance `AMQPACTOR_ARTEMIS_PORT=$ARTEMIS_FAULTS_PORT bash test/broker/artemis.sh` "+
			"runs (and start it when nothing answers); give them a port nothing else uses while they run, such as 5683")
	}
	ctl := func(t *testing.T, args ...string) {
		t.Helper()
		cmd := exec.Command("bash", append([]string{"../broker/artemis.sh"}, args...)...)
		cmd.Env = append(os.Environ(), "AMQPACTOR_ARTEMIS_PORT="+port)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "AMQPACTOR_ARTEMIS_PORT=%s artemis.sh %s: %s", port, strings.Join(args, " "), out)
	}
	ctl(t, "start")
	cmd := exec.Command("bash", "../broker/artemis.sh", "url")
	cmd.Env = append(os.Environ(), "AMQPACTOR_ARTEMIS_PORT="+port)
	out, err := cmd.Output()
	require.NoError(t, err, "artemis.sh url")
	return liveBroker{url: strings.TrimSpace(string(out)), dialect: amqpactor.Artemis, ctl: ctl}
}
