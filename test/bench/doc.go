// Package bench holds the benchmarks of docs/BENCHMARKS.md: amqpactor end to
// end on the in-process broker, and on RabbitMQ 4 side by side with raw
// go-amqp in the same run. Benchmarks only: nothing here asserts a time.
package bench
