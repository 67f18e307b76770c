package amqpactor_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor"
	"github.com/amqpactor/amqpactor/inproc"
)

type Invoice struct {
	Number string    `json:"number"`
	Amount float64   `json:"amount"`
	Due    time.Time `json:"due"`
	Lines  []Line    `json:"lines,omitempty"`
}

type Line struct {
	SKU string `json:"sku"`
	Qty uint32 `json:"qty"`
}

func asyncDoc(t *testing.T, app *amqpactor.App) map[string]any {
	t.Helper()
	b, err := app.AsyncAPI()
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	requireRefsResolve(t, doc, doc)
	return doc
}

// requireRefsResolve checks that every $ref in v points at something in doc.
func requireRefsResolve(t *testing.T, doc, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		if ref, ok := x["$ref"].(string); ok {
			require.True(t, strings.HasPrefix(ref, "#/"), "local reference %q", ref)
			require.NotNil(t, pointer(doc, ref), "reference %q resolves", ref)
		}
		for _, e := range x {
			requireRefsResolve(t, doc, e)
		}
	case []any:
		for _, e := range x {
			requireRefsResolve(t, doc, e)
		}
	}
}

func pointer(doc any, ref string) any {
	cur := doc
	for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func get(v any, path ...string) any {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// The document of an App dialled with a password holds no credentials, and
// spells every address as the RabbitMQ 4 dialect does.
func TestAsyncAPIHasNoCredentialsAndSpellsTheDialect(t *testing.T) {
	const password = "s3cret-Pa55"
	app := amqpactor.New(amqpactor.Dial("amqps://svc-user:"+password+"@broker.test:5671/prod",
		amqpactor.WithDialect(amqpactor.RabbitMQ4)), amqpactor.WithName("billing"))
	_, err := app.Subscribe(amqpactor.Queue("invoices"), amqpactor.Typed(func(ctx context.Context, inv Invoice, m *amqpactor.Message) error {
		return nil
	}), amqpactor.WithCredit(32), amqpactor.WithPartitions(2), amqpactor.WithClassicQueue())
	require.NoError(t, err)
	_, err = app.SubscribeBatch(amqpactor.Topic("events"), func(ctx context.Context, ms []*amqpactor.Message) error { return nil },
		amqpactor.WithBatch(20, 10*time.Millisecond), amqpactor.AtMostOnce())
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Topic("events"), func(context.Context, *amqpactor.Message) error { return nil },
		amqpactor.WithBindingKeys("orders.*.eu", "#.us"), amqpactor.WithSubscriptionName("eu"))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Stream("audit"), func(context.Context, *amqpactor.Message) error { return nil },
		amqpactor.WithStreamOffset(amqpactor.StreamAt(42)))
	require.NoError(t, err)

	raw, err := app.AsyncAPI()
	require.NoError(t, err)
	require.NotContains(t, string(raw), password)
	require.NotContains(t, string(raw), "svc-user")
	require.NotContains(t, string(raw), "xxxxx")

	doc := asyncDoc(t, app)
	require.Equal(t, "3.0.0", doc["asyncapi"])
	require.Equal(t, "billing", get(doc, "info", "title"))
	require.Equal(t, "1.0.0", get(doc, "info", "version"))
	require.Equal(t, map[string]any{
		"host": "broker.test:5671", "protocol": "amqps", "protocolVersion": "1.0", "pathname": "/prod",
		"description": "The broker the App dials (RabbitMQ4 dialect).",
		"bindings":    map[string]any{"x-amqpactor-amqp1": map[string]any{"bindingVersion": "0.1.0", "dialect": "RabbitMQ4"}},
	}, get(doc, "servers", "broker"))

	inv := get(doc, "channels", "queue-invoices").(map[string]any)
	require.Equal(t, "/queues/invoices", inv["address"])
	b := get(inv, "bindings", "x-amqpactor-amqp1")
	require.Equal(t, "queue", get(b, "kind"))
	require.Equal(t, "RabbitMQ4", get(b, "dialect"))
	require.Nil(t, get(b, "target"), "nothing was published here")
	sub := get(b, "subscriptions", "0")
	require.Equal(t, "billing.invoices", get(sub, "name"))
	require.Equal(t, "/queues/invoices", get(sub, "source", "address"))
	require.Equal(t, map[string]any{"queue": "invoices", "queueType": "classic"}, get(sub, "source", "declares"))
	require.Equal(t, 32.0, get(sub, "credit"))
	require.Equal(t, 2.0, get(sub, "partitions"))
	require.Equal(t, "typed", get(sub, "handler"))
	require.Equal(t, "amqpactor_test.Invoice", get(sub, "payload"))
	require.Equal(t, "unsettled", get(sub, "senderSettleMode"))
	require.Equal(t, "first", get(sub, "receiverSettleMode"))
	require.Equal(t, "modified{delivery-failed}", get(sub, "retry", "failure"))

	require.Equal(t, map[string]any{"$ref": "#/components/messages/Invoice"}, get(inv, "messages", "Invoice"))
	require.Equal(t, "application/json", get(doc, "components", "messages", "Invoice", "contentType"))
	require.Equal(t, "#/components/schemas/Invoice", get(doc, "components", "messages", "Invoice", "payload", "$ref"))
	invSchema := get(doc, "components", "schemas", "Invoice")
	require.Equal(t, "date-time", get(invSchema, "properties", "due", "format"))
	require.Equal(t, "#/components/schemas/Line", get(invSchema, "properties", "lines", "items", "$ref"))
	require.ElementsMatch(t, []any{"number", "amount", "due"}, get(invSchema, "required"))
	require.Equal(t, "integer", get(doc, "components", "schemas", "Line", "properties", "qty", "type"))

	op := get(doc, "operations", "receive-billing_invoices")
	require.Equal(t, "receive", get(op, "action"))
	require.Equal(t, "#/channels/queue-invoices", get(op, "channel", "$ref"))
	require.Equal(t, "#/channels/queue-invoices/messages/Invoice", get(op, "messages", "0", "$ref"))

	ev := get(doc, "channels", "topic-events")
	require.Equal(t, "/exchanges/events", get(ev, "address"))
	evSub := get(ev, "bindings", "x-amqpactor-amqp1", "subscriptions", "0")
	require.Equal(t, "/queues/events.billing.events", get(evSub, "source", "address"))
	require.Equal(t, map[string]any{"queue": "events.billing.events", "queueType": "quorum", "exchange": "events", "bindingKey": "#"},
		get(evSub, "source", "declares"))
	require.Nil(t, get(evSub, "bindingKeys"), "a subscription without keys takes every message")
	keyed := get(ev, "bindings", "x-amqpactor-amqp1", "subscriptions", "1")
	require.Equal(t, []any{"#.us", "orders.*.eu"}, get(keyed, "bindingKeys"))
	require.Equal(t, map[string]any{"queue": "events.eu", "queueType": "quorum", "exchange": "events", "bindingKeys": []any{"#.us", "orders.*.eu"}},
		get(keyed, "source", "declares"))
	require.Equal(t, "batch", get(evSub, "handler"))
	require.Equal(t, map[string]any{"size": 20.0, "waitMs": 10.0}, get(evSub, "batch"))
	require.Equal(t, "settled", get(evSub, "senderSettleMode"))
	require.Equal(t, "at-most-once", get(evSub, "delivery"))
	require.Nil(t, get(evSub, "retry"))
	require.Equal(t, "#/components/messages/AMQPMessage", get(ev, "messages", "AMQPMessage", "$ref"))

	au := get(doc, "channels", "stream-audit")
	require.Equal(t, "/queues/audit", get(au, "address"))
	require.Equal(t, "stream", get(au, "bindings", "x-amqpactor-amqp1", "kind"))
	auSub := get(au, "bindings", "x-amqpactor-amqp1", "subscriptions", "0")
	require.Equal(t, map[string]any{"queue": "audit", "queueType": "stream"}, get(auSub, "source", "declares"))
	require.Equal(t, "offset 42", get(auSub, "streamOffset"))
}

// Addresses published to join the document from their first publish on:
// settled and unsettled transfers, requests, transactions and retry
// addresses; a Responder's replies never do.
func TestAsyncAPIRecordsPublishes(t *testing.T) {
	leakCheck(t)
	app := amqpactor.New(inproc.New(), amqpactor.WithName("svc"))
	_, err := app.Subscribe(amqpactor.Queue("rpc"), amqpactor.Responder(func(ctx context.Context, req *amqpactor.Message) (*amqpactor.Message, error) {
		return &amqpactor.Message{Body: []byte("pong")}, nil
	}))
	require.NoError(t, err)
	_, err = app.Subscribe(amqpactor.Queue("work"), func(ctx context.Context, m *amqpactor.Message) error { return nil },
		amqpactor.WithRetry(amqpactor.RetryPolicy{MaxDeliveries: 3, RetryAddress: amqpactor.Queue("work.retry")}))
	require.NoError(t, err)
	// A Typed handler wrapped in the user's middleware cannot be seen through.
	typed := amqpactor.Typed(func(ctx context.Context, v Line, m *amqpactor.Message) error { return nil })
	_, err = app.Subscribe(amqpactor.Queue("wrapped"), func(ctx context.Context, m *amqpactor.Message) error { return typed(ctx, m) })
	require.NoError(t, err)

	before := asyncDoc(t, app)
	require.Nil(t, get(before, "channels", "topic-events"))
	start(t, app)
	ctx := ctxT(t)
	require.NoError(t, app.Publish(ctx, amqpactor.Topic("events"), &amqpactor.Message{Body: []byte("e")}))
	require.NoError(t, app.Publish(ctx, amqpactor.Topic("events"), &amqpactor.Message{Body: []byte("e")}, amqpactor.Settled()))
	_, err = app.Request(ctx, amqpactor.Queue("rpc"), &amqpactor.Message{Body: []byte("ping")})
	require.NoError(t, err)
	require.NoError(t, app.Transaction(ctx, func(tx *amqpactor.Tx) error {
		return tx.Publish(ctx, amqpactor.Raw("audit"), &amqpactor.Message{Body: []byte("a")})
	}))

	doc := asyncDoc(t, app)
	require.ElementsMatch(t, []string{"queue-rpc", "queue-work", "queue-work_retry", "queue-wrapped", "topic-events", "raw-audit"},
		keysOf(doc["channels"]), "no reply address is listed")
	require.ElementsMatch(t, []string{"receive-svc_rpc", "receive-svc_work", "receive-svc_wrapped", "request-queue-rpc",
		"send-queue-work_retry", "send-topic-events", "send-raw-audit"}, keysOf(doc["operations"]))

	require.Equal(t, []any{"unsettled", "settled"}, get(doc, "channels", "topic-events", "bindings", "x-amqpactor-amqp1", "publish", "transfers"))
	require.Equal(t, map[string]any{"address": "events", "capabilities": []any{"topic"}},
		get(doc, "channels", "topic-events", "bindings", "x-amqpactor-amqp1", "target"))
	require.Equal(t, true, get(doc, "channels", "raw-audit", "bindings", "x-amqpactor-amqp1", "publish", "transactional"))
	require.Equal(t, []any{}, get(doc, "channels", "raw-audit", "bindings", "x-amqpactor-amqp1", "target", "capabilities"))
	require.Equal(t, []any{"svc.work"}, get(doc, "channels", "queue-work_retry", "bindings", "x-amqpactor-amqp1", "publish", "retryFor"))
	require.Equal(t, "queue:work.retry", get(doc, "channels", "queue-work", "bindings", "x-amqpactor-amqp1", "subscriptions", "0", "retry", "retryAddress"))
	require.Equal(t, 3.0, get(doc, "channels", "queue-work", "bindings", "x-amqpactor-amqp1", "subscriptions", "0", "retry", "maxDeliveries"))

	require.Equal(t, "$message.header#/reply-to", get(doc, "operations", "request-queue-rpc", "reply", "address", "location"))
	require.Equal(t, "send", get(doc, "operations", "request-queue-rpc", "action"))
	require.Equal(t, "$message.header#/reply-to", get(doc, "operations", "receive-svc_rpc", "reply", "address", "location"))
	require.Equal(t, "responder", get(doc, "operations", "receive-svc_rpc", "bindings", "x-amqpactor-amqp1", "handler"))
	require.Equal(t, "handler", get(doc, "operations", "receive-svc_wrapped", "bindings", "x-amqpactor-amqp1", "handler"))
	require.Nil(t, get(doc, "components", "schemas"), "no Typed handler is visible")
}

// A closed subscription leaves the document.
func TestAsyncAPIForgetsClosedSubscriptions(t *testing.T) {
	app := amqpactor.New(inproc.New())
	s, err := app.Subscribe(amqpactor.Queue("a"), func(ctx context.Context, m *amqpactor.Message) error { return nil })
	require.NoError(t, err)
	require.NotNil(t, get(asyncDoc(t, app), "channels", "queue-a"))
	require.NoError(t, s.Close(context.Background()))
	require.Nil(t, get(asyncDoc(t, app), "channels", "queue-a"))
}

func keysOf(v any) []string {
	var out []string
	for k := range v.(map[string]any) {
		out = append(out, k)
	}
	return out
}
