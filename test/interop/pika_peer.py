#!/usr/bin/python3
"""pika (Python) as an independent AMQP 0-9-1 peer of the interop tests.

Run with the system Python (Debian's python3-pika):

    /usr/bin/python3 pika_peer.py MODE

MODE is one of
  send     publish every message of PEER_MESSAGES to the queue PEER_ADDRESS
           through the default exchange, with publisher confirms, each
           mandatory; prints {"sent": N}
  receive  consume PEER_COUNT messages from the queue PEER_ADDRESS and
           acknowledge them; prints {"messages": [...]}
  hostile  publish to the queue PEER_ADDRESS one message (message_id
           "hostile") whose headers are PEER_HOSTILE, then PEER_COUNT
           ordinary ones ("normal-000", ...), with publisher confirms;
           prints {"sent": N}. PEER_HOSTILE is KIND:N: "entries:N" a table
           of N entries, "tables:N" N tables nested in the headers,
           "arrays:N" N arrays nested in one header, "count:N" an
           x-delivery-count header of N.

PEER_URL names the broker (amqp://user:pass@host:port/). PEER_TIMEOUT bounds
every wait, in seconds (default 30). The one line of JSON on stdout is the
result; anything else goes to stderr, and a failure exits non-zero.

A message is an object with "body" (base64), "properties" (the basic
properties by pika's names: message_id, correlation_id, content_type,
content_encoding, reply_to, expiration, priority, delivery_mode, timestamp
(seconds), type, user_id, app_id; absent when not set), "headers" (name ->
tagged value) and, when printed, "redelivered". A header value is tagged
with the Python type pika reads it as, {"t": TYPE, "v": VALUE}:
  null                no "v"
  bool int            the value (int as a decimal string: it may be 64 bits)
  float               the value as a string (receiving only: pika 1.2
                      cannot send a float)
  str                 the string
  bytes               base64
  decimal             the value as a string
  datetime            seconds since the epoch, as a decimal string
  list                a list of tagged values
  table               an object of name -> tagged value
"""

import base64
import datetime
import decimal
import json
import os
import sys

import pika

PROPS = ("message_id", "correlation_id", "content_type", "content_encoding",
         "reply_to", "expiration", "priority", "delivery_mode", "timestamp",
         "type", "user_id", "app_id")


def fail(msg):
    sys.stderr.write("pika_peer: %s\n" % msg)
    sys.exit(1)


def from_tv(tv):
    t, v = tv["t"], tv.get("v")
    if t == "null":
        return None
    if t == "bool":
        return bool(v)
    if t == "int":
        return int(v)
    if t == "str":
        return str(v)
    if t == "bytes":
        return base64.b64decode(v)
    if t == "decimal":
        return decimal.Decimal(v)
    if t == "datetime":
        return datetime.datetime.fromtimestamp(int(v), datetime.timezone.utc)
    if t == "list":
        return [from_tv(e) for e in v]
    if t == "table":
        return {k: from_tv(e) for k, e in v.items()}
    fail("cannot send a header value of type %r" % t)


def to_tv(v):
    # bool before int: a bool is an int in Python.
    if v is None:
        return {"t": "null"}
    if isinstance(v, bool):
        return {"t": "bool", "v": v}
    if isinstance(v, int):
        return {"t": "int", "v": str(v)}
    if isinstance(v, float):
        return {"t": "float", "v": repr(v)}
    if isinstance(v, str):
        return {"t": "str", "v": v}
    if isinstance(v, bytes):
        return {"t": "bytes", "v": base64.b64encode(v).decode()}
    if isinstance(v, decimal.Decimal):
        return {"t": "decimal", "v": str(v)}
    if isinstance(v, datetime.datetime):
        if v.tzinfo is None:  # pika reads a timestamp as naive UTC
            v = v.replace(tzinfo=datetime.timezone.utc)
        return {"t": "datetime", "v": str(int(v.timestamp()))}
    if isinstance(v, list):
        return {"t": "list", "v": [to_tv(e) for e in v]}
    if isinstance(v, dict):
        return {"t": "table", "v": {str(k): to_tv(e) for k, e in v.items()}}
    fail("cannot print a header value of type %s" % type(v).__name__)


def connect():
    params = pika.URLParameters(os.environ["PEER_URL"])
    timeout = float(os.environ.get("PEER_TIMEOUT", "30"))
    params.socket_timeout = timeout
    params.blocked_connection_timeout = timeout
    params.client_properties = {"connection_name": "interop-pika"}
    return pika.BlockingConnection(params), timeout


def send(queue):
    specs = json.loads(os.environ["PEER_MESSAGES"])
    conn, _ = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    for spec in specs:
        p = dict(spec.get("properties") or {})
        headers = spec.get("headers")
        if headers is not None:
            p["headers"] = {k: from_tv(v) for k, v in headers.items()}
        body = base64.b64decode(spec.get("body") or "")
        # With confirms on, basic_publish raises when the broker nacks the
        # message or returns it unroutable.
        ch.basic_publish(exchange="", routing_key=queue, body=body,
                         properties=pika.BasicProperties(**p),
                         mandatory=True)
    conn.close()
    return {"sent": len(specs)}


def hostile_headers(spec):
    kind, n = spec.split(":")
    n = int(n)
    if kind == "entries":
        return {"k%05d" % i: i for i in range(n)}
    if kind == "tables":
        inner = {"leaf": 1}
        for _ in range(n - 1):
            inner = {"t": inner}
        return {"t": inner}
    if kind == "arrays":
        # pika encodes recursively: a frame or two a level.
        sys.setrecursionlimit(max(sys.getrecursionlimit(), 4 * n + 1000))
        inner = [1]
        for _ in range(n - 1):
            inner = [inner]
        return {"a": inner}
    if kind == "count":
        return {"x-delivery-count": n}
    fail("unknown PEER_HOSTILE %r" % spec)


def send_hostile(queue):
    headers = hostile_headers(os.environ["PEER_HOSTILE"])
    count = int(os.environ["PEER_COUNT"])
    conn, _ = connect()
    ch = conn.channel()
    ch.confirm_delivery()
    ch.basic_publish(exchange="", routing_key=queue, body=b"hostile",
                     properties=pika.BasicProperties(message_id="hostile", headers=headers),
                     mandatory=True)
    for i in range(count):
        ch.basic_publish(exchange="", routing_key=queue, body=b"normal %d" % i,
                         properties=pika.BasicProperties(message_id="normal-%03d" % i),
                         mandatory=True)
    conn.close()
    return {"sent": 1 + count}


def receive(queue):
    count = int(os.environ["PEER_COUNT"])
    conn, timeout = connect()
    ch = conn.channel()
    ch.basic_qos(prefetch_count=count)
    out = []
    for method, props, body in ch.consume(queue, inactivity_timeout=timeout):
        if method is None:
            fail("received %d of %d messages in %ss" % (len(out), count, timeout))
        m = {"body": base64.b64encode(body).decode(),
             "redelivered": method.redelivered, "properties": {}}
        for name in PROPS:
            v = getattr(props, name)
            if v is not None:
                m["properties"][name] = v
        if props.headers is not None:
            m["headers"] = {k: to_tv(v) for k, v in props.headers.items()}
        ch.basic_ack(method.delivery_tag)
        out.append(m)
        if len(out) == count:
            break
    ch.cancel()
    conn.close()
    return {"messages": out}


def main():
    modes = {"send": send, "receive": receive, "hostile": send_hostile}
    if len(sys.argv) != 2 or sys.argv[1] not in modes:
        fail("usage: pika_peer.py send|receive|hostile")
    res = modes[sys.argv[1]](os.environ["PEER_ADDRESS"])
    res["peer"] = "pika"
    print(json.dumps(res))


if __name__ == "__main__":
    main()
