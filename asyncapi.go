package amqpactor

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/amqpactor/amqpactor/address"
	"github.com/amqpactor/amqpactor/internal/jsonschema"
)

// AsyncAPI.
//
// App.AsyncAPI describes the App as an AsyncAPI 3.0.0 document: one channel
// per address it subscribes on or has published to, one operation per
// subscription (receive), per address published to (send) and per address
// requested (send with a reply), the messages of each channel, and the JSON
// schema of every Typed payload.
//
// AsyncAPI's own amqp1 binding is reserved and empty, so each channel (and
// each operation) carries an "x-amqpactor-amqp1" binding object instead: the
// address kind, how the connector's dialect spells it on the wire (address,
// capabilities, what RabbitMQ 4 declares), and for each subscription its
// credit, partitions, settle modes, batch and retry policy.
//
// A Typed payload, and whether a handler is a Responder, come from the
// descriptor its adapter carries (adapter.go): an adapter answers a probe
// without handling anything, and a user's own handler is never called.

// sentRecord is what AsyncAPI knows of an address the App sent to: when it
// was first used (seq) and how (uses).
type sentRecord struct {
	addr Address
	seq  uint64
	uses atomic.Uint32
}

// Uses of an address sent to.
const (
	useUnsettled uint32 = 1 << iota
	useSettled
	useRequest
	useTransaction
)

// note records a use; the load first keeps the common case, a use seen
// before, to a read.
func (r *sentRecord) note(use uint32) {
	if r.uses.Load()&use == 0 {
		r.uses.Or(use)
	}
}

// subInfo is what AsyncAPI reports of a subscription beyond its spec.
type subInfo struct {
	payload   reflect.Type // Typed's T; nil for other handlers
	responder bool
	batch     bool
	retry     RetryPolicy
	batchWait time.Duration
}

func newSubInfo(h Handler, bh BatchHandler, c subConfig) *subInfo {
	d := descriptorOf(h)
	wait := c.batchWait
	if wait <= 0 {
		wait = 50 * time.Millisecond
	}
	return &subInfo{payload: d.payload, responder: d.kind == kindResponder, batch: bh != nil, retry: c.retry, batchWait: wait}
}

// The document, in the order AsyncAPI 3.0.0 lists its fields.
type (
	apiDoc struct {
		AsyncAPI   string                   `json:"asyncapi"`
		Info       apiInfo                  `json:"info"`
		Servers    map[string]*apiServer    `json:"servers,omitempty"`
		Channels   map[string]*apiChannel   `json:"channels"`
		Operations map[string]*apiOperation `json:"operations"`
		Components *apiComponents           `json:"components,omitempty"`
	}
	apiInfo struct {
		Title       string `json:"title"`
		Version     string `json:"version"`
		Description string `json:"description,omitempty"`
	}
	apiServer struct {
		Host            string         `json:"host"`
		Protocol        string         `json:"protocol"`
		ProtocolVersion string         `json:"protocolVersion,omitempty"`
		Pathname        string         `json:"pathname,omitempty"`
		Description     string         `json:"description,omitempty"`
		Bindings        map[string]any `json:"bindings,omitempty"`
	}
	apiRef struct {
		Ref string `json:"$ref"`
	}
	apiChannel struct {
		Address     string            `json:"address"`
		Title       string            `json:"title,omitempty"`
		Description string            `json:"description,omitempty"`
		Messages    map[string]apiRef `json:"messages"`
		Bindings    map[string]any    `json:"bindings,omitempty"`
	}
	apiOperation struct {
		Action      string         `json:"action"`
		Channel     apiRef         `json:"channel"`
		Title       string         `json:"title,omitempty"`
		Description string         `json:"description,omitempty"`
		Messages    []apiRef       `json:"messages,omitempty"`
		Reply       *apiReply      `json:"reply,omitempty"`
		Bindings    map[string]any `json:"bindings,omitempty"`
	}
	apiReply struct {
		Address apiReplyAddress `json:"address"`
	}
	apiReplyAddress struct {
		Description string `json:"description,omitempty"`
		Location    string `json:"location"`
	}
	apiComponents struct {
		Messages map[string]*apiMessage        `json:"messages,omitempty"`
		Schemas  map[string]*jsonschema.Schema `json:"schemas,omitempty"`
	}
	apiMessage struct {
		Name        string             `json:"name"`
		Title       string             `json:"title,omitempty"`
		Summary     string             `json:"summary,omitempty"`
		ContentType string             `json:"contentType,omitempty"`
		Headers     *jsonschema.Schema `json:"headers,omitempty"`
		Payload     *jsonschema.Schema `json:"payload,omitempty"`
	}
)

// bindingName is the key of amqpactor's binding object in the bindings of
// every channel and operation of an AsyncAPI document.
const bindingName = "x-amqpactor-amqp1"

// bindingVersion is the version of the binding objects' shape.
const bindingVersion = "0.1.0"

type (
	wireNode struct {
		Address      string       `json:"address"`
		Capabilities []string     `json:"capabilities"`
		Declares     *wireDeclare `json:"declares,omitempty"`
	}
	wireDeclare struct {
		Queue     string `json:"queue,omitempty"`
		QueueType string `json:"queueType,omitempty"`
		Exchange  string `json:"exchange,omitempty"`
		Binding   string `json:"bindingKey,omitempty"`
		// Bindings replace Binding for a subscription bound with keys.
		Bindings []string `json:"bindingKeys,omitempty"`
	}
	channelBinding struct {
		BindingVersion string            `json:"bindingVersion"`
		Kind           string            `json:"kind"`
		Name           string            `json:"name"`
		Dialect        string            `json:"dialect"`
		Target         *wireNode         `json:"target,omitempty"`
		Publish        *publishBinding   `json:"publish,omitempty"`
		Subscriptions  []*receiveBinding `json:"subscriptions,omitempty"`
	}
	publishBinding struct {
		BindingVersion string   `json:"bindingVersion"`
		LinkSettleMode string   `json:"linkSettleMode"`
		Transfers      []string `json:"transfers,omitempty"`
		Request        bool     `json:"request,omitempty"`
		Transactional  bool     `json:"transactional,omitempty"`
		RetryFor       []string `json:"retryFor,omitempty"`
	}
	receiveBinding struct {
		BindingVersion     string        `json:"bindingVersion,omitempty"`
		Name               string        `json:"name"`
		Source             *wireNode     `json:"source,omitempty"`
		BindingKeys        []string      `json:"bindingKeys,omitempty"`
		StreamOffset       string        `json:"streamOffset,omitempty"`
		Handler            string        `json:"handler"`
		Payload            string        `json:"payload,omitempty"`
		Credit             uint32        `json:"credit"`
		Partitions         int           `json:"partitions"`
		PartitionKey       string        `json:"partitionKey"`
		SenderSettleMode   string        `json:"senderSettleMode"`
		ReceiverSettleMode string        `json:"receiverSettleMode,omitempty"`
		Delivery           string        `json:"delivery"`
		Batch              *batchBinding `json:"batch,omitempty"`
		Retry              *retryBinding `json:"retry,omitempty"`
		Reply              string        `json:"reply,omitempty"`
	}
	batchBinding struct {
		Size   int   `json:"size"`
		WaitMS int64 `json:"waitMs"`
	}
	retryBinding struct {
		Failure       string `json:"failure"`
		MaxDeliveries uint32 `json:"maxDeliveries,omitempty"`
		RetryAddress  string `json:"retryAddress,omitempty"`
	}
)

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// ids hands out keys that AsyncAPI accepts (letters, digits, _ and -) and
// that are unique within one map of the document.
type ids map[string]bool

func (s ids) make(parts ...string) string {
	base := strings.Trim(unsafeID.ReplaceAllString(strings.Join(parts, "-"), "_"), "_-")
	if base == "" {
		base = "x"
	}
	id := base
	for i := 2; s[id]; i++ {
		id = base + "-" + strconv.Itoa(i)
	}
	s[id] = true
	return id
}

// channelState gathers what the App does with one address.
type channelState struct {
	addr     Address
	id       string
	subs     []*Subscription
	sent     *sentRecord // nil when never sent to
	retryFor []string
	messages []string // component message names, in order
	binding  *channelBinding
}

const genericMessage = "AMQPMessage"

// AsyncAPI returns an AsyncAPI 3.0.0 JSON document of the App: a channel for
// every address it subscribes on or has published to (publishes are recorded
// from the first one on; a RetryPolicy.RetryAddress counts as published to),
// its operations, its messages with the JSON schema of each Typed payload,
// and the connector as the server (without credentials). Every channel and
// operation carries an "x-amqpactor-amqp1" binding object with
// what AsyncAPI's reserved amqp1 binding cannot say: the address kind, its
// spelling in the connector's dialect, capabilities, credit, partitions,
// settle modes, batching and the retry policy.
//
// It may be called at any time, before Start too; the document grows as the
// App publishes to new addresses (up to 1024 of them; replies of Responder
// are never listed).
func (a *App) AsyncAPI() ([]byte, error) {
	a.mu.Lock()
	subs := append([]*Subscription(nil), a.subs...)
	name := a.cfg.name
	connector := a.connector
	a.mu.Unlock()
	if connector == nil {
		return nil, errNilConnector
	}
	dialect := connector.Dialect()

	doc := &apiDoc{
		AsyncAPI: "3.0.0",
		Info: apiInfo{Title: name, Version: "1.0.0",
			Description: "The addresses the amqpactor App " + strconv.Quote(name) + " subscribes on and publishes to, " +
				"generated at run time. Each channel's and operation's " + bindingName + " binding says how the App " +
				"uses the address over AMQP 1.0."},
		Servers:    map[string]*apiServer{"broker": protocolOf(connector, serverOf(connector.String(), dialect))},
		Channels:   map[string]*apiChannel{},
		Operations: map[string]*apiOperation{},
	}
	gen := jsonschema.New("#/components/schemas/")
	comps := &apiComponents{Messages: map[string]*apiMessage{}}

	// Channels in a stable order: subscriptions first, as added, then the
	// addresses published to, in order of first use.
	var order []*channelState
	byAddr := map[Address]*channelState{}
	chanIDs := ids{}
	channel := func(addr Address) *channelState {
		if cs, ok := byAddr[addr]; ok {
			return cs
		}
		cs := &channelState{addr: addr, id: chanIDs.make(kindOf(addr), addr.Name())}
		byAddr[addr] = cs
		order = append(order, cs)
		return cs
	}
	for _, s := range subs {
		cs := channel(s.spec.Address)
		cs.subs = append(cs.subs, s)
		if ra := s.info.retry.RetryAddress; !ra.IsZero() {
			rs := channel(ra)
			rs.retryFor = append(rs.retryFor, s.spec.Name)
		}
	}
	for _, r := range a.dests.records() {
		channel(r.addr).sent = r
	}

	// Messages: one per Typed payload type, else the generic one.
	msgNames := map[reflect.Type]string{}
	msgIDs := ids{}
	messageFor := func(t reflect.Type) string {
		if n, ok := msgNames[t]; ok {
			return n
		}
		n := msgIDs.make(typeLabel(t))
		msgNames[t] = n
		comps.Messages[n] = &apiMessage{
			Name: n, Title: t.String(), ContentType: "application/json",
			Summary: "JSON of the Go type " + t.String() + ", decoded by a Typed handler.",
			Headers: headersSchema(), Payload: gen.Schema(t),
		}
		return n
	}
	for _, cs := range order {
		seen := map[string]bool{}
		for _, s := range cs.subs {
			if t := s.info.payload; t != nil {
				if n := messageFor(t); !seen[n] {
					seen[n] = true
					cs.messages = append(cs.messages, n)
				}
			}
		}
		if len(cs.messages) == 0 {
			if _, ok := comps.Messages[genericMessage]; !ok {
				msgIDs[genericMessage] = true
				comps.Messages[genericMessage] = &apiMessage{
					Name: genericMessage, Title: "AMQP 1.0 message",
					Summary: "An AMQP 1.0 message whose body the App does not describe (no Typed handler reads it). " +
						"Application-properties are its headers; the standard properties (message-id, correlation-id, " +
						"reply-to, group-id, ...) are in the AMQP properties section.",
					Headers: headersSchema(),
				}
			}
			cs.messages = []string{genericMessage}
		}
	}

	opIDs := ids{}
	for _, cs := range order {
		ch := &apiChannel{Messages: map[string]apiRef{}, Title: cs.addr.String(), Description: describeAddress(cs.addr)}
		for _, n := range cs.messages {
			ch.Messages[n] = apiRef{"#/components/messages/" + n}
		}
		b := &channelBinding{BindingVersion: bindingVersion, Kind: kindOf(cs.addr), Name: cs.addr.Name(), Dialect: dialect.String()}
		cs.binding = b
		target := renderNode(dialect, cs.addr, address.Send, "", false, false)
		ch.Address = cs.addr.Name()
		if target != nil {
			ch.Address = target.Address
		}
		chRef := apiRef{"#/channels/" + cs.id}
		msgRefs := func() []apiRef {
			var refs []apiRef
			for _, n := range cs.messages {
				refs = append(refs, apiRef{"#/channels/" + cs.id + "/messages/" + n})
			}
			return refs
		}

		// Receive: one operation per subscription.
		for _, s := range cs.subs {
			rb := receiveBindingOf(dialect, s)
			b.Subscriptions = append(b.Subscriptions, rb)
			op := &apiOperation{Action: "receive", Channel: chRef, Messages: msgRefs(),
				Title:       "Subscription " + s.spec.Name,
				Description: describeSubscription(s),
				Bindings:    map[string]any{bindingName: rb}}
			if s.info.responder {
				op.Reply = &apiReply{Address: apiReplyAddress{Location: "$message.header#/reply-to",
					Description: "The request's reply-to, from the AMQP properties section (not an application-property). " +
						"The reply carries the request's correlation-id, or its message-id when it has none."}}
			}
			doc.Operations[opIDs.make("receive", s.spec.Name)] = op
		}

		// Send: one operation when the App publishes here, another when it
		// sends requests here.
		var uses uint32
		if cs.sent != nil {
			uses = cs.sent.uses.Load()
		}
		if uses != 0 || len(cs.retryFor) > 0 {
			b.Target = target
			pb := &publishBinding{BindingVersion: bindingVersion, LinkSettleMode: "mixed", Request: uses&useRequest != 0,
				Transactional: uses&useTransaction != 0, RetryFor: cs.retryFor}
			if uses&(useUnsettled|useTransaction) != 0 || len(cs.retryFor) > 0 {
				pb.Transfers = append(pb.Transfers, "unsettled")
			}
			if uses&useSettled != 0 {
				pb.Transfers = append(pb.Transfers, "settled")
			}
			b.Publish = pb
		}
		if uses&(useUnsettled|useSettled|useTransaction) != 0 || len(cs.retryFor) > 0 {
			desc := "The App publishes to " + cs.addr.String() + "."
			if len(cs.retryFor) > 0 {
				desc += " Failed deliveries of " + strings.Join(cs.retryFor, ", ") + " are republished here (RetryPolicy.RetryAddress)."
			}
			doc.Operations[opIDs.make("send", cs.id)] = &apiOperation{Action: "send", Channel: chRef, Messages: msgRefs(),
				Title: "Publish to " + cs.addr.String(), Description: desc,
				Bindings: map[string]any{bindingName: b.Publish}}
		}
		if uses&useRequest != 0 {
			doc.Operations[opIDs.make("request", cs.id)] = &apiOperation{Action: "send", Channel: chRef, Messages: msgRefs(),
				Title:       "Request to " + cs.addr.String(),
				Description: "App.Request: the App sends a request here and waits for the reply whose correlation-id matches.",
				Reply: &apiReply{Address: apiReplyAddress{Location: "$message.header#/reply-to",
					Description: "The App's private reply node, in the request's reply-to (AMQP properties section)."}},
				Bindings: map[string]any{bindingName: b.Publish}}
		}
		ch.Bindings = map[string]any{bindingName: b}
		doc.Channels[cs.id] = ch
	}
	if defs := gen.Definitions(); len(defs) > 0 {
		comps.Schemas = defs
	}
	if len(comps.Messages) > 0 || len(comps.Schemas) > 0 {
		doc.Components = comps
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("amqpactor: AsyncAPI: %w", err)
	}
	return out, nil
}

func headersSchema() *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:        "object",
		Description: "Application-properties. amqpactor puts the W3C Trace Context here.",
		Properties: map[string]*jsonschema.Schema{
			"traceparent": {Type: "string", Description: "W3C Trace Context traceparent of the publisher's span."},
			"tracestate":  {Type: "string", Description: "W3C Trace Context tracestate."},
		},
	}
}

// typeLabel names a message after its Go type.
func typeLabel(t reflect.Type) string {
	switch {
	case t.Name() != "":
		return t.Name()
	case t.Kind() == reflect.Pointer:
		return typeLabel(t.Elem())
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		return typeLabel(t.Elem()) + "List"
	case t.Kind() == reflect.Map:
		return typeLabel(t.Elem()) + "Map"
	}
	return "Payload"
}

// kindOf names the kind of node a is in the document: a stream is a queue
// on the wire, but not one its readers compete on.
func kindOf(a Address) string {
	if a.IsStream() {
		return "stream"
	}
	return a.Kind().String()
}

func describeAddress(a Address) string {
	switch a.Kind() {
	case address.KindQueue:
		if a.IsStream() {
			return "Stream " + a.Name() + ": an append-only log; every subscription reads each message from an offset of its own."
		}
		if a.SingleActiveConsumer() {
			return "Partition queue " + a.Name() + ": one receiver at a time gets its messages, in order (single active consumer)."
		}
		return "Queue " + a.Name() + ": its receivers compete for each message."
	case address.KindTopic:
		return "Topic " + a.Name() + ": every subscription gets its own copy of each message, shared by the Apps subscribing under its name."
	}
	return "Raw address " + a.Name() + ", sent to the broker as written."
}

func describeSubscription(s *Subscription) string {
	var b strings.Builder
	switch {
	case s.info.responder:
		b.WriteString("A Responder: each request is answered on its reply-to.")
	case s.info.payload != nil:
		b.WriteString("A Typed handler of " + s.info.payload.String() + ": a body that does not decode is rejected at once.")
	case s.info.batch:
		b.WriteString("A batch handler: the outcome of a batch applies to every message in it.")
	default:
		b.WriteString("A handler: what it returns decides each delivery's outcome.")
	}
	if s.spec.Settled {
		b.WriteString(" At most once: deliveries arrive settled.")
	} else {
		b.WriteString(" At least once: a failure is modified{delivery-failed} and redelivered.")
	}
	return b.String()
}

func renderNode(d Dialect, a Address, role address.Role, sub string, classic, ephemeral bool) *wireNode {
	n, err := address.Render(d, a, role, sub)
	if ephemeral {
		n, err = address.RenderEphemeral(d, a, sub)
	}
	if err != nil {
		return nil
	}
	w := &wireNode{Address: n.Address, Capabilities: append([]string{}, n.Capabilities...)}
	if d == address.RabbitMQ4 && a.Kind() != address.KindRaw {
		switch {
		case n.Queue != "":
			qt := "quorum"
			if classic || ephemeral {
				qt = "classic"
			}
			w.Declares = &wireDeclare{Queue: n.Queue, QueueType: qt, Exchange: n.Exchange, Binding: "#"}
		case a.Kind() == address.KindQueue:
			qt := "quorum"
			if classic {
				qt = "classic"
			}
			if a.IsStream() {
				qt = "stream"
			}
			w.Declares = &wireDeclare{Queue: a.Name(), QueueType: qt}
		case a.Kind() == address.KindTopic:
			w.Declares = &wireDeclare{Exchange: a.Name()}
		}
	}
	return w
}

// keysOf lists a topic subscription's binding keys for the document: none
// for the default, every message.
func keysOf(k address.BindingKeys) []string {
	if k.All() {
		return nil
	}
	return k.Keys()
}

func receiveBindingOf(d Dialect, s *Subscription) *receiveBinding {
	sp, in := s.spec, s.info
	node := sp.Node // the subscription's own node on the broker
	if node == "" {
		node = sp.Name
	}
	rb := &receiveBinding{
		BindingVersion: bindingVersion,
		Name:           sp.Name,
		Source:         renderNode(d, sp.Address, address.Receive, node, sp.Classic, sp.Ephemeral),
		BindingKeys:    keysOf(sp.BindingKeys),
		Handler:        "handler",
		Credit:         sp.Credit,
		Partitions:     sp.Partitions,
		PartitionKey:   "group-id",
		Delivery:       "at-least-once",
	}
	if sp.Stream != nil {
		rb.StreamOffset = sp.Stream.Start().String()
	}
	switch {
	case in.responder:
		rb.Handler = "responder"
		rb.Reply = "reply-to"
	case in.payload != nil:
		rb.Handler = "typed"
		rb.Payload = in.payload.String()
	case in.batch:
		rb.Handler = "batch"
		rb.Batch = &batchBinding{Size: min(sp.BatchSize, int(sp.Credit)), WaitMS: in.batchWait.Milliseconds()}
	}
	if sp.Settled {
		rb.SenderSettleMode, rb.Delivery = "settled", "at-most-once"
	} else {
		rb.SenderSettleMode, rb.ReceiverSettleMode = "unsettled", "first"
		r := &retryBinding{Failure: "modified{delivery-failed}", MaxDeliveries: in.retry.MaxDeliveries}
		if !in.retry.RetryAddress.IsZero() {
			r.Failure = "republished to the retry address, original accepted"
			r.RetryAddress = in.retry.RetryAddress.String()
		}
		rb.Retry = r
	}
	if w := rb.Source; w != nil && w.Declares != nil && w.Declares.Exchange != "" && rb.BindingKeys != nil {
		w.Declares.Binding, w.Declares.Bindings = "", rb.BindingKeys
	}
	return rb
}

// protocolOf sets the protocol version of a connector that says it speaks
// another AMQP than 1.0 (Dial091: 0.9.1).
func protocolOf(c Connector, srv *apiServer) *apiServer {
	if p, ok := c.(interface{ ProtocolVersion() string }); ok {
		srv.ProtocolVersion = p.ProtocolVersion()
	}
	return srv
}

// serverOf describes the connector. Its String never holds a password; the
// user name is dropped too, so the document holds no credentials at all.
func serverOf(s string, d Dialect) *apiServer {
	srv := &apiServer{Protocol: "amqp", ProtocolVersion: "1.0",
		Bindings: map[string]any{bindingName: map[string]any{"bindingVersion": bindingVersion, "dialect": d.String()}}}
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		srv.Host = s
		if s == "" {
			srv.Host = "unknown"
		}
		srv.Description = "The connector " + srv.Host + " (" + d.String() + " dialect)."
		if s == "inproc" {
			srv.Description = "The in-process broker of package inproc (" + d.String() + " dialect)."
		}
		return srv
	}
	srv.Host = u.Host
	if u.Scheme == "amqps" {
		srv.Protocol = "amqps"
	}
	if u.Path != "" && u.Path != "/" {
		srv.Pathname = u.Path
	}
	srv.Description = "The broker the App dials (" + d.String() + " dialect)."
	return srv
}
