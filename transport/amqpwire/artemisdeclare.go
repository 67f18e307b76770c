package amqpwire

import (
	"context"
	"errors"
	"fmt"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/address"
)

// Artemis's codes for a user without the permission asked for.
const (
	artemisNoAddressPermission = "AMQ229032"
	artemisNoQueuePermission   = "AMQ229213"
)

// ensureExclusive makes the queue of the Artemis partition queue a
// exclusive before a link attaches to it: Artemis delivers an exclusive
// queue to one consumer, the others waiting until it detaches, which is
// what keeps a group with one replica. Artemis applies no exclusive=true
// address parameter over AMQP, and auto-creates a plain queue on a
// sender's or receiver's attach, so the queue is created through
// management, or made exclusive there when it exists without. A user not
// allowed to manage attaches to whatever is there, as on RabbitMQ 4.
func (c *Conn) ensureExclusive(ctx context.Context, a address.Address) error {
	m, name := c.artemis, a.Name()
	excl, err := m.QueueExclusive(ctx, name)
	var refused *ArtemisError
	if err != nil && !errors.As(err, &refused) {
		return c.exclusiveFailed(a, err) // no answer from the broker
	}
	if err != nil {
		// Most likely missing (Artemis says only that it could not read
		// the attribute): create it, which says what is wrong otherwise.
		err = m.CreateQueue(ctx, ArtemisQueue{Name: name, Exclusive: true})
		if err == nil {
			return nil
		}
		if !IsArtemisCode(err, artemisQueueExists) {
			return c.exclusiveFailed(a, err)
		}
		// Created meanwhile, by another replica or a sender.
		if excl, err = m.QueueExclusive(ctx, name); err != nil {
			return c.exclusiveFailed(a, err)
		}
	}
	if excl {
		return nil
	}
	c.log.Warn("amqpactor: partition queue exists without exclusive; making it exclusive", "queue", name)
	if err := m.SetExclusive(ctx, name, true); err != nil {
		return c.exclusiveFailed(a, err)
	}
	return nil
}

// exclusiveFailed is the error of ensureExclusive, or nil, logged, for a
// refusal to manage.
func (c *Conn) exclusiveFailed(a address.Address, err error) error {
	var ae *amqp.Error
	if IsArtemisCode(err, artemisNoAddressPermission) || IsArtemisCode(err, artemisNoQueuePermission) ||
		errors.As(err, &ae) && ae.Condition == amqp.ErrCondUnauthorizedAccess {
		c.log.Warn("amqpactor: not allowed to make the partition queue exclusive; attaching to it as it is",
			"queue", a.Name(), "broker", err.Error())
		return nil
	}
	return declareError(a.String(), fmt.Errorf("make the partition queue exclusive: %w", err))
}
