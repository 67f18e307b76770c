package amqpwire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Artemis's code for a queue that exists already, answering createQueue.
const artemisQueueExists = "AMQ229019"

// ArtemisQueue is the configuration of a queue as Artemis's management
// takes it (createQueue and updateQueue, the overloads of one JSON queue
// configuration). The zero value of every field but Name is an anycast
// queue on the address of its own name, created with it.
type ArtemisQueue struct {
	Name string
	// Address is the address the queue is bound to; empty means Name.
	Address string
	// Multicast makes a subscription queue of a topic; the default is an
	// anycast queue, whose consumers compete.
	Multicast bool
	// Exclusive delivers every message to one consumer at a time, the
	// next one only once it detaches (the partition queues of a
	// Partitioned address).
	Exclusive bool
	// Transient is a queue that does not survive a broker restart.
	Transient bool
}

func (q ArtemisQueue) json(create bool) (string, error) {
	if q.Name == "" {
		return "", errors.New("amqpactor: artemis queue: empty name")
	}
	cfg := map[string]any{"name": q.Name, "exclusive": q.Exclusive}
	if create {
		addr, rt := q.Address, "ANYCAST"
		if addr == "" {
			addr = q.Name
		}
		if q.Multicast {
			rt = "MULTICAST"
		}
		cfg["address"], cfg["routing-type"] = addr, rt
		cfg["durable"], cfg["auto-create-address"] = !q.Transient, true
	}
	b, err := json.Marshal(cfg)
	return string(b), err
}

// CreateQueue creates q (and its address when missing). A queue that exists
// already is an *ArtemisError with code AMQ229019 (IsArtemisCode).
func (m *ArtemisManagement) CreateQueue(ctx context.Context, q ArtemisQueue) error {
	cfg, err := q.json(true)
	if err != nil {
		return err
	}
	_, err = m.Invoke(ctx, "broker", "createQueue", cfg)
	return err
}

// SetExclusive makes the existing queue name exclusive, or not; the other
// properties stay as they are.
func (m *ArtemisManagement) SetExclusive(ctx context.Context, name string, exclusive bool) error {
	cfg, err := ArtemisQueue{Name: name, Exclusive: exclusive}.json(false)
	if err != nil {
		return err
	}
	_, err = m.Invoke(ctx, "broker", "updateQueue", cfg)
	return err
}

// QueueExclusive reports whether the queue name is exclusive.
func (m *ArtemisManagement) QueueExclusive(ctx context.Context, name string) (bool, error) {
	v, err := m.Attribute(ctx, "queue."+name, "exclusive")
	if err != nil {
		return false, err
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("amqpactor: artemis management attribute exclusive of queue.%s: %v is no boolean", name, v)
	}
	return b, nil
}

// ConsumerCount reads the number of consumers attached to the queue name:
// every one, not only the one an exclusive queue delivers to. A missing
// queue is an *ArtemisError.
func (m *ArtemisManagement) ConsumerCount(ctx context.Context, name string) (int, error) {
	v, err := m.Attribute(ctx, "queue."+name, "consumerCount")
	if err != nil {
		return 0, err
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("amqpactor: artemis management attribute consumerCount of queue.%s: %v is no number", name, v)
	}
	i, err := strconv.Atoi(n.String())
	if err != nil {
		return 0, fmt.Errorf("amqpactor: artemis management attribute consumerCount of queue.%s: %w", name, err)
	}
	return i, nil
}
