//! fe2o3-amqp (Rust) as an independent AMQP 1.0 peer of the interop tests.
//!
//!     fe2o3-peer MODE
//!
//! The modes (send, receive, respond, request), the environment (PEER_URL,
//! PEER_ADDRESS, PEER_MESSAGES, PEER_COUNT, PEER_REPLY_TO, PEER_TIMEOUT) and
//! the tagged JSON of messages are those of proton_peer.py, whose docstring
//! describes them. Like rhea, "sections" lists the sections a message has
//! (fe2o3 decodes each into its own field, so absence is exact) and "header"
//! is null when there is none.
//!
//! send also takes PEER_PARTITIONS=n: then PEER_ADDRESS holds "{p}", which
//! becomes, for each message, the partition amqpactor's Partitioned address
//! gives its group-id (32-bit FNV-1a of the group-id's bytes, modulo n), so
//! that this program routes as an independent publisher of that contract.
//! probe exits 0 without connecting: the tests use it to see the peer is built.

use std::collections::HashMap;
use std::time::Duration;

use base64::{engine::general_purpose::STANDARD as B64, Engine};
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{
    AmqpSequence, AmqpValue, ApplicationProperties, Batch, Body, Data, Header, Message,
    MessageAnnotations, MessageId, Properties,
};
use fe2o3_amqp::types::primitives::{
    Array, Binary, OrderedMap, SimpleValue, Symbol, Timestamp, Uuid, Value,
};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use serde_json::{json, Value as J};

const PEER: &str = "fe2o3";

type Msg = Message<Body<Value>>;

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("fe2o3_peer: {msg}");
    std::process::exit(1)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| fail(format!("{name} is not set")))
}

// ---- tagged JSON -> AMQP values ------------------------------------------

fn num<T: std::str::FromStr>(v: &J) -> T {
    let s = v
        .as_str()
        .unwrap_or_else(|| fail(format!("number {v} is not a string")));
    s.parse()
        .unwrap_or_else(|_| fail(format!("bad number {s:?}")))
}

fn text(v: &J) -> String {
    v.as_str()
        .unwrap_or_else(|| fail(format!("{v} is not a string")))
        .to_string()
}

fn bytes(v: &J) -> Vec<u8> {
    B64.decode(text(v))
        .unwrap_or_else(|e| fail(format!("base64 {v}: {e}")))
}

fn uuid(s: &str) -> Uuid {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let mut b = [0u8; 16];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
            .unwrap_or_else(|_| fail(format!("bad uuid {s}")));
    }
    Uuid::from(b)
}

fn from_tv(tv: &J) -> Value {
    let t = tv["t"]
        .as_str()
        .unwrap_or_else(|| fail(format!("untagged value {tv}")));
    let v = &tv["v"];
    match t {
        "null" => Value::Null,
        "boolean" => Value::Bool(v.as_bool().unwrap_or_else(|| fail("boolean"))),
        "ubyte" => Value::Ubyte(num(v)),
        "ushort" => Value::Ushort(num(v)),
        "uint" => Value::Uint(num(v)),
        "ulong" => Value::Ulong(num(v)),
        "byte" => Value::Byte(num(v)),
        "short" => Value::Short(num(v)),
        "int" => Value::Int(num(v)),
        "long" => Value::Long(num(v)),
        "timestamp" => Value::Timestamp(Timestamp::from_milliseconds(num(v))),
        "float" => Value::from(num::<f32>(v)),
        "double" => Value::from(num::<f64>(v)),
        "char" => Value::Char(text(v).chars().next().unwrap_or_else(|| fail("empty char"))),
        "string" => Value::String(text(v)),
        "symbol" => Value::Symbol(Symbol::from(text(v))),
        "uuid" => Value::Uuid(uuid(&text(v))),
        "binary" => Value::Binary(Binary::from(bytes(v))),
        "list" => Value::List(items(v).iter().map(from_tv).collect()),
        "map" => Value::Map(
            items(v)
                .iter()
                .map(|p| (from_tv(&p[0]), from_tv(&p[1])))
                .collect(),
        ),
        "described" => {
            let descriptor = match from_tv(&tv["d"]) {
                Value::Symbol(s) => Descriptor::Name(s),
                Value::Ulong(c) => Descriptor::Code(c),
                d => fail(format!("descriptor {d:?} is neither a symbol nor a ulong")),
            };
            Value::Described(Box::new(Described {
                descriptor,
                value: from_tv(v),
            }))
        }
        _ => fail(format!("cannot send a value of type {t:?}")),
    }
}

fn items(v: &J) -> &Vec<J> {
    v.as_array()
        .unwrap_or_else(|| fail(format!("{v} is not a list")))
}

fn message_id(tv: &J) -> MessageId {
    match from_tv(tv) {
        Value::Ulong(n) => MessageId::Ulong(n),
        Value::Uuid(u) => MessageId::Uuid(u),
        Value::Binary(b) => MessageId::Binary(b),
        Value::String(s) => MessageId::String(s),
        v => fail(format!("{v:?} cannot be a message-id")),
    }
}

fn opt_str(p: &J, k: &str) -> Option<String> {
    p.get(k).filter(|v| !v.is_null()).map(text)
}

fn opt<'a>(p: &'a J, k: &str) -> Option<&'a J> {
    p.get(k).filter(|v| !v.is_null())
}

fn build(spec: &J) -> Msg {
    let header = opt(spec, "header").map(|h| {
        let mut b = Header::builder();
        if let Some(v) = opt(h, "durable") {
            b = b.durable(v.as_bool().unwrap_or(false));
        }
        if let Some(v) = opt(h, "priority") {
            b = b.priority(v.as_u64().unwrap_or(4) as u8);
        }
        if let Some(v) = opt(h, "ttl") {
            b = b.ttl(v.as_u64().map(|n| n as u32));
        }
        if let Some(v) = opt(h, "first_acquirer") {
            b = b.first_acquirer(v.as_bool().unwrap_or(false));
        }
        if let Some(v) = opt(h, "delivery_count") {
            b = b.delivery_count(v.as_u64().unwrap_or(0) as u32);
        }
        b.build()
    });
    let properties = opt(spec, "properties").map(|p| Properties {
        message_id: opt(p, "message_id").map(message_id),
        user_id: opt(p, "user_id").map(|v| Binary::from(bytes(v))),
        to: opt_str(p, "to"),
        subject: opt_str(p, "subject"),
        reply_to: opt_str(p, "reply_to"),
        correlation_id: opt(p, "correlation_id").map(message_id),
        content_type: opt_str(p, "content_type").map(Symbol::from),
        content_encoding: opt_str(p, "content_encoding").map(Symbol::from),
        absolute_expiry_time: opt(p, "absolute_expiry_time")
            .and_then(J::as_i64)
            .map(Timestamp::from_milliseconds),
        creation_time: opt(p, "creation_time")
            .and_then(J::as_i64)
            .map(Timestamp::from_milliseconds),
        group_id: opt_str(p, "group_id"),
        group_sequence: opt(p, "group_sequence")
            .and_then(J::as_u64)
            .map(|n| n as u32),
        reply_to_group_id: opt_str(p, "reply_to_group_id"),
    });
    let application_properties = opt(spec, "application_properties").map(|ap| {
        let map = ap
            .as_object()
            .unwrap_or_else(|| fail("application_properties is not an object"));
        ApplicationProperties(
            map.iter()
                .map(|(k, v)| {
                    let sv = SimpleValue::try_from(from_tv(v)).unwrap_or_else(|_| {
                        fail(format!("application-property {k} is not a simple value"))
                    });
                    (k.clone(), sv)
                })
                .collect(),
        )
    });
    let message_annotations = opt(spec, "message_annotations").map(|ma| {
        MessageAnnotations(
            items(ma)
                .iter()
                .map(|p| {
                    let key = match from_tv(&p[0]) {
                        Value::Symbol(s) => OwnedKey::Symbol(s),
                        Value::Ulong(n) => OwnedKey::Ulong(n),
                        k => fail(format!(
                            "annotation key {k:?} is neither a symbol nor a ulong"
                        )),
                    };
                    (key, from_tv(&p[1]))
                })
                .collect(),
        )
    });
    let body = match opt(spec, "body") {
        None => Body::Empty,
        Some(b) => match b["kind"].as_str() {
            Some("data") => Body::Data(Batch::new(
                items(&b["v"])
                    .iter()
                    .map(|d| Data(Binary::from(bytes(d))))
                    .collect::<Vec<_>>(),
            )),
            Some("sequence") => Body::Sequence(Batch::new(
                items(&b["v"])
                    .iter()
                    .map(|s| AmqpSequence(items(s).iter().map(from_tv).collect()))
                    .collect::<Vec<_>>(),
            )),
            Some("value") => Body::Value(AmqpValue(from_tv(&b["v"]))),
            k => fail(format!("unknown body kind {k:?}")),
        },
    };
    Message {
        header,
        delivery_annotations: None,
        message_annotations,
        properties,
        application_properties,
        body,
        footer: None,
    }
}

// ---- AMQP values -> tagged JSON ------------------------------------------

fn uuid_text(u: &Uuid) -> String {
    let h: String = u.as_inner().iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b:02x}")).collect()
}

fn tv(v: &Value) -> J {
    let s = |t: &str, v: String| json!({"t": t, "v": v});
    match v {
        Value::Null => json!({"t": "null"}),
        Value::Bool(b) => json!({"t": "boolean", "v": b}),
        Value::Ubyte(n) => s("ubyte", n.to_string()),
        Value::Ushort(n) => s("ushort", n.to_string()),
        Value::Uint(n) => s("uint", n.to_string()),
        Value::Ulong(n) => s("ulong", n.to_string()),
        Value::Byte(n) => s("byte", n.to_string()),
        Value::Short(n) => s("short", n.to_string()),
        Value::Int(n) => s("int", n.to_string()),
        Value::Long(n) => s("long", n.to_string()),
        Value::Float(f) => s("float", f.into_inner().to_string()),
        Value::Double(f) => s("double", f.into_inner().to_string()),
        Value::Decimal32(d) => s("decimal32", hex(d.as_inner())),
        Value::Decimal64(d) => s("decimal64", hex(d.as_inner())),
        Value::Decimal128(d) => s("decimal128", hex(d.as_inner())),
        Value::Char(c) => s("char", c.to_string()),
        Value::Timestamp(t) => s("timestamp", t.milliseconds().to_string()),
        Value::Uuid(u) => s("uuid", uuid_text(u)),
        Value::Binary(b) => s("binary", B64.encode(b.as_slice())),
        Value::String(x) => s("string", x.clone()),
        Value::Symbol(x) => s("symbol", x.as_str().to_string()),
        Value::List(l) => json!({"t": "list", "v": l.iter().map(tv).collect::<Vec<_>>()}),
        Value::Array(Array(a)) => json!({"t": "array", "v": a.iter().map(tv).collect::<Vec<_>>()}),
        Value::Map(m) => {
            json!({"t": "map", "v": m.iter().map(|(k, e)| json!([tv(k), tv(e)])).collect::<Vec<_>>()})
        }
        Value::Described(d) => {
            let desc = match &d.descriptor {
                Descriptor::Name(n) => Value::Symbol(n.clone()),
                Descriptor::Code(c) => Value::Ulong(*c),
            };
            json!({"t": "described", "d": tv(&desc), "v": tv(&d.value)})
        }
    }
}

fn id_tv(id: &Option<MessageId>) -> J {
    match id {
        None => J::Null,
        Some(MessageId::Ulong(n)) => tv(&Value::Ulong(*n)),
        Some(MessageId::Uuid(u)) => tv(&Value::Uuid(u.clone())),
        Some(MessageId::Binary(b)) => tv(&Value::Binary(b.clone())),
        Some(MessageId::String(x)) => tv(&Value::String(x.clone())),
    }
}

fn annotations(m: &OrderedMap<OwnedKey, Value>) -> J {
    let key = |k: &OwnedKey| match k {
        OwnedKey::Symbol(s) => tv(&Value::Symbol(s.clone())),
        OwnedKey::Ulong(n) => tv(&Value::Ulong(*n)),
    };
    J::Array(m.iter().map(|(k, v)| json!([key(k), tv(v)])).collect())
}

fn show(m: &Msg) -> J {
    let mut sections = vec![];
    let header = m.header.as_ref().map(|h| {
        sections.push("header");
        json!({
            "durable": h.durable,
            "priority": h.priority.0,
            "ttl": h.ttl,
            "first_acquirer": h.first_acquirer,
            "delivery_count": h.delivery_count,
        })
    });
    let delivery_annotations = m.delivery_annotations.as_ref().map(|a| {
        sections.push("delivery-annotations");
        annotations(&a.0)
    });
    let message_annotations = m.message_annotations.as_ref().map(|a| {
        sections.push("message-annotations");
        annotations(&a.0)
    });
    let properties = m.properties.as_ref().map(|p| {
        sections.push("properties");
        json!({
            "message_id": id_tv(&p.message_id),
            "user_id": p.user_id.as_ref().map(|b| B64.encode(b.as_slice())),
            "to": p.to,
            "subject": p.subject,
            "reply_to": p.reply_to,
            "correlation_id": id_tv(&p.correlation_id),
            "content_type": p.content_type.as_ref().map(|s| s.as_str()),
            "content_encoding": p.content_encoding.as_ref().map(|s| s.as_str()),
            "absolute_expiry_time": p.absolute_expiry_time.as_ref().map(|t| t.milliseconds()),
            "creation_time": p.creation_time.as_ref().map(|t| t.milliseconds()),
            "group_id": p.group_id,
            "group_sequence": p.group_sequence,
            "reply_to_group_id": p.reply_to_group_id,
        })
    });
    let application_properties = m.application_properties.as_ref().map(|ap| {
        sections.push("application-properties");
        J::Object(
            ap.0.iter()
                .map(|(k, v)| (k.clone(), tv(&Value::from(v.clone()))))
                .collect(),
        )
    });
    let body = match &m.body {
        Body::Empty => J::Null,
        Body::Data(parts) => {
            sections.extend(std::iter::repeat_n("data", parts.len()));
            json!({"kind": "data", "v": parts.iter().map(|d| B64.encode(d.0.as_slice())).collect::<Vec<_>>()})
        }
        Body::Sequence(seqs) => {
            sections.extend(std::iter::repeat_n("amqp-sequence", seqs.len()));
            json!({"kind": "sequence", "v": seqs.iter().map(|s| s.0.iter().map(tv).collect::<Vec<_>>()).collect::<Vec<_>>()})
        }
        Body::Value(v) => {
            sections.push("amqp-value");
            json!({"kind": "value", "v": tv(&v.0)})
        }
    };
    let footer = m.footer.as_ref().map(|f| {
        sections.push("footer");
        annotations(&f.0)
    });
    json!({
        "peer": PEER,
        "sections": sections,
        "header": header,
        "delivery_annotations": delivery_annotations,
        "message_annotations": message_annotations,
        "properties": properties,
        "application_properties": application_properties,
        "body": body,
        "footer": footer,
    })
}

fn body_bytes(m: &Msg) -> Vec<u8> {
    match &m.body {
        Body::Data(parts) => parts.iter().flat_map(|d| d.0.to_vec()).collect(),
        Body::Value(AmqpValue(Value::String(s))) => s.clone().into_bytes(),
        Body::Value(AmqpValue(Value::Binary(b))) => b.to_vec(),
        b => format!("{b:?}").into_bytes(),
    }
}

// ---- connection and links ------------------------------------------------

// percent_decode undoes the URL escaping of the user name and password.
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(n) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(n);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// fnv1a is the partition hash of amqpactor's Partitioned addresses.
fn fnv1a(s: &str) -> u32 {
    let mut h: u32 = 2166136261;
    for b in s.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(16777619);
    }
    h
}

struct Peer {
    connection: fe2o3_amqp::connection::ConnectionHandle<()>,
    session: fe2o3_amqp::session::SessionHandle<()>,
    links: u32,
}

impl Peer {
    async fn open() -> Peer {
        let raw = env("PEER_URL");
        let url = url::Url::parse(&raw).unwrap_or_else(|e| fail(format!("PEER_URL: {e}")));
        let mut builder = Connection::builder().container_id("interop-fe2o3-peer");
        if !url.username().is_empty() {
            builder = builder.sasl_profile(SaslProfile::Plain {
                username: percent_decode(url.username()),
                password: percent_decode(url.password().unwrap_or("")),
            });
        }
        let mut bare = url.clone();
        let _ = bare.set_username("");
        let _ = bare.set_password(None);
        let mut connection = builder
            .open(bare)
            .await
            .unwrap_or_else(|e| fail(format!("connect: {e}")));
        let session = Session::begin(&mut connection)
            .await
            .unwrap_or_else(|e| fail(format!("begin session: {e}")));
        Peer {
            connection,
            session,
            links: 0,
        }
    }

    fn link_name(&mut self, role: &str) -> String {
        self.links += 1;
        format!("fe2o3-{role}-{}", self.links)
    }

    async fn sender(&mut self, address: &str) -> Sender {
        let name = self.link_name("sender");
        Sender::attach(&mut self.session, name, address)
            .await
            .unwrap_or_else(|e| fail(format!("attach a sender to {address}: {e}")))
    }

    /// receiver attaches a receiver that grants credit for n messages once
    /// the broker has answered its attach, and accepts nothing by itself.
    async fn receiver(&mut self, address: &str, n: u32) -> Receiver {
        let name = self.link_name("receiver");
        let mut r = Receiver::builder()
            .name(name)
            .source(address)
            .credit_mode(CreditMode::Manual)
            .auto_accept(false)
            .attach(&mut self.session)
            .await
            .unwrap_or_else(|e| fail(format!("attach a receiver to {address}: {e}")));
        r.set_credit(n)
            .await
            .unwrap_or_else(|e| fail(format!("grant credit on {address}: {e}")));
        r
    }

    async fn close(mut self) {
        self.session
            .end()
            .await
            .unwrap_or_else(|e| fail(format!("end session: {e}")));
        self.connection
            .close()
            .await
            .unwrap_or_else(|e| fail(format!("close connection: {e}")));
    }
}

async fn send(s: &mut Sender, m: Msg, to: &str) {
    let outcome = s
        .send(m)
        .await
        .unwrap_or_else(|e| fail(format!("send to {to}: {e}")));
    if !outcome.is_accepted() {
        fail(format!("{to} did not accept the message: {outcome:?}"));
    }
}

async fn recv(r: &mut Receiver, from: &str) -> fe2o3_amqp::link::delivery::Delivery<Body<Value>> {
    r.recv::<Body<Value>>()
        .await
        .unwrap_or_else(|e| fail(format!("receive from {from}: {e}")))
}

async fn accept(
    r: &mut Receiver,
    d: &fe2o3_amqp::link::delivery::Delivery<Body<Value>>,
    from: &str,
) {
    r.accept(d)
        .await
        .unwrap_or_else(|e| fail(format!("accept on {from}: {e}")));
}

async fn close_sender(s: Sender) {
    s.close()
        .await
        .unwrap_or_else(|e| fail(format!("close a sender: {e}")));
}

async fn close_receiver(r: Receiver) {
    r.close()
        .await
        .unwrap_or_else(|e| fail(format!("close a receiver: {e}")));
}

fn specs() -> Vec<J> {
    let v: J = serde_json::from_str(&env("PEER_MESSAGES"))
        .unwrap_or_else(|e| fail(format!("PEER_MESSAGES: {e}")));
    v.as_array()
        .unwrap_or_else(|| fail("PEER_MESSAGES is not a list"))
        .clone()
}

fn count() -> u32 {
    env("PEER_COUNT")
        .parse()
        .unwrap_or_else(|e| fail(format!("PEER_COUNT: {e}")))
}

async fn run(mode: &str) -> J {
    let address = env("PEER_ADDRESS");
    let mut peer = Peer::open().await;
    let out = match mode {
        "send" => {
            let parts: Option<u32> = std::env::var("PEER_PARTITIONS").ok().map(|n| {
                n.parse()
                    .unwrap_or_else(|e| fail(format!("PEER_PARTITIONS: {e}")))
            });
            let mut senders: HashMap<String, Sender> = HashMap::new();
            let specs = specs();
            for spec in &specs {
                let m = build(spec);
                let to = match parts {
                    None => address.clone(),
                    Some(n) => {
                        let g = m.properties.as_ref().and_then(|p| p.group_id.clone());
                        let g = g.unwrap_or_else(|| {
                            fail("PEER_PARTITIONS needs a group-id on every message")
                        });
                        address.replace("{p}", &(fnv1a(&g) % n).to_string())
                    }
                };
                if !senders.contains_key(&to) {
                    let s = peer.sender(&to).await;
                    senders.insert(to.clone(), s);
                }
                send(senders.get_mut(&to).unwrap(), m, &to).await;
            }
            for (_, s) in senders {
                close_sender(s).await;
            }
            json!({"peer": PEER, "sent": specs.len()})
        }
        "receive" => {
            let n = count();
            let mut r = peer.receiver(&address, n).await;
            let mut got = vec![];
            for _ in 0..n {
                let d = recv(&mut r, &address).await;
                got.push(show(d.message()));
                accept(&mut r, &d, &address).await;
            }
            close_receiver(r).await;
            json!({"peer": PEER, "messages": got})
        }
        "respond" => {
            let n = count();
            let mut r = peer.receiver(&address, n).await;
            let mut senders: HashMap<String, Sender> = HashMap::new();
            let mut got = vec![];
            for _ in 0..n {
                let d = recv(&mut r, &address).await;
                let req = d.message();
                got.push(show(req));
                let p = req.properties.clone().unwrap_or_default();
                let reply_to = p
                    .reply_to
                    .clone()
                    .unwrap_or_else(|| fail("request without reply-to"));
                let mut ap = OrderedMap::new();
                ap.insert("peer".to_string(), SimpleValue::String(PEER.to_string()));
                let mut body = b"reply:".to_vec();
                body.extend(body_bytes(req));
                let rep = Message {
                    header: None,
                    delivery_annotations: None,
                    message_annotations: None,
                    properties: Some(Properties {
                        correlation_id: p.correlation_id.clone().or(p.message_id.clone()),
                        ..Default::default()
                    }),
                    application_properties: Some(ApplicationProperties(ap)),
                    body: Body::<Value>::Data(Batch::new(vec![Data(Binary::from(body))])),
                    footer: None,
                };
                if !senders.contains_key(&reply_to) {
                    let s = peer.sender(&reply_to).await;
                    senders.insert(reply_to.clone(), s);
                }
                send(senders.get_mut(&reply_to).unwrap(), rep, &reply_to).await;
                // The request is accepted once its reply has been accepted.
                accept(&mut r, &d, &address).await;
            }
            for (_, s) in senders {
                close_sender(s).await;
            }
            close_receiver(r).await;
            json!({"peer": PEER, "requests": got})
        }
        "request" => {
            let reply_to = env("PEER_REPLY_TO");
            let specs = specs();
            let mut r = peer.receiver(&reply_to, specs.len() as u32).await;
            let mut s = peer.sender(&address).await;
            for spec in &specs {
                let mut m = build(spec);
                m.properties
                    .get_or_insert_with(Properties::default)
                    .reply_to = Some(reply_to.clone());
                send(&mut s, m, &address).await;
            }
            let mut got = vec![];
            for _ in &specs {
                let d = recv(&mut r, &reply_to).await;
                got.push(show(d.message()));
                accept(&mut r, &d, &reply_to).await;
            }
            close_sender(s).await;
            close_receiver(r).await;
            json!({"peer": PEER, "replies": got})
        }
        _ => fail(format!("unknown mode {mode:?}")),
    };
    peer.close().await;
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        fail("usage: fe2o3-peer send|receive|respond|request|probe");
    }
    let mode = args[1].as_str();
    if mode == "probe" {
        println!("{}", json!({"peer": PEER}));
        return;
    }
    let secs: f64 = std::env::var("PEER_TIMEOUT")
        .unwrap_or_else(|_| "30".into())
        .parse()
        .unwrap_or_else(|e| fail(format!("PEER_TIMEOUT: {e}")));
    match tokio::time::timeout(Duration::from_secs_f64(secs), run(mode)).await {
        Ok(out) => println!("{out}"),
        Err(_) => fail(format!("timed out after {secs} s in mode {mode}")),
    }
}
