// Package protocol is what the actors of an App exchange: the messages they
// send one another (ConnUp, Publish, Delivery, SubscriptionSpec, Drain,
// Describe, ...), the Settler a delivery's outcome goes back through, the
// tree's Node and its states, the conversion between a messages.Message and
// the wire's amqp.Message (ToAMQP, FromAMQP, Outgoing), the correlation key
// of request/reply, the partition a handler's context carries, and the
// Balance the replicas of a Partitioned subscription share. It is internal
// so that none of it is a promise to users: the package amqpactor aliases
// the few parts they see (Node, NodeError, ErrStopped,
// ErrRequestsRestarted), and package messages keeps the user's types.
package protocol
