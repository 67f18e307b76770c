package amqpactor

import "github.com/amqpactor/amqpactor/transport/amqp091"

// Dial091 returns a Connector for RabbitMQ over AMQP 0-9-1 (amqp:// or
// amqps://, TLS verified by default), with amqp091-go on the wire. The same
// App, handlers and options run on it as on Dial; addresses are spelt as
// RabbitMQ 4's (WithDialect is ignored), WithContainerID names the
// connection, WithIdleTimeout bounds how long a silent broker is waited for
// (through the heartbeat). Unlike Dial, Transaction works (tx.select). It
// never fails: a bad URL or unsafe settings are reported by App.Start,
// naming the URL without its password. The package documentation of
// transport/amqp091 has the message mapping.
func Dial091(url string, opts ...DialOption) Connector {
	return amqp091.New(dialConfig(url, opts))
}
