#!/usr/bin/python3
"""Qpid Proton (Python) as an independent AMQP 1.0 peer of the interop tests.

Run with the system Python (Debian's python3-qpid-proton):

    /usr/bin/python3 proton_peer.py MODE

MODE is one of
  send     send every message of PEER_MESSAGES to PEER_ADDRESS and wait for
           each to be accepted; prints {"sent": N}
  receive  receive PEER_COUNT messages from PEER_ADDRESS, accept them;
           prints {"messages": [...]}
  respond  answer PEER_COUNT requests from PEER_ADDRESS: the reply goes to the
           request's reply-to, with correlation-id = the request's
           correlation-id or else its message-id, body "reply:" + the
           request's body; prints {"requests": [...]}
  request  send every message of PEER_MESSAGES to PEER_ADDRESS with reply-to
           PEER_REPLY_TO, then receive as many replies from PEER_REPLY_TO;
           prints {"replies": [...]}
  send-raw send every payload of the file PEER_PAYLOADS (each a 4-byte
           big-endian length, then that many bytes: an encoded message,
           sent as it is, however malformed) to PEER_ADDRESS, as many at a
           time as the broker's credit allows, and wait for each to be
           accepted; prints {"sent": N}

PEER_URL names the broker (amqp://user:pass@host:port/). PEER_TIMEOUT bounds
every wait, in seconds (default 30). The one line of JSON on stdout is the
result; anything else goes to stderr, and a failure exits non-zero.

Messages, both the ones to send and the ones printed, are JSON with every
AMQP value tagged with its type, {"t": TYPE, "v": VALUE}:
  null                 no "v"
  boolean              true or false
  ubyte ushort uint ulong byte short int long timestamp
                       a decimal string (a timestamp in milliseconds)
  float double         a decimal string
  char string symbol   a string
  uuid                 the 36-character text form
  binary               base64
  list                 a list of tagged values
  map                  a list of [key, value] pairs of tagged values
  described            "d" is the descriptor, "v" the value
  array                a list of tagged values (printing only)
  decimal32/64/128     hex (printing only)
A message is an object with the sections "header", "properties",
"application_properties" (key -> tagged value), "message_annotations" and
"delivery_annotations" (lists of [key, value]), and "body", one of
{"kind": "data", "v": [base64, ...]}, {"kind": "value", "v": tagged} or
{"kind": "sequence", "v": [[tagged, ...], ...]}. Timestamps in the header
and properties are milliseconds, ttl too.
"""

import base64
import json
import os
import sys
import uuid

from proton import (Array, Described, Message, byte, char, decimal32,
                    decimal64, decimal128, float32, int32, short, symbol,
                    timestamp, ubyte, uint, ulong, ushort)
from proton.utils import BlockingConnection
from cproton import (pn_message_get_content_encoding,
                     pn_message_get_content_type)

PEER = "proton"


def fail(msg):
    sys.stderr.write("proton_peer: %s\n" % msg)
    sys.exit(1)


# ---- tagged JSON -> Python/proton values --------------------------------

def from_tv(tv):
    t = tv["t"]
    v = tv.get("v")
    if t == "null":
        return None
    if t == "boolean":
        return bool(v)
    ints = {"ubyte": ubyte, "ushort": ushort, "uint": uint, "ulong": ulong,
            "byte": byte, "short": short, "int": int32, "long": int,
            "timestamp": timestamp}
    if t in ints:
        return ints[t](int(v))
    if t == "float":
        return float32(float(v))
    if t == "double":
        return float(v)
    if t == "char":
        return char(v)
    if t == "string":
        return str(v)
    if t == "symbol":
        return symbol(v)
    if t == "uuid":
        return uuid.UUID(v)
    if t == "binary":
        return base64.b64decode(v)
    if t == "list":
        return [from_tv(e) for e in v]
    if t == "map":
        return {from_tv(k): from_tv(e) for k, e in v}
    if t == "described":
        return Described(from_tv(tv["d"]), from_tv(v))
    fail("cannot send a value of type %r" % t)


def ms_to_secs(ms):
    # proton converts seconds to milliseconds with int(secs * 1000), which
    # truncates: half a millisecond more keeps the float error on the right
    # side, so the milliseconds arrive exactly.
    return (int(ms) + 0.5) / 1000.0


def build(spec):
    m = Message()
    h = spec.get("header") or {}
    if "durable" in h:
        m.durable = bool(h["durable"])
    if "priority" in h:
        m.priority = int(h["priority"])
    if h.get("ttl") is not None:
        m.ttl = ms_to_secs(h["ttl"])
    if "first_acquirer" in h:
        m.first_acquirer = bool(h["first_acquirer"])
    if "delivery_count" in h:
        m.delivery_count = int(h["delivery_count"])
    p = spec.get("properties") or {}
    if p.get("message_id") is not None:
        m.id = from_tv(p["message_id"])
    if p.get("user_id") is not None:
        m.user_id = base64.b64decode(p["user_id"])
    if p.get("to") is not None:
        m.address = p["to"]
    if p.get("subject") is not None:
        m.subject = p["subject"]
    if p.get("reply_to") is not None:
        m.reply_to = p["reply_to"]
    if p.get("correlation_id") is not None:
        m.correlation_id = from_tv(p["correlation_id"])
    if p.get("content_type") is not None:
        m.content_type = p["content_type"]
    if p.get("content_encoding") is not None:
        m.content_encoding = p["content_encoding"]
    if p.get("absolute_expiry_time") is not None:
        m.expiry_time = ms_to_secs(p["absolute_expiry_time"])
    if p.get("creation_time") is not None:
        m.creation_time = ms_to_secs(p["creation_time"])
    if p.get("group_id") is not None:
        m.group_id = p["group_id"]
    if p.get("group_sequence") is not None:
        m.group_sequence = int(p["group_sequence"])
    if p.get("reply_to_group_id") is not None:
        m.reply_to_group_id = p["reply_to_group_id"]
    ap = spec.get("application_properties")
    if ap is not None:
        m.properties = {k: from_tv(v) for k, v in ap.items()}
    ma = spec.get("message_annotations")
    if ma is not None:
        m.annotations = {from_tv(k): from_tv(v) for k, v in ma}
    body = spec.get("body")
    if body is not None:
        kind = body["kind"]
        if kind == "data":
            if len(body["v"]) != 1:
                fail("proton sends exactly one data section")
            m.body = base64.b64decode(body["v"][0])
            m.inferred = True
        elif kind == "sequence":
            if len(body["v"]) != 1:
                fail("proton sends exactly one amqp-sequence section")
            m.body = [from_tv(e) for e in body["v"][0]]
            m.inferred = True
        elif kind == "value":
            m.body = from_tv(body["v"])
            m.inferred = False
        else:
            fail("unknown body kind %r" % kind)
    return m


# ---- received Python/proton values -> tagged JSON -----------------------

def tv(v):
    # Order matters: bool is an int, proton's typed ints are ints, symbol and
    # char are strs, float32 is a float, decimal128 is bytes.
    if v is None:
        return {"t": "null"}
    if isinstance(v, bool):
        return {"t": "boolean", "v": v}
    for cls, name in ((timestamp, "timestamp"), (ulong, "ulong"),
                      (uint, "uint"), (ushort, "ushort"), (ubyte, "ubyte"),
                      (byte, "byte"), (short, "short"), (int32, "int"),
                      (decimal32, "decimal32"), (decimal64, "decimal64")):
        if isinstance(v, cls):
            if name.startswith("decimal"):
                return {"t": name, "v": "%x" % int(v)}
            return {"t": name, "v": str(int(v))}
    if isinstance(v, int):
        return {"t": "long", "v": str(v)}
    if isinstance(v, float32):
        return {"t": "float", "v": repr(float(v))}
    if isinstance(v, float):
        return {"t": "double", "v": repr(v)}
    if isinstance(v, symbol):
        return {"t": "symbol", "v": str(v)}
    if isinstance(v, char):
        return {"t": "char", "v": str(v)}
    if isinstance(v, str):
        return {"t": "string", "v": v}
    if isinstance(v, decimal128):
        return {"t": "decimal128", "v": bytes(v).hex()}
    if isinstance(v, (bytes, bytearray, memoryview)):
        return {"t": "binary", "v": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, uuid.UUID):
        return {"t": "uuid", "v": str(v)}
    if isinstance(v, Described):
        return {"t": "described", "d": tv(v.descriptor), "v": tv(v.value)}
    if isinstance(v, Array):
        return {"t": "array", "v": [tv(e) for e in v.elements]}
    if isinstance(v, (list, tuple)):
        return {"t": "list", "v": [tv(e) for e in v]}
    if isinstance(v, dict):
        return {"t": "map", "v": [[tv(k), tv(e)] for k, e in v.items()]}
    return {"t": "unknown:" + type(v).__name__, "v": repr(v)}


def secs_to_ms(secs):
    if not secs:
        return None
    return int(round(secs * 1000))


def show(m):
    props = {
        "message_id": id_tv(m.id),
        "user_id": base64.b64encode(m.user_id).decode() if m.user_id else None,
        "to": m.address,
        "subject": m.subject,
        "reply_to": m.reply_to,
        "correlation_id": id_tv(m.correlation_id),
        # Message.content_type turns an absent field into the symbol "None".
        "content_type": pn_message_get_content_type(m._msg),
        "content_encoding": pn_message_get_content_encoding(m._msg),
        "absolute_expiry_time": secs_to_ms(m.expiry_time),
        "creation_time": secs_to_ms(m.creation_time),
        "group_id": m.group_id,
        "group_sequence": m.group_sequence or None,
        "reply_to_group_id": m.reply_to_group_id,
    }
    if m.inferred and isinstance(m.body, (bytes, bytearray, memoryview)):
        body = {"kind": "data", "v": [base64.b64encode(bytes(m.body)).decode()]}
    elif m.inferred and isinstance(m.body, list):
        body = {"kind": "sequence", "v": [[tv(e) for e in m.body]]}
    elif m.body is None:
        body = None
    else:
        body = {"kind": "value", "v": tv(m.body)}
    return {
        "peer": PEER,
        # Proton's Message cannot tell an absent header from one with the
        # default values, so the header is always shown with its values.
        "header": {
            "durable": m.durable,
            "priority": m.priority,
            "ttl": secs_to_ms(m.ttl),
            "first_acquirer": m.first_acquirer,
            "delivery_count": m.delivery_count,
        },
        "delivery_annotations": pairs(m.instructions),
        "message_annotations": pairs(m.annotations),
        "properties": props,
        "application_properties": None if m.properties is None else
        {str(k): tv(v) for k, v in m.properties.items()},
        "body": body,
    }


def id_tv(v):
    # Proton returns a ulong message-id or correlation-id as a plain int (and
    # shows an id of a type that ids may not have, such as long, as absent),
    # so an int here is a ulong on the wire.
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return {"t": "ulong", "v": str(int(v))}
    return tv(v)


def pairs(d):
    if d is None:
        return None
    return [[tv(k), tv(v)] for k, v in d.items()]


# ---- modes ---------------------------------------------------------------

def env(name, default=None):
    v = os.environ.get(name, default)
    if v is None:
        fail("%s is not set" % name)
    return v


def connect(timeout):
    return BlockingConnection(env("PEER_URL"), timeout=timeout,
                              container_id="interop-proton-peer")


def body_bytes(m):
    b = m.body
    if isinstance(b, (bytes, bytearray, memoryview)):
        return bytes(b)
    if isinstance(b, str):
        return b.encode()
    return repr(b).encode()


def read_payloads(path):
    with open(path, "rb") as f:
        data = f.read()
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i:i + 4], "big")
        out.append(data[i + 4:i + 4 + n])
        i += 4 + n
    return out


def send_raw(timeout):
    # The reactor rather than BlockingConnection: a payload goes on the wire
    # as the bytes it is (Sender.stream), and the sends are pipelined.
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    payloads = read_payloads(env("PEER_PAYLOADS"))
    url, address = env("PEER_URL"), env("PEER_ADDRESS")

    class Raw(MessagingHandler):
        def __init__(self):
            super(Raw, self).__init__(auto_settle=True)
            self.next = 0
            self.accepted = 0
            self.error = None

        def on_start(self, event):
            self.conn = event.container.connect(url, container_id="interop-proton-raw")
            event.container.create_sender(self.conn, address)
            self.timer = event.container.schedule(timeout, self)

        def on_timer_task(self, event):
            self.error = "timed out after %ss: %d of %d accepted" % (timeout, self.accepted, len(payloads))
            self.conn.close()

        def on_sendable(self, event):
            snd = event.sender
            while snd.credit > 0 and self.next < len(payloads):
                snd.delivery("raw-%d" % self.next)
                snd.stream(payloads[self.next])
                snd.advance()
                self.next += 1

        def on_accepted(self, event):
            self.accepted += 1
            if self.accepted == len(payloads):
                self.timer.cancel()
                self.conn.close()

        def on_rejected(self, event):
            self.error = "payload %s rejected by the broker: %s" % (
                event.delivery.tag, event.delivery.remote.condition)
            self.timer.cancel()
            self.conn.close()

        def on_released(self, event):
            self.error = "payload %s released by the broker" % event.delivery.tag
            self.timer.cancel()
            self.conn.close()

        def on_transport_error(self, event):
            self.error = "transport error: %s" % event.transport.condition
            self.timer.cancel()

    h = Raw()
    Container(h).run()
    if h.error:
        fail(h.error)
    return {"peer": PEER, "sent": h.accepted}


def main():
    if len(sys.argv) != 2:
        fail("usage: proton_peer.py send|receive|respond|request|send-raw")
    mode = sys.argv[1]
    timeout = float(env("PEER_TIMEOUT", "30"))
    if mode == "send-raw":
        sys.stdout.write(json.dumps(send_raw(timeout)) + "\n")
        return
    conn = connect(timeout)
    try:
        out = run(mode, conn, timeout)
    finally:
        conn.close()
    sys.stdout.write(json.dumps(out) + "\n")


def run(mode, conn, timeout):
    address = env("PEER_ADDRESS")
    if mode == "send":
        specs = json.loads(env("PEER_MESSAGES"))
        snd = conn.create_sender(address)
        for spec in specs:
            # BlockingSender.send waits for the outcome and raises unless
            # the broker accepted the message.
            snd.send(build(spec), timeout=timeout)
        snd.close()
        return {"peer": PEER, "sent": len(specs)}
    if mode == "receive":
        n = int(env("PEER_COUNT"))
        rcv = conn.create_receiver(address, credit=n)
        got = []
        for _ in range(n):
            got.append(show(rcv.receive(timeout=timeout)))
            rcv.accept()
        rcv.close()
        return {"peer": PEER, "messages": got}
    if mode == "respond":
        n = int(env("PEER_COUNT"))
        rcv = conn.create_receiver(address, credit=n)
        senders = {}
        got = []
        for _ in range(n):
            req = rcv.receive(timeout=timeout)
            got.append(show(req))
            if not req.reply_to:
                fail("request without reply-to")
            rep = Message()
            rep.correlation_id = req.correlation_id if req.correlation_id is not None else req.id
            rep.body = b"reply:" + body_bytes(req)
            rep.inferred = True
            rep.properties = {"peer": PEER}
            if req.reply_to not in senders:
                senders[req.reply_to] = conn.create_sender(req.reply_to)
            senders[req.reply_to].send(rep, timeout=timeout)
            rcv.accept()
        for s in senders.values():
            s.close()
        rcv.close()
        return {"peer": PEER, "requests": got}
    if mode == "request":
        reply_to = env("PEER_REPLY_TO")
        specs = json.loads(env("PEER_MESSAGES"))
        rcv = conn.create_receiver(reply_to, credit=len(specs))
        snd = conn.create_sender(address)
        for spec in specs:
            m = build(spec)
            m.reply_to = reply_to
            snd.send(m, timeout=timeout)
        got = []
        for _ in specs:
            got.append(show(rcv.receive(timeout=timeout)))
            rcv.accept()
        snd.close()
        rcv.close()
        return {"peer": PEER, "replies": got}
    fail("unknown mode %r" % mode)


if __name__ == "__main__":
    main()
