package amqpwire

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
)

// artemisManagementNode is the address ActiveMQ Artemis takes management
// requests on.
const artemisManagementNode = "activemq.management"

// The application properties of an Artemis management request and reply.
const (
	artemisResource  = "_AMQ_ResourceName"
	artemisOperation = "_AMQ_OperationName"
	artemisAttribute = "_AMQ_Attribute"
	artemisSucceeded = "_AMQ_OperationSucceeded"
)

// ArtemisManagement is a client of ActiveMQ Artemis's management address
// (activemq.management): one per Conn, from Conn.ArtemisManagement.
//
// A request is a message whose application properties name the resource
// ("broker", "queue.NAME", "address.NAME") and the operation or attribute,
// with the operation's parameters as a JSON array in an amqp-value string;
// the broker sends the answer, a JSON array as well, to the request's
// reply-to, which is the address of a dynamic receiver (a temporary queue
// the broker deletes with the link). Its links, on a session of their own,
// are opened on the first request; requests are serialised, and each is
// bounded by its context (DefaultRequestTimeout when the context has no
// deadline). When the links fail they are reopened by the next request.
type ArtemisManagement struct {
	conn *Conn

	mgmtLinks // its mu also guards the fields below
	replyTo   string
	prefix    string
	seq       uint64
}

// ArtemisError is a management request the broker answered as failed
// (_AMQ_OperationSucceeded false). Message is the broker's own text, which
// starts with its code (AMQ229019: Queue q already exists on address q).
type ArtemisError struct {
	Resource string
	// Operation is the operation's name, or "attribute NAME" for a read.
	Operation string
	Message   string
}

func (e *ArtemisError) Error() string {
	return fmt.Sprintf("amqpactor: artemis management %s of %s: %s", e.Operation, e.Resource, e.Message)
}

// Code is the broker's message code (AMQ229019), or "" when its message
// starts with none.
func (e *ArtemisError) Code() string {
	code, _, ok := strings.Cut(e.Message, ":")
	if !ok || !strings.HasPrefix(code, "AMQ") || strings.ContainsAny(code, " \t") {
		return ""
	}
	return code
}

// IsArtemisCode reports whether err is an *ArtemisError with the given code.
func IsArtemisCode(err error, code string) bool {
	var ae *ArtemisError
	return errors.As(err, &ae) && ae.Code() == code
}

// Invoke runs operation on resource with params (each encoded as JSON, in
// the overload's order) and returns the broker's result, the decoded JSON
// array (JSON numbers as json.Number).
func (m *ArtemisManagement) Invoke(ctx context.Context, resource, operation string, params ...any) ([]any, error) {
	if params == nil {
		params = []any{}
	}
	body, err := json.Marshal(params)
	if err != nil {
		return nil, fmt.Errorf("amqpactor: artemis management %s of %s: encode parameters: %w", operation, resource, err)
	}
	props := map[string]any{artemisResource: resource, artemisOperation: operation}
	return m.request(ctx, resource, operation, props, string(body))
}

// Attribute reads attribute of resource (consumerCount of queue.NAME).
func (m *ArtemisManagement) Attribute(ctx context.Context, resource, attribute string) (any, error) {
	props := map[string]any{artemisResource: resource, artemisAttribute: attribute}
	res, err := m.request(ctx, resource, "attribute "+attribute, props, "[]")
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[0], nil
}

func (m *ArtemisManagement) request(ctx context.Context, resource, op string, props map[string]any, body string) ([]any, error) {
	ctx, cancel := endpoint.Bound(ctx, DefaultRequestTimeout)
	defer cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	res, err := m.roundTrip(ctx, resource, op, props, body)
	if err != nil {
		return nil, err
	}
	m.conn.log.Debug("amqpactor: artemis management request", "resource", resource, "operation", op)
	return res, nil
}

// roundTrip sends one request and waits for its reply; m.mu is held.
func (m *ArtemisManagement) roundTrip(ctx context.Context, resource, op string, props map[string]any, body string) ([]any, error) {
	fail := func(err error) ([]any, error) {
		return nil, fmt.Errorf("amqpactor: artemis management %s of %s: %w", op, resource, describe(err))
	}
	if m.closed.Load() {
		return fail(errors.New("connection closed"))
	}
	if m.sess == nil {
		if err := m.open(ctx); err != nil {
			return fail(err)
		}
	}
	m.seq++
	id := m.prefix + strconv.FormatUint(m.seq, 10)
	replyTo := m.replyTo
	msg := &amqp.Message{
		Properties:            &amqp.MessageProperties{MessageID: id, ReplyTo: &replyTo},
		ApplicationProperties: props,
		Value:                 body,
	}
	// Unsettled, so that a refusal (no permission to manage) comes back
	// as the broker's condition rather than as a reply that never comes.
	if err := m.snd.Send(ctx, msg, nil); err != nil {
		m.dropIfDead(ctx)
		return fail(err)
	}
	for {
		r, err := m.rcv.Receive(ctx, nil)
		if err != nil {
			m.dropIfDead(ctx)
			return fail(err)
		}
		_ = m.rcv.AcceptMessage(ctx, r) // a no-op when the broker sent it settled
		if r.Properties == nil || r.Properties.CorrelationID != id {
			// A late answer to a request whose caller gave up.
			continue
		}
		return artemisResult(resource, op, r)
	}
}

// artemisResult decodes a reply: the JSON array of the result, or the
// broker's message when it says the operation failed.
func artemisResult(resource, op string, r *amqp.Message) ([]any, error) {
	var text []byte
	switch v := r.Value.(type) {
	case string:
		text = []byte(v)
	case nil:
		text = r.GetData()
	default:
		return nil, fmt.Errorf("amqpactor: artemis management %s of %s: a reply body of type %T", op, resource, v)
	}
	var res []any
	if len(bytes.TrimSpace(text)) > 0 {
		d := json.NewDecoder(bytes.NewReader(text))
		d.UseNumber()
		if err := d.Decode(&res); err != nil {
			return nil, fmt.Errorf("amqpactor: artemis management %s of %s: reply %q: %w", op, resource, text, err)
		}
	}
	if ok, _ := r.ApplicationProperties[artemisSucceeded].(bool); !ok {
		e := &ArtemisError{Resource: resource, Operation: op, Message: string(text)}
		if len(res) > 0 {
			if s, isText := res[0].(string); isText {
				e.Message = s
			}
		}
		return nil, e
	}
	return res, nil
}

// open attaches the reply receiver and the request sender; m.mu is held.
func (m *ArtemisManagement) open(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	m.prefix = "amqpactor-" + tag + "-"

	sess, err := m.conn.amqp.NewSession(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin session: %w", err)
	}
	rcv, err := sess.NewReceiver(ctx, "", &amqp.ReceiverOptions{
		Name:           "amqpactor-management-replies-" + tag,
		DynamicAddress: true,
		Credit:         8,
	})
	if err != nil {
		m.endSession(sess)
		return fmt.Errorf("attach the reply receiver: %w", err)
	}
	snd, err := sess.NewSender(ctx, artemisManagementNode, &amqp.SenderOptions{
		Name: "amqpactor-management-" + tag,
	})
	if err != nil {
		m.endSession(sess)
		return fmt.Errorf("attach sender to %s: %w", artemisManagementNode, err)
	}
	m.sess, m.snd, m.rcv, m.replyTo = sess, snd, rcv, rcv.Address()
	return nil
}
