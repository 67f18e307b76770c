package amqpwire_test

import (
	"context"
	"fmt"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// Reading a queue's depth on RabbitMQ 4 for a health check, on a connection
// of its own. (Compiled, not run: it needs a broker.)
func ExampleConn_Management() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := amqpwire.New(amqpwire.Config{URL: "amqp://guest:guest@localhost:5672/", Dialect: address.RabbitMQ4}).Connect(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close(ctx)
	info, err := c.(*amqpwire.Conn).Management().QueueInfo(ctx, "orders")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(info.Messages, "messages,", info.Consumers, "consumers")
}
