// Package cluster tests failover on a three-node RabbitMQ 4 cluster: an App
// dialled with WithFailover keeps publishing to and consuming from a quorum
// queue, a topic and a request/reply pair while the node it is connected to
// is killed (and restarted). The cluster comes from
// `test/broker/rabbitmq4.sh cluster-start`, its URLs from AMQP_CLUSTER_URLS;
// the tests kill and restart nodes through the same script, so they need
// root. Without the cluster they skip loudly, and under REQUIRE_LIVE=1 they
// fail.
package cluster
