// Package artemis proves, on a live ActiveMQ Artemis 2.40 (ARTEMIS_URL;
// without it the tests skip loudly, under REQUIRE_LIVE=1 they fail), the
// behaviours the runtime promises for the default dialect (docs/GUIDE.md,
// "Brokers"), and pins the broker behaviour they rest on:
//
//   - topics: every service gets every message; the replicas of one
//     service share one durable subscription queue (TOPIC::NAME) that
//     outlives them, keeping what is published while none runs; Artemis
//     deletes a durable subscription attached without FQQN when its last
//     link closes, and leaves the FQQN one;
//   - fully qualified queue names reach one queue of an address;
//   - request/reply through the broker's dynamic node;
//   - dead-lettering: Reject and RetryPolicy.MaxDeliveries reach the
//     broker's dead-letter address (DLQ), RetryPolicy.DeadLetter the
//     runtime's copy;
//   - delivery-count per outcome, beyond what test/conformance covers;
//   - Raw addresses: delivered with a subscriber, accepted and dropped
//     without one;
//   - App.Transaction fails with ErrNotSupported on a live connector;
//   - the tree's connection node names the broker.
//
// The tests read and clean the broker through its management address
// (amqpwire.ArtemisManagement), and every name they use is unique.
package artemis
