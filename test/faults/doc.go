// Package faults holds the fault-injection tests of the runtime's
// supervision: connections cut (on the in-process broker with its hooks,
// and on RabbitMQ 4 through a loopback TCP proxy in the test), traffic
// black-holed, latency added, the broker restarted and killed, queues
// deleted under a subscriber, handlers that panic and poison messages.
//
// Every test logs its figures on a line that starts with "FIGURES" (lost,
// duplicates, resume and detection times, restarts); docs/RELIABILITY.md
// tabulates them. The live tests read AMQP_URL (RabbitMQ 4) and skip
// loudly without it, or fail under REQUIRE_LIVE=1. The broker restart
// tests need root and test/broker/rabbitmq4.sh; they leave the broker
// running. They restart the node the script selects (RabbitMQ 4.0, or 4.3
// with AMQPACTOR_RABBIT_VERSION=4.3) and fail at once when that is not the
// broker AMQP_URL names.
package faults
