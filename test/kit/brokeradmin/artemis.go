package brokeradmin

import (
	"context"

	"github.com/amqpactor/amqpactor/transport/amqpwire"
)

// artemisNoSuchQueue is Artemis's code for a queue that does not exist.
const artemisNoSuchQueue = "AMQ229017"

// DestroyArtemisQueue deletes the queue name on ActiveMQ Artemis, detaching
// its consumers, and its address once no queue is left on it. Deleting a
// missing queue succeeds.
func DestroyArtemisQueue(ctx context.Context, m *amqpwire.ArtemisManagement, name string) error {
	_, err := m.Invoke(ctx, "broker", "destroyQueue", name, true, true)
	if amqpwire.IsArtemisCode(err, artemisNoSuchQueue) {
		return nil
	}
	return err
}
