module github.com/amqpactor/amqpactor

go 1.26

require (
	github.com/Azure/go-amqp v1.7.0
	github.com/asynkron/protoactor-go v0.0.0-20240822202345-3c0e61ca19c9
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
)
