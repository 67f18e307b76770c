// Package faults holds the fault-injection tests of the runtime's
// supervision: connections cut (on the in-process broker with its hooks,
// and on the live brokers through a loopback TCP proxy in the test), traffic
// black-holed, latency added, the broker restarted and killed, queues
// deleted under a subscriber, handlers that panic and poison messages.
//
// Every test logs its figures on a line that starts with "FIGURES" (lost,
// duplicates, resume and detection times, restarts); docs/RELIABILITY.md
// tabulates them. A live scenario runs as one subtest per broker
// (brokers_test.go): rabbitmq4 reads AMQP_URL (RabbitMQ 4), artemis reads
// ARTEMIS_URL (ActiveMQ Artemis); each skips loudly without its URL, or
// fails under REQUIRE_LIVE=1.
//
// The RabbitMQ restart tests need root and test/broker/rabbitmq4.sh; they
// leave the broker running. They restart the node the script selects
// (RabbitMQ 4.0, or 4.3 with AMQPACTOR_RABBIT_VERSION=4.3) and fail at once
// when that is not the broker AMQP_URL names. The Artemis restart tests
// kill -9 the instance test/broker/artemis.sh runs on the port in
// ARTEMIS_FAULTS_PORT (starting it when nothing answers there) and start it
// again; that port must be one nothing else uses while they run.
package faults
