package sender

import (
	"context"
	"errors"
	"fmt"

	"github.com/amqpactor/amqpactor/internal/protocol"
)

// onDrain waits for every publish already handed to the link to be
// confirmed, then detaches. Publishes still waiting for a link fail.
func (s *sender) onDrain(m *protocol.Drain) {
	s.drain = m
	s.failWaiting(protocol.ErrStopped)
	if s.link == nil {
		m.Done <- nil
		return
	}
	k := s.link
	s.link = nil
	s.set(evDetached, nil)
	env := s.env
	confirmed := make(chan error, 1)
	k.Finish(confirmed)
	grace := m.Grace()
	env.Go(func() {
		var err error
		select {
		case err = <-confirmed:
		case <-grace.Done():
			err = fmt.Errorf("amqpactor: waiting for publish confirmations on %s: %w", s.label(), grace.Err())
		}
		cctx, ccancel := env.CloseCtx(m.Ctx)
		if cerr := k.Sender().Close(cctx); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
			err = cerr
		}
		ccancel()
		m.Done <- err
	})
}
