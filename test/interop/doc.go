// Package interop proves that amqpactor interoperates with AMQP 1.0 stacks
// that we did not write, through two live brokers, ActiveMQ Artemis and
// RabbitMQ 4: Qpid Proton for Python (proton_peer.py, Debian's
// python3-qpid-proton run with /usr/bin/python3), rhea for Node.js
// (rhea_peer.js, installed by npm ci from package-lock.json) and fe2o3-amqp
// for Rust (fe2o3/, built by cargo from its Cargo.lock). Every AMQP 1.0 case
// runs once per broker and peer, as the subtests artemis/PEER and
// rabbitmq4/PEER, with the App on the broker's dialect; what the brokers do
// differently to a message (broker_test.go says what) the tests expect per
// broker. fe2o3_test.go adds that a group-id fe2o3 publishes to a
// Partitioned address lands on the partition amqpactor's own publish picks.
//
// Dial091 is checked the same way against an AMQP 0-9-1 client we did not
// write, pika (pika_peer.py, Debian's python3-pika run with
// /usr/bin/python3): every basic property and header the 0-9-1 mapping
// carries, both ways (pika_test.go), and hostile headers and a spoofed
// x-delivery-count from pika (pika_hostile_test.go). Those run on RabbitMQ 4
// only: Artemis does not speak AMQP 0-9-1.
//
// For each peer the tests check both directions (every properties field,
// application-properties of every AMQP primitive type, the header, message
// annotations and each body kind from the peer; a message of ours reads as
// a plain AMQP message in the peer) and request/reply across the stacks.
// The peers print what they received as JSON with every value tagged with
// its AMQP type, so the tests assert types, not just values.
//
// The package holds only tests. Run them with the test brokers:
//
//	bash test/interop/setup.sh   # installs and builds the peers when they are missing (as root)
//	bash test/broker/artemis.sh start
//	bash test/broker/rabbitmq4.sh start
//	ARTEMIS_URL=$(bash test/broker/artemis.sh url) AMQP_URL=$(bash test/broker/rabbitmq4.sh url) \
//		REQUIRE_LIVE=1 go test -race ./test/interop/
//
// The RabbitMQ cases also run on RabbitMQ 4.3 with AMQPACTOR_RABBIT_VERSION=4.3
// before both rabbitmq4.sh commands; what differs between the releases, the
// tests learn from the broker and say. Without a broker's URL, or without a
// peer, its tests skip loudly; under REQUIRE_LIVE=1 (CI) a skip is a failure.
package interop
