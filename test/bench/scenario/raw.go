package scenario

import (
	"context"
	"fmt"

	"github.com/Azure/go-amqp"
)

// dialRaw opens the raw side's one connection and has cl close it.
func dialRaw(ctx context.Context, cl *cleanups, url, containerID string) (*amqp.Conn, error) {
	conn, err := amqp.Dial(ctx, url, &amqp.ConnOptions{ContainerID: containerID})
	if err != nil {
		return nil, fmt.Errorf("raw go-amqp dial: %w", err)
	}
	cl.add(func() error { _ = conn.Close(); return nil })
	return conn, nil
}

func rawSession(ctx context.Context, conn *amqp.Conn) (*amqp.Session, error) {
	s, err := conn.NewSession(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("raw go-amqp session: %w", err)
	}
	return s, nil
}

// rawReceiver attaches a receiver with go-amqp's own credit management and
// the settle modes amqpactor asks for: unsettled deliveries settled by the
// receiver first (at-least-once), or pre-settled ones when settled is true.
func rawReceiver(ctx context.Context, s *amqp.Session, addr string, credit int, settled bool) (*amqp.Receiver, error) {
	o := &amqp.ReceiverOptions{Credit: int32(credit)}
	if settled {
		ssm := amqp.SenderSettleModeSettled
		o.RequestedSenderSettleMode = &ssm
	} else {
		ssm, rsm := amqp.SenderSettleModeUnsettled, amqp.ReceiverSettleModeFirst
		o.RequestedSenderSettleMode, o.SettlementMode = &ssm, &rsm
	}
	r, err := s.NewReceiver(ctx, addr, o)
	if err != nil {
		return nil, fmt.Errorf("raw go-amqp receiver on %s: %w", addr, err)
	}
	return r, nil
}

func rawSender(ctx context.Context, s *amqp.Session, addr string) (*amqp.Sender, error) {
	snd, err := s.NewSender(ctx, addr, nil)
	if err != nil {
		return nil, fmt.Errorf("raw go-amqp sender on %s: %w", addr, err)
	}
	return snd, nil
}

// rawSenderSession opens a session on conn with a sender on addr.
func rawSenderSession(ctx context.Context, conn *amqp.Conn, addr string) (*amqp.Session, *amqp.Sender, error) {
	s, err := rawSession(ctx, conn)
	if err != nil {
		return nil, nil, err
	}
	snd, err := rawSender(ctx, s, addr)
	return s, snd, err
}

// rawReceiverSession opens a session on conn with a receiver on addr (as
// rawReceiver attaches it).
func rawReceiverSession(ctx context.Context, conn *amqp.Conn, addr string, credit int, settled bool) (*amqp.Receiver, error) {
	s, err := rawSession(ctx, conn)
	if err != nil {
		return nil, err
	}
	return rawReceiver(ctx, s, addr, credit, settled)
}

// receiveN runs next total times on a goroutine of its own, and ends there
// at its first error, which cancels the run with it; the channel returned
// closes when the goroutine returns.
func receiveN(cancel context.CancelCauseFunc, total int, next func() error) <-chan struct{} {
	received := make(chan struct{})
	go func() {
		defer close(received)
		for range total {
			if err := next(); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return received
}

func accepted(st amqp.DeliveryState) error {
	if _, ok := st.(*amqp.StateAccepted); ok {
		return nil
	}
	return fmt.Errorf("publish not accepted: %T %+v", st, st)
}

// sendPipelined sends n messages from one goroutine with SendWithReceipt,
// never more than window awaiting their outcome; a second goroutine awaits
// the receipts in order and frees a slot for each (the shape of amqpactor's
// sender actor, a writer and an in-order confirmer, minus the actor).
func sendPipelined(ctx context.Context, snd *amqp.Sender, body []byte, n, window int) error {
	slots := make(chan struct{}, window)
	receipts := make(chan amqp.SendReceipt, window)
	confirmed := make(chan error, 1)
	go func() {
		var first error
		for r := range receipts {
			st, err := r.Wait(ctx)
			if err == nil {
				err = accepted(st)
			}
			if err != nil && first == nil {
				first = err
			}
			<-slots
		}
		confirmed <- first
	}()
	var err error
	for range n {
		slots <- struct{}{}
		var r amqp.SendReceipt
		if r, err = snd.SendWithReceipt(ctx, amqp.NewMessage(body), nil); err != nil {
			<-slots
			break
		}
		receipts <- r
	}
	close(receipts)
	if cerr := <-confirmed; err == nil {
		err = cerr
	}
	return err
}

// closeLinks closes raw links outside the clock, bounded.
func closeLinks(links ...interface{ Close(context.Context) error }) {
	ctx, cancel := bounded()
	defer cancel()
	for _, l := range links {
		_ = l.Close(ctx)
	}
}
