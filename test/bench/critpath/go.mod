module github.com/amqpactor/amqpactor/test/bench/critpath

go 1.26.0

require (
	go.uber.org/goleak v1.3.0
	golang.org/x/exp v0.0.0-20261113113407-e3970619a1a4
)
