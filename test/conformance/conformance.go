// Package conformance is the behaviour suite of amqpactor, written once
// against the public API and run on every connector (like watermill's
// tests.TestPubSub): the in-process broker here, a live broker wherever a
// Factory for it exists.
//
// A broker's Factory says how to get a connector and which broker-specific
// behaviours it has (Features). Everything else in the suite is
// broker-neutral: names are unique per test (live runs do not collide),
// addresses are valid in every dialect (no "address::queue" names outside
// the address-error tests, which never reach the wire), queues are
// subscribed before anything is published to them, and the in-process
// broker's own API is used only under Features.FaultHooks.
//
// inproc_test.go runs it on the in-process broker, rabbitmq4_test.go on a
// live RabbitMQ 4 (AMQP_URL), rabbitmq091_test.go on the same broker over
// AMQP 0-9-1 (Dial091) and artemis_test.go on ActiveMQ Artemis
// (ARTEMIS_URL); a new broker needs only a Factory:
//
//	conformance.Run(t, conformance.Factory{
//		Name: "rabbitmq4",
//		New: func(t *testing.T) amqpactor.Connector {
//			return amqpactor.Dial(url, amqpactor.WithDialect(amqpactor.RabbitMQ4))
//		},
//		Features: conformance.Features{DeliveryCountOnModified: true, UserID: []byte("guest")},
//	})
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/amqpactor/amqpactor"
)

// Factory gives the suite its connectors and says what the broker behind
// them can do.
type Factory struct {
	// Name labels the broker in the test names (TestX/Name/Subtest).
	Name string
	// New returns a fresh connector for one test. Every App of that test is
	// built on it, so the Apps of a test share one broker. Required.
	New func(t *testing.T) amqpactor.Connector
	// Unique returns a name that no other test, and no other run against the
	// same broker, uses; it should start with base. A live factory may
	// register the deletion of the queue with t.Cleanup. Nil means base
	// plus a random suffix.
	Unique func(t *testing.T, base string) string
	// DeleteSubscription, when set, deletes the durable node of the topic
	// subscription named subscription; each test calls it for every topic
	// subscription it made, once its Apps have stopped, so a live broker
	// does not keep them. Nil means the broker forgets them by itself.
	DeleteSubscription func(topic amqpactor.Address, subscription string) error
	// DeleteStream, when set, deletes a stream a test made, once its Apps
	// have stopped, so a live broker does not keep its messages. Nil means
	// the broker forgets them by itself.
	DeleteStream func(name string) error
	// Features marks the broker's differences.
	Features Features
}

// Features marks where brokers differ. Each flag says which behaviour the
// suite asserts; a flag never switches an assertion off without asserting
// what the broker does instead (or skipping with the reason, where the
// broker does not have the feature at all). Setting a flag that the broker
// does not honour makes the suite fail: they describe brokers, they do not
// paper over runtime bugs.
type Features struct {
	// DeliveryCountOnModified: the broker counts modified{delivery-failed}
	// in the header's delivery-count (the in-process broker, RabbitMQ 4
	// quorum queues, Artemis). RetryPolicy{MaxDeliveries} depends on it.
	// Without it (RabbitMQ classic queues, Service Bus ignoring modified)
	// the delivery-count and max-deliveries tests are skipped, saying so.
	DeliveryCountOnModified bool
	// UndeliverableHereKeeps: modified{undeliverable-here} leaves the
	// message on its queue for other receivers and never offers it to the
	// same receiver again (the in-process broker, Artemis). Without it the
	// suite asserts only that the same receiver does not get it again:
	// RabbitMQ 4 treats undeliverable-here as "do not requeue" and
	// dead-letters or drops the message.
	UndeliverableHereKeeps bool
	// Transactions: App.Transaction works (the in-process broker). Without
	// it the suite asserts that Transaction fails with an error that
	// errors.Is amqpactor.ErrNotSupported and never runs its function
	// (live brokers: go-amqp has no coordinator link).
	Transactions bool
	// FaultHooks: New returns an *inproc.Broker, and the suite uses its
	// fault hooks (RefuseAttach, RejectPublish, DetachLinks, EndSessions,
	// DropConnections) and introspection (QueueDepth, Unsettled,
	// DeadLetters). Tests that need a fault a live broker cannot be made to
	// produce on demand are skipped without it.
	FaultHooks bool
	// UserID is the user-id a message may carry. RabbitMQ checks the
	// properties' user-id against the authenticated user and rejects any
	// other, so a RabbitMQ factory sets its user ("guest"). Nil means the
	// broker takes any user-id and the suite sends one of its own.
	UserID []byte
	// BrokerDeadLetters: the broker moves what the runtime rejects after
	// its last attempt to RetryPolicy.DeadLetter itself (RabbitMQ 4 quorum
	// queues, declared for it), so a dead letter carries the broker's
	// annotations rather than the runtime's failure annotations. Without
	// it the runtime publishes the copy, and the suite asserts them.
	BrokerDeadLetters bool
	// ReleaseCounts: a released message comes back with its delivery-count
	// one higher, like a modified one (RabbitMQ 4.0 over AMQP 0-9-1: a
	// basic.nack or basic.reject with requeue, or a closed channel, is the
	// only way back, and its quorum queues count every one in
	// x-delivery-count; RabbitMQ 4.3 does not count basic.nack; a message
	// released as its consumer closes may be counted twice, when the
	// broker hands it back to that consumer before the close returns it).
	// Without it released leaves the count as it was.
	ReleaseCounts bool
	// AMQP091: the broker is reached over AMQP 0-9-1, whose messages have
	// fewer types than AMQP 1.0's (transport/amqp091 documents the
	// mapping). The round trip then asserts that mapping: header values as
	// a 0-9-1 field table holds them (a uint64 beyond int64 refused at
	// publish, unsigned 64-bit and UUID values as int64 and string, a
	// timestamp to the second) and an amqp-value body refused at publish.
	AMQP091 bool
	// FirstAcquirerAsSent: the broker passes the header's first-acquirer on
	// as the sender wrote it instead of setting it (Artemis), so every
	// delivery of a message our publisher sent carries false, which never
	// claims a first delivery that may not be one. Without it the broker
	// sets it: true on a first delivery, false on a redelivery.
	FirstAcquirerAsSent bool
	// BindingKeys: a topic subscription can be bound by pattern
	// (WithBindingKeys) and a publish to a topic routes by the message's
	// subject (the in-process broker, RabbitMQ 4 over 1.0 and 0-9-1).
	// Without it the suite asserts that Subscribe fails with such keys,
	// naming the address (Artemis routes by address only).
	BindingKeys bool
	// Streams: the broker has streams (amqpactor.Stream): a subscription
	// starts at a StreamOffset, each delivery carries its offset in
	// x-stream-offset, a subscription with filter values handles only the
	// messages that carry one, and a subscription that re-attaches goes on
	// after what it settled (the in-process broker, RabbitMQ 4 over 1.0).
	// Without it the suite asserts that Subscribe fails, naming the
	// address.
	Streams bool
	// StreamPropertyFilters: WithStreamHeaders and WithStreamProperties
	// work (the in-process
	// broker; RabbitMQ 4, where 4.1 and later filter on the broker and 4.0
	// takes the attach and leaves the filtering to the runtime's check).
	// Without it the header filter cases are not run.
	StreamPropertyFilters bool
	// StreamSQL: WithStreamSQL works (the in-process broker, RabbitMQ
	// 4.2 and later). Without it, with Streams, the suite asserts that a
	// subscription with an SQL filter fails, wrapping ErrNotSupported.
	StreamSQL bool
}

// Run runs the whole suite on f. Every subtest makes its own connector, its
// own Apps and its own names, and stops what it started.
func Run(t *testing.T, f Factory) {
	t.Helper()
	if f.New == nil {
		t.Fatal("conformance: Factory.New is nil")
	}
	if f.Name == "" {
		f.Name = "broker"
	}
	t.Run(f.Name, func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				tc.fn(newEnv(t, f))
			})
		}
	})
}

// cases is the suite, in the order it runs.
var cases = []struct {
	name string
	fn   func(e *env)
}{
	// Routing.
	{"CompetingApps", testCompetingApps},
	{"CompetingSubscriptions", testCompetingSubscriptions},
	{"TopicFanOut", testTopicFanOut},
	{"BindingKeys", testBindingKeys},
	{"BindingKeysRebind", testBindingKeysRebind},
	{"SettledPublish", testSettledPublish},
	{"StreamOffsets", testStreamOffsets},
	{"StreamResume", testStreamResume},
	{"StreamFilter", testStreamFilter},

	// Outcomes and retries.
	{"DeliveryCountModified", testDeliveryCountModified},
	{"DeliveryCountReleased", testDeliveryCountReleased},
	{"MaxDeliveries", testMaxDeliveries},
	{"RetryAddress", testRetryAddress},
	{"RetryInPlaceKeepsOrder", testRetryInPlaceKeepsOrder},
	{"DeadLetter", testDeadLetter},
	{"BackoffGrows", testBackoffGrows},
	{"Reject", testReject},
	{"Undeliverable", testUndeliverable},
	{"PanicRecovered", testPanicRecovered},
	{"AtMostOnce", testAtMostOnce},

	// Dispatch and flow control.
	{"GroupOrder", testGroupOrder},
	{"GroupsInParallel", testGroupsInParallel},
	{"RoundRobinWithoutGroup", testRoundRobin},
	{"CreditBound", testCreditBound},
	{"PauseResume", testPauseResume},
	{"PauseBeforeStart", testPauseBeforeStart},
	{"BatchCappedByCredit", testBatchCappedByCredit},
	{"BatchCappedBySize", testBatchCappedBySize},

	// Lifecycle of deliveries.
	{"CloseReturnsUnsettled", testCloseReturnsUnsettled},
	{"StopWaitsForHandlers", testStopWaitsForHandlers},
	{"StopByDeadline", testStopByDeadline},
	{"StopWithoutDeadline", testStopWithoutDeadline},
	{"LifecycleErrors", testLifecycleErrors},

	// Request/reply, transactions, typed handlers, the message.
	{"RequestReply", testRequestReply},
	{"RequestNoReply", testRequestNoReply},
	{"Transactions", testTransactions},
	{"TransactionalAccept", testTransactionalAccept},
	{"Typed", testTyped},
	{"MessageRoundTrip", testMessageRoundTrip},

	// Errors.
	{"AddressErrors", testAddressErrors},
	{"AddressErrorsRabbitMQ4Dialect", testAddressErrorsRabbitMQ4},
	{"StartRefusedAttach", testStartRefusedAttach},
	{"SubscribeRefusedAttach", testSubscribeRefusedAttach},
	{"PublishRejected", testPublishRejected},

	// Inspection.
	{"Tree", testTree},

	// Faults (FaultHooks).
	{"DetachRedelivers", testDetachRedelivers},
	{"SenderDetachResends", testSenderDetach},
	{"Reconnect", testReconnect},
	{"PauseAcrossReattach", testPauseAcrossReattach},
	{"EndSessions", testEndSessions},
}

func randomSuffix() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// background is the parent of every test context.
var background = context.Background()
