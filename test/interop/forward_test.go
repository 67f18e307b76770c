package interop

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor"
)

// TestForwardedThroughAmqpactor is the round trip: the peer sends each
// inbound message, amqpactor receives it and publishes the same Message on,
// and the peer receives it again. Everything arrives as it was sent except
// what the messages package documents as not round-tripping:
//
//   - a symbol (in application-properties, annotation values, amqp-value
//     bodies, map keys) comes back as a string;
//   - amqp-sequence sections come back as one amqp-value list, several data
//     sections as one;
//   - a priority of 0 comes back as the default (no priority on the wire).
func TestForwardedThroughAmqpactor(t *testing.T) {
	eachPeer(t, func(t *testing.T, e *env) {
		p := e.peer
		in := e.queue("forward-in")
		out := e.declare("forward-out")
		h, wait := collect(t)
		app := e.app(func(app *amqpactor.App) {
			if _, err := app.Subscribe(amqpactor.Queue(in), h); err != nil {
				t.Fatalf("subscribe: %v", err)
			}
		})

		cases := e.peerSends(t, in)

		ctx := testContext(t, 30*time.Second)
		byID := map[string]*amqpactor.Message{}
		for _, m := range wait(ctx, len(cases)) {
			byID[idKey(m.MessageID)] = m
		}
		for _, c := range cases {
			m := byID[idKey(c.want.MessageID)]
			if m == nil {
				t.Fatalf("%s: not received", c.name)
			}
			if err := app.Publish(ctx, amqpactor.Queue(out), m); err != nil {
				t.Fatalf("%s: publish it on: %v", c.name, err)
			}
		}

		got := e.peerReceives(t, out, len(cases))
		for i, c := range cases {
			e.checkSeen(t, c.name, out, got[i], forwarded(c.spec, e.stored(p, c.spec.Header)))
		}
	})
}

// forwarded is what a peer sees of spec after amqpactor received it and
// published it on (see TestForwardedThroughAmqpactor).
func forwarded(spec peerMsg, durable bool) outboundCase {
	w := outboundCase{durable: durable, priority: 4, props: spec.Properties}
	if h := spec.Header; h != nil {
		if h.Priority != nil && *h.Priority != 0 {
			w.priority = *h.Priority
		}
		w.ttl = h.TTL
	}
	w.sections = append(w.sections, "header", "message-annotations")
	if spec.Properties != nil {
		w.sections = append(w.sections, "properties")
	}
	if spec.ApplicationProperties != nil {
		w.sections = append(w.sections, "application-properties")
		w.appProps = map[string]tv{}
		for k, v := range spec.ApplicationProperties {
			w.appProps[k] = unsym(v)
		}
	}
	for _, a := range spec.MessageAnnotations {
		w.annotations = append(w.annotations, pair{a[0], unsym(a[1])})
	}
	switch b := spec.Body; b.Kind {
	case "data":
		var parts [][]byte
		mustJSON(b.V, &parts)
		all := []byte{}
		for _, p := range parts {
			all = append(all, p...)
		}
		w.body = dataBody(all)
		w.sections = append(w.sections, "data")
	case "value":
		var v tv
		mustJSON(b.V, &v)
		w.body = valueBody(unsym(v))
		w.sections = append(w.sections, "amqp-value")
	case "sequence":
		var seqs [][]tv
		mustJSON(b.V, &seqs)
		var items []tv
		for _, s := range seqs {
			for _, v := range s {
				items = append(items, unsym(v))
			}
		}
		w.body = valueBody(tvList(items...))
		w.sections = append(w.sections, "amqp-value")
	}
	return w
}

// unsym turns every symbol in v into a string, as the trip through
// Message does.
func unsym(v tv) tv {
	switch v.T {
	case "symbol":
		return tv{T: "string", V: v.V}
	case "list", "array":
		var items []tv
		mustJSON(v.V, &items)
		for i := range items {
			items[i] = unsym(items[i])
		}
		return tv{T: v.T, V: raw(items)}
	case "map":
		var pairs []pair
		mustJSON(v.V, &pairs)
		for i := range pairs {
			pairs[i] = pair{unsym(pairs[i][0]), unsym(pairs[i][1])}
		}
		return tv{T: "map", V: raw(pairs)}
	}
	return v
}

func mustJSON(b json.RawMessage, v any) {
	if err := json.Unmarshal(b, v); err != nil {
		panic(err)
	}
}
