// Package bench holds the benchmarks of docs/BENCHMARKS.md: amqpactor end to
// end on the in-process broker, and on RabbitMQ 4 side by side with raw
// go-amqp (over AMQP 1.0) or raw amqp091-go (over 0-9-1, Dial091) in the
// same run. Benchmarks only: nothing here asserts a time.
package bench
