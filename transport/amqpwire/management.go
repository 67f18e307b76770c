package amqpwire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/go-amqp"

	"github.com/amqpactor/amqpactor/transport/internal/endpoint"
)

// managementNode is RabbitMQ 4's management node address.
const managementNode = "/management"

// Management is a client of RabbitMQ 4's AMQP management node
// (HTTP-over-AMQP, the v2 API): one per Conn, from Conn.Management.
//
// Its links, a sender and a receiver on a session of their own, both named
// alike and marked paired, are opened on the first request; requests are
// serialised, and each is bounded by its context (DefaultRequestTimeout when
// the context has no deadline). When the links fail they are reopened by the
// next request.
//
// It supports what the runtime needs: declare and inspect queues, declare
// exchanges, bind a queue or exchange to an exchange; and Request for
// anything else the node understands.
type Management struct {
	conn *Conn

	mgmtLinks // its mu also guards the fields below
	prefix    string
	seq       uint64
}

// ManagementError is a management request the broker answered with a status
// other than 2xx. Message is the broker's own explanation.
type ManagementError struct {
	Method  string
	Path    string
	Status  int
	Message string
}

func (e *ManagementError) Error() string {
	s := fmt.Sprintf("amqpactor: management %s %s: status %d", e.Method, e.Path, e.Status)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// IsStatus reports whether err is a *ManagementError with the given status.
func IsStatus(err error, status int) bool {
	var me *ManagementError
	return errors.As(err, &me) && me.Status == status
}

// Response is the broker's answer to a management request: the status code
// (the response's subject) and the amqp-value body (a map[string]any, a
// []any, a string, or nil).
type Response struct {
	Status int
	Body   any
}

// QueueType is a RabbitMQ queue type.
type QueueType string

const (
	Quorum  QueueType = "quorum"
	Classic QueueType = "classic"
	Stream  QueueType = "stream"
)

// QueueSpec describes a queue to declare. The zero value of every field but
// Name declares a durable quorum queue.
type QueueSpec struct {
	Name string
	// Type is the x-queue-type; empty means Quorum.
	Type QueueType
	// Transient declares a queue that does not survive a broker restart
	// (classic only).
	Transient bool
	// Exclusive ties the queue to this connection: it is deleted when the
	// connection ends (classic only).
	Exclusive bool
	// AutoDelete deletes the queue once its last consumer detaches (classic
	// only).
	AutoDelete bool
	// Arguments are further x-arguments, e.g. "x-max-length": int64(1),
	// "x-overflow": "reject-publish", "x-delivery-limit": int64(5).
	Arguments map[string]any
	// SingleActiveConsumer declares x-single-active-consumer: true: the
	// broker delivers to one consumer at a time and hands over to the next
	// when it leaves (the partition queues of a Partitioned address).
	SingleActiveConsumer bool
}

// QueueInfo is the broker's description of a queue.
type QueueInfo struct {
	Name       string
	Type       QueueType
	Durable    bool
	Exclusive  bool
	AutoDelete bool
	Messages   uint64
	Consumers  uint32
	Arguments  map[string]any
	// Created is true when the declaration created the queue (status 201).
	Created bool
}

// ExchangeSpec describes an exchange to declare. The zero value of every
// field but Name declares a durable direct exchange.
type ExchangeSpec struct {
	Name string
	// Type is direct (the default), fanout, topic or headers.
	Type       string
	Transient  bool
	AutoDelete bool
	// Internal: clients cannot publish to it; only bindings lead from it.
	Internal  bool
	Arguments map[string]any
}

// Binding routes from the exchange Source to exactly one of Queue or
// Exchange, for messages whose routing key matches Key.
type Binding struct {
	Source    string
	Queue     string
	Exchange  string
	Key       string
	Arguments map[string]any
}

// QueuePath is the management path of a queue, percent-encoded.
func QueuePath(name string) string { return "/queues/" + quote(name) }

// ExchangePath is the management path of an exchange, percent-encoded.
func ExchangePath(name string) string { return "/exchanges/" + quote(name) }

// quote percent-encodes everything but RFC 3986's unreserved characters, as
// RabbitMQ's v2 addresses and management paths expect.
func quote(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// DeclareQueue declares q. Declaring a queue that exists with the same
// properties succeeds; with different ones it fails with status 409 and the
// broker's explanation, naming the queue.
func (m *Management) DeclareQueue(ctx context.Context, q QueueSpec) (QueueInfo, error) {
	if q.Name == "" {
		return QueueInfo{}, errors.New("amqpactor: declare queue: empty name")
	}
	args := make(map[string]any, len(q.Arguments)+1)
	for k, v := range q.Arguments {
		args[k] = v
	}
	typ := q.Type
	if typ == "" {
		typ = Quorum
	}
	args["x-queue-type"] = string(typ)
	if q.SingleActiveConsumer {
		args["x-single-active-consumer"] = true
	}
	body := map[string]any{
		"durable":     !q.Transient,
		"exclusive":   q.Exclusive,
		"auto_delete": q.AutoDelete,
		"arguments":   args,
	}
	resp, err := m.Request(ctx, "PUT", QueuePath(q.Name), body)
	if err != nil {
		return QueueInfo{}, err
	}
	info := queueInfo(resp.Body)
	info.Created = resp.Status == 201
	return info, nil
}

// QueueInfo describes the queue name; a missing queue is a
// *ManagementError with status 404.
func (m *Management) QueueInfo(ctx context.Context, name string) (QueueInfo, error) {
	resp, err := m.Request(ctx, "GET", QueuePath(name), nil)
	if err != nil {
		return QueueInfo{}, err
	}
	return queueInfo(resp.Body), nil
}

// DeclareExchange declares x. Declaring one that exists with the same
// properties succeeds; with different ones it fails with status 409.
func (m *Management) DeclareExchange(ctx context.Context, x ExchangeSpec) error {
	if x.Name == "" {
		return errors.New("amqpactor: declare exchange: empty name")
	}
	typ := x.Type
	if typ == "" {
		typ = "direct"
	}
	args := x.Arguments
	if args == nil {
		args = map[string]any{}
	}
	_, err := m.Request(ctx, "PUT", ExchangePath(x.Name), map[string]any{
		"type":        typ,
		"durable":     !x.Transient,
		"auto_delete": x.AutoDelete,
		"internal":    x.Internal,
		"arguments":   args,
	})
	return err
}

// Bind adds b. Adding a binding that exists succeeds.
func (m *Management) Bind(ctx context.Context, b Binding) error {
	body, err := bindingBody(b)
	if err != nil {
		return err
	}
	_, err = m.Request(ctx, "POST", "/bindings", body)
	return err
}

// Unbind removes b, which must carry no arguments (a binding with
// arguments is named by BindingInfo.Location). Removing a missing binding
// succeeds.
func (m *Management) Unbind(ctx context.Context, b Binding) error {
	if b.Source == "" || (b.Queue == "") == (b.Exchange == "") || len(b.Arguments) > 0 {
		return errors.New("amqpactor: unbind: a binding without arguments from a source exchange to exactly one of Queue or Exchange")
	}
	dst := "dstq=" + quote(b.Queue)
	if b.Exchange != "" {
		dst = "dste=" + quote(b.Exchange)
	}
	_, err := m.Request(ctx, "DELETE", "/bindings/src="+quote(b.Source)+";"+dst+";key="+quote(b.Key)+";args=", nil)
	return err
}

// BindingInfo is a binding as the broker lists it.
type BindingInfo struct {
	Binding
	// Location is the binding's management path, which DELETE removes
	// whatever its arguments.
	Location string
}

// Bindings lists the bindings from the exchange source to the queue with
// the binding key key (RabbitMQ 4 lists bindings by their key only).
func (m *Management) Bindings(ctx context.Context, source, queue, key string) ([]BindingInfo, error) {
	resp, err := m.Request(ctx, "GET", "/bindings?src="+quote(source)+"&dstq="+quote(queue)+"&key="+quote(key), nil)
	if err != nil {
		return nil, err
	}
	list, _ := resp.Body.([]any)
	out := make([]BindingInfo, 0, len(list))
	for _, e := range list {
		mp := asMap(e)
		var b BindingInfo
		b.Source, _ = mp["source"].(string)
		b.Queue, _ = mp["destination_queue"].(string)
		b.Exchange, _ = mp["destination_exchange"].(string)
		b.Key, _ = mp["binding_key"].(string)
		b.Arguments = asMap(mp["arguments"])
		b.Location, _ = mp["location"].(string)
		out = append(out, b)
	}
	return out, nil
}

func bindingBody(b Binding) (map[string]any, error) {
	if b.Source == "" || (b.Queue == "") == (b.Exchange == "") {
		return nil, errors.New("amqpactor: binding needs a source exchange and exactly one of Queue or Exchange")
	}
	args := b.Arguments
	if args == nil {
		args = map[string]any{}
	}
	body := map[string]any{"source": b.Source, "binding_key": b.Key, "arguments": args}
	if b.Queue != "" {
		body["destination_queue"] = b.Queue
	} else {
		body["destination_exchange"] = b.Exchange
	}
	return body, nil
}

// managementTries bounds the attempts of one request on fresh link pairs.
const managementTries = 3

// Request sends one request to the management node: method is the HTTP
// method (GET, PUT, POST, DELETE), path the request target (e.g.
// "/queues/orders", percent-encoded), body the amqp-value (a map, or nil
// for none). A status of 300 or above is returned as a *ManagementError
// together with the Response.
func (m *Management) Request(ctx context.Context, method, path string, body any) (Response, error) {
	ctx, cancel := endpoint.Bound(ctx, DefaultRequestTimeout)
	defer cancel()
	m.mu.Lock()
	defer m.mu.Unlock()
	resp, err := m.roundTrip(ctx, method, path, body)
	for try := 1; err != nil && m.sess == nil && ctx.Err() == nil && !m.closed.Load() && try < managementTries; try++ {
		// The links failed and were dropped: RabbitMQ ends a pair whose
		// receiver had not granted credit when the first request came,
		// and go-amqp sends that credit from the receiver's own goroutine,
		// which a loaded machine can hold back past the first request. A
		// fresh pair, a moment later, gets another try.
		m.conn.log.Debug("amqpactor: management links failed; retrying on new ones",
			"method", method, "path", path, "try", try, "error", err)
		t := time.NewTimer(time.Duration(try) * 20 * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil {
			break
		}
		resp, err = m.roundTrip(ctx, method, path, body)
	}
	if err != nil {
		return resp, err
	}
	m.conn.log.Debug("amqpactor: management request", "method", method, "path", path, "status", resp.Status)
	if resp.Status >= 300 {
		msg, _ := resp.Body.(string)
		return resp, &ManagementError{Method: method, Path: path, Status: resp.Status, Message: msg}
	}
	return resp, nil
}

// roundTrip runs one request; m.mu is held.
func (m *Management) roundTrip(ctx context.Context, method, path string, body any) (Response, error) {
	fail := func(err error) (Response, error) {
		return Response{}, fmt.Errorf("amqpactor: management %s %s: %w", method, path, describe(err))
	}
	if m.closed.Load() {
		return fail(errors.New("connection closed"))
	}
	if m.sess == nil {
		if err := m.open(ctx); err != nil {
			return fail(err)
		}
	}
	if body == nil {
		body = amqp.Null{}
	}
	m.seq++
	id := m.prefix + strconv.FormatUint(m.seq, 10)
	replyTo := "$me"
	msg := &amqp.Message{
		Properties: &amqp.MessageProperties{
			MessageID: id,
			To:        &path,
			Subject:   &method,
			ReplyTo:   &replyTo,
		},
		Value: body,
	}
	if err := m.snd.Send(ctx, msg, &amqp.SendOptions{Settled: true}); err != nil {
		m.dropIfDead(ctx)
		return fail(err)
	}
	for {
		r, err := m.rcv.Receive(ctx, nil)
		if err != nil {
			m.dropIfDead(ctx)
			return fail(err)
		}
		if r.Properties == nil || r.Properties.CorrelationID != id {
			// A late answer to a request whose caller gave up.
			continue
		}
		var subject string
		if r.Properties.Subject != nil {
			subject = *r.Properties.Subject
		}
		status, err := strconv.Atoi(subject)
		if err != nil {
			return fail(fmt.Errorf("response without a status code (subject %q)", subject))
		}
		return Response{Status: status, Body: r.Value}, nil
	}
}

// open attaches the link pair; m.mu is held.
func (m *Management) open(ctx context.Context) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tag := hex.EncodeToString(rnd[:])
	m.prefix = "amqpactor-" + tag + "-"
	name := "amqpactor-management-" + tag
	props := map[string]any{"paired": true}

	sess, err := m.conn.amqp.NewSession(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin session: %w", err)
	}
	// The receiver attaches first, with automatic credit: go-amqp sends its
	// flow as the receiver starts, ahead of the sender's attach on the same
	// session, so the broker sees credit before the first request.
	settled := amqp.SenderSettleModeSettled
	rcv, err := sess.NewReceiver(ctx, managementNode, &amqp.ReceiverOptions{
		Name:                      name,
		Properties:                props,
		Credit:                    32,
		RequestedSenderSettleMode: &settled,
	})
	if err != nil {
		m.endSession(sess)
		return fmt.Errorf("attach receiver to %s: %w", managementNode, err)
	}
	snd, err := sess.NewSender(ctx, managementNode, &amqp.SenderOptions{
		Name:           name,
		Properties:     props,
		SettlementMode: &settled,
	})
	if err != nil {
		m.endSession(sess)
		return fmt.Errorf("attach sender to %s: %w", managementNode, err)
	}
	m.sess, m.snd, m.rcv = sess, snd, rcv
	return nil
}

func queueInfo(body any) QueueInfo {
	mp := asMap(body)
	var q QueueInfo
	q.Name, _ = mp["name"].(string)
	if t, ok := mp["type"].(string); ok {
		q.Type = QueueType(t)
	}
	q.Durable, _ = mp["durable"].(bool)
	q.Exclusive, _ = mp["exclusive"].(bool)
	q.AutoDelete, _ = mp["auto_delete"].(bool)
	q.Messages = countOf(body)
	if n, ok := mp["consumer_count"].(uint32); ok {
		q.Consumers = n
	}
	q.Arguments = asMap(mp["arguments"])
	return q
}

func countOf(body any) uint64 {
	switch n := asMap(body)["message_count"].(type) {
	case uint64:
		return n
	case uint32:
		return uint64(n)
	case int64:
		return uint64(n)
	}
	return 0
}

// asMap returns body as a map with string keys (go-amqp decodes an empty
// map as map[any]any).
func asMap(body any) map[string]any {
	switch mp := body.(type) {
	case map[string]any:
		return mp
	case map[any]any:
		out := make(map[string]any, len(mp))
		for k, v := range mp {
			if s, ok := k.(string); ok {
				out[s] = v
			}
		}
		return out
	}
	return map[string]any{}
}
