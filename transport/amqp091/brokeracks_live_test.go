package amqp091_test

import (
	"fmt"
	"strconv"
	"testing"

	rmq "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// TestLiveBrokerAcksBeforeClose measures, with amqp091-go alone, what
// Receiver.Close is built on: on a single-active-consumer quorum queue,
// 300 deliveries acknowledged one by one and the channel closed at once,
// how many come back to the next consumer (RabbitMQ 4.0.5 can lose the
// last acknowledgements: measured, not asserted), and none when the
// consumer is cancelled before the close (asserted).
func TestLiveBrokerAcksBeforeClose(t *testing.T) {
	url := livetest.URL(t, "the RabbitMQ acknowledgement-before-close measurement")
	s := newSide(t, url)
	round := func(cancelFirst bool) int {
		q := unique("amqp091-acks")
		s.deleteQueue(q)
		var redelivered int
		require.NoError(t, s.do(func(ch *rmq.Channel) error {
			if _, err := ch.QueueDeclare(q, true, false, false, false,
				rmq.Table{"x-queue-type": "quorum", "x-single-active-consumer": true}); err != nil {
				return err
			}
			if err := ch.Confirm(false); err != nil {
				return err
			}
			for i := range 400 {
				dc, err := ch.PublishWithDeferredConfirm("", q, false, false, rmq.Publishing{Body: []byte(strconv.Itoa(i))})
				if err != nil {
					return err
				}
				if i == 399 && !dc.Wait() {
					return fmt.Errorf("publish %d nacked", i)
				}
			}
			first, err := s.conn.Channel()
			if err != nil {
				return err
			}
			next, err := s.conn.Channel()
			if err != nil {
				return err
			}
			defer func() { _ = next.Close() }()
			for _, c := range []*rmq.Channel{first, next} {
				if err := c.Qos(256, 0, false); err != nil {
					return err
				}
			}
			d1, err := first.Consume(q, "first", false, false, false, false, nil)
			if err != nil {
				return err
			}
			d2, err := next.Consume(q, "next", false, false, false, false, nil)
			if err != nil {
				return err
			}
			acked := map[string]bool{}
			for range 300 {
				m := <-d1
				acked[string(m.Body)] = true
				if err := m.Ack(false); err != nil {
					return err
				}
			}
			if cancelFirst {
				if err := first.Cancel("first", false); err != nil {
					return err
				}
			}
			if err := first.Close(); err != nil {
				return err
			}
			for range 100 {
				m := <-d2
				if acked[string(m.Body)] {
					redelivered++
				}
				_ = m.Ack(false)
			}
			return nil
		}))
		return redelivered
	}
	var closeOnly, cancelled []int
	for range 3 {
		closeOnly = append(closeOnly, round(false))
		cancelled = append(cancelled, round(true))
	}
	t.Logf("acknowledged deliveries handed to the next consumer, of 300: channel closed at once %v; cancelled first %v", closeOnly, cancelled)
	require.Equal(t, []int{0, 0, 0}, cancelled, "a basic.cancel before the close")
}
