'use strict';
// rhea (Node.js) as an independent AMQP 1.0 peer of the interop tests.
//
//     node rhea_peer.js MODE
//
// The modes, the environment (PEER_URL, PEER_ADDRESS, PEER_MESSAGES,
// PEER_COUNT, PEER_REPLY_TO, PEER_TIMEOUT) and the tagged JSON of messages
// are those of proton_peer.py, whose docstring describes them. rhea shows a
// little more than Proton: "sections" lists the message's sections in wire
// order, "header" is null when the message has no header section, and a
// footer is shown.

const rhea = require('rhea');
const types = require('rhea/lib/types.js');
const amqpMessage = require('rhea/lib/message.js');

const PEER = 'rhea';

function fail(msg) {
    process.stderr.write('rhea_peer: ' + msg + '\n');
    process.exit(1);
}

function env(name, def) {
    const v = process.env[name] === undefined ? def : process.env[name];
    if (v === undefined) fail(name + ' is not set');
    return v;
}

// rhea's Message hides the AMQP types of what it decodes (a symbol becomes a
// string, a ubyte a number). To print them, keep the raw bytes of every
// message it decodes and read them again with rhea's own type reader.
const decode = amqpMessage.decode;
amqpMessage.decode = function (buffer) {
    const m = decode(buffer);
    Object.defineProperty(m, 'raw', {value: Buffer.from(buffer), enumerable: false});
    return m;
};

// ---- tagged JSON -> rhea typed values -------------------------------------

function u64(v) {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(BigInt(v));
    return b;
}

function i64(v) {
    const b = Buffer.alloc(8);
    b.writeBigInt64BE(BigInt(v));
    return b;
}

function fromTV(tv) {
    const v = tv.v;
    switch (tv.t) {
    case 'null': return types.Null();
    case 'boolean': return types.wrap_boolean(v);
    case 'ubyte': return types.wrap_ubyte(Number(v));
    case 'ushort': return types.wrap_ushort(Number(v));
    case 'uint': return types.wrap_uint(Number(v));
    case 'ulong': return types.wrap_ulong(u64(v));
    case 'byte': return types.wrap_byte(Number(v));
    case 'short': return types.wrap_short(Number(v));
    case 'int': return types.wrap_int(Number(v));
    case 'long': return types.wrap_long(i64(v));
    case 'timestamp': return types.wrap_timestamp(i64(v));
    case 'float': return types.wrap_float(Number(v));
    case 'double': return types.wrap_double(Number(v));
    case 'char': return types.wrap_char(v.codePointAt(0));
    case 'string': return types.wrap_string(v);
    case 'symbol': return types.wrap_symbol(v);
    case 'uuid': return types.wrap_uuid(Buffer.from(v.replace(/-/g, ''), 'hex'));
    case 'binary': return types.wrap_binary(Buffer.from(v, 'base64'));
    case 'list': return types.wrap_list(v.map(fromTV));
    case 'map': {
        const items = [];
        for (const [k, e] of v) items.push(fromTV(k), fromTV(e));
        return types.Map32(items);
    }
    case 'described': return types.described(fromTV(tv.d), fromTV(v));
    }
    fail('cannot send a value of type ' + tv.t);
}

function build(spec) {
    const m = {};
    const h = spec.header || {};
    for (const f of ['durable', 'priority', 'ttl', 'first_acquirer', 'delivery_count']) {
        if (h[f] !== undefined && h[f] !== null) m[f] = h[f];
    }
    const p = spec.properties || {};
    for (const f of ['to', 'subject', 'reply_to', 'content_type', 'content_encoding',
        'absolute_expiry_time', 'creation_time', 'group_id', 'group_sequence', 'reply_to_group_id']) {
        if (p[f] !== undefined && p[f] !== null) m[f] = p[f];
    }
    if (p.message_id) m.message_id = fromTV(p.message_id);
    if (p.correlation_id) m.correlation_id = fromTV(p.correlation_id);
    if (p.user_id) m.user_id = Buffer.from(p.user_id, 'base64');
    if (spec.application_properties) {
        m.application_properties = {};
        for (const [k, v] of Object.entries(spec.application_properties)) {
            m.application_properties[k] = fromTV(v);
        }
    }
    if (spec.message_annotations) {
        m.message_annotations = {};
        for (const [k, v] of spec.message_annotations) {
            if (k.t !== 'symbol') fail('rhea sends symbol annotation keys only');
            m.message_annotations[k.v] = fromTV(v);
        }
    }
    const body = spec.body;
    if (body) {
        if (body.kind === 'data') {
            const parts = body.v.map((b) => Buffer.from(b, 'base64'));
            m.body = parts.length === 1 ? rhea.message.data_section(parts[0]) : rhea.message.data_sections(parts);
        } else if (body.kind === 'sequence') {
            const seqs = body.v.map((s) => s.map(fromTV));
            m.body = seqs.length === 1 ? rhea.message.sequence_section(seqs[0]) : rhea.message.sequence_sections(seqs);
        } else if (body.kind === 'value') {
            m.body = fromTV(body.v);
        } else {
            fail('unknown body kind ' + body.kind);
        }
    }
    return m;
}

// ---- raw message -> tagged JSON -------------------------------------------

const names = {
    Null: 'null', Boolean: 'boolean', True: 'boolean', False: 'boolean',
    Ubyte: 'ubyte', Ushort: 'ushort', Uint: 'uint', SmallUint: 'uint', Uint0: 'uint',
    Ulong: 'ulong', SmallUlong: 'ulong', Ulong0: 'ulong',
    Byte: 'byte', Short: 'short', Int: 'int', SmallInt: 'int', Long: 'long', SmallLong: 'long',
    Float: 'float', Double: 'double', Decimal32: 'decimal32', Decimal64: 'decimal64',
    Decimal128: 'decimal128', CharUTF32: 'char', Timestamp: 'timestamp', Uuid: 'uuid',
    Vbin8: 'binary', Vbin32: 'binary', Str8: 'string', Str32: 'string', Sym8: 'symbol',
    Sym32: 'symbol', List0: 'list', List8: 'list', List32: 'list', Map8: 'map', Map32: 'map',
    Array8: 'array', Array32: 'array',
};

function uuidText(b) {
    const h = b.toString('hex');
    return [h.slice(0, 8), h.slice(8, 12), h.slice(12, 16), h.slice(16, 20), h.slice(20)].join('-');
}

// The reader returns 64-bit integers beyond 2^53 as their 8 raw bytes.
function bigText(v, signed) {
    if (Buffer.isBuffer(v)) return (signed ? v.readBigInt64BE(0) : v.readBigUInt64BE(0)).toString();
    return BigInt(v).toString();
}

function tv(x, ignoreDescriptor) {
    if (x.descriptor !== undefined && !ignoreDescriptor) {
        return {t: 'described', d: tv(x.descriptor), v: tv(x, true)};
    }
    const t = names[x.type.name];
    const v = x.value;
    switch (t) {
    case 'null': return {t};
    case 'boolean': return {t, v: x.type.name === 'Boolean' ? v !== 0 : v};
    case 'ubyte': case 'ushort': case 'uint': case 'byte': case 'short': case 'int':
        return {t, v: String(v)};
    case 'ulong': return {t, v: bigText(v, false)};
    case 'long': return {t, v: bigText(v, true)};
    case 'timestamp': return {t, v: String(v.getTime())};
    case 'float': case 'double': return {t, v: String(v)};
    case 'char': return {t, v: String.fromCodePoint(v)};
    case 'string': case 'symbol': return {t, v};
    case 'uuid': return {t, v: uuidText(v)};
    case 'binary': return {t, v: v.toString('base64')};
    case 'list': case 'array': return {t, v: v.map((e) => tv(e))};
    case 'map': {
        const pairs = [];
        for (let i = 0; i + 1 < v.length; i += 2) pairs.push([tv(v[i]), tv(v[i + 1])]);
        return {t, v: pairs};
    }
    case 'decimal32': case 'decimal64': case 'decimal128': return {t, v: v.toString('hex')};
    }
    return {t: 'unknown:' + x.type.name};
}

function plain(x) {
    if (x === undefined || names[x.type.name] === 'null') return null;
    const r = tv(x);
    return r.v;
}

const sectionNames = {
    0x70: 'header', 0x71: 'delivery-annotations', 0x72: 'message-annotations', 0x73: 'properties',
    0x74: 'application-properties', 0x75: 'data', 0x76: 'amqp-sequence', 0x77: 'amqp-value', 0x78: 'footer',
};

function show(raw) {
    const out = {
        peer: PEER, sections: [], header: null, delivery_annotations: null, message_annotations: null,
        properties: null, application_properties: null, body: null, footer: null,
    };
    const reader = new types.Reader(raw);
    while (reader.remaining()) {
        const s = reader.read();
        const code = Number(s.descriptor.value);
        const name = sectionNames[code] || ('unknown:' + code);
        out.sections.push(name);
        const f = Array.isArray(s.value) ? s.value : [];
        switch (name) {
        case 'header': {
            const ttl = plain(f[2]);
            out.header = {
                durable: plain(f[0]) === true,
                priority: f[1] === undefined || plain(f[1]) === null ? 4 : Number(plain(f[1])),
                ttl: ttl === null ? null : Number(ttl),
                first_acquirer: plain(f[3]) === true,
                delivery_count: f[4] === undefined || plain(f[4]) === null ? 0 : Number(plain(f[4])),
            };
            break;
        }
        case 'delivery-annotations':
        case 'message-annotations':
        case 'footer':
            out[name.replace('-', '_')] = tv(s, true).v;
            break;
        case 'properties': {
            const idOf = (x) => (x === undefined || names[x.type.name] === 'null' ? null : tv(x));
            const num = (x) => (plain(x) === null ? null : Number(plain(x)));
            const bin = plain(f[1]);
            out.properties = {
                message_id: idOf(f[0]), user_id: bin, to: plain(f[2]), subject: plain(f[3]),
                reply_to: plain(f[4]), correlation_id: idOf(f[5]), content_type: plain(f[6]),
                content_encoding: plain(f[7]), absolute_expiry_time: num(f[8]), creation_time: num(f[9]),
                group_id: plain(f[10]), group_sequence: num(f[11]), reply_to_group_id: plain(f[12]),
            };
            break;
        }
        case 'application-properties':
            out.application_properties = {};
            for (const [k, v] of tv(s, true).v) out.application_properties[k.v] = v;
            break;
        case 'data':
            if (!out.body) out.body = {kind: 'data', v: []};
            out.body.v.push(s.value.toString('base64'));
            break;
        case 'amqp-sequence':
            if (!out.body) out.body = {kind: 'sequence', v: []};
            out.body.v.push(tv(s, true).v);
            break;
        case 'amqp-value':
            out.body = {kind: 'value', v: tv(s, true)};
            break;
        }
    }
    return out;
}

function bodyBytes(m) {
    const b = m.body;
    if (b && b.typecode === 0x75) return b.multiple ? Buffer.concat(b.content) : b.content;
    if (Buffer.isBuffer(b)) return b;
    return Buffer.from(String(b));
}

// ---- modes ----------------------------------------------------------------

function main() {
    const mode = process.argv[2];
    if (!['send', 'receive', 'respond', 'request'].includes(mode)) {
        fail('usage: node rhea_peer.js send|receive|respond|request');
    }
    const timeout = Number(env('PEER_TIMEOUT', '30')) * 1000;
    const url = new URL(env('PEER_URL'));
    const address = env('PEER_ADDRESS');
    const container = rhea.create_container({id: 'interop-rhea-peer'});
    const conn = container.connect({
        host: url.hostname, port: Number(url.port || 5672),
        username: decodeURIComponent(url.username), password: decodeURIComponent(url.password),
        reconnect: false,
    });
    const timer = setTimeout(() => fail('timed out after ' + timeout + ' ms in mode ' + mode), timeout);
    let done = false;
    const finish = (out) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        conn.once('connection_close', () => {
            process.stdout.write(JSON.stringify(out) + '\n');
            process.exit(0);
        });
        conn.close();
    };
    conn.on('connection_error', (ctx) => fail('connection error: ' + JSON.stringify(ctx.connection.error)));
    conn.on('disconnected', (ctx) => { if (!done) fail('disconnected: ' + (ctx.error || '')); });
    conn.on('sender_error', (ctx) => fail('sender error: ' + JSON.stringify(ctx.sender.error)));
    conn.on('receiver_error', (ctx) => fail('receiver error: ' + JSON.stringify(ctx.receiver.error)));
    conn.on('session_error', (ctx) => fail('session error: ' + JSON.stringify(ctx.session.error)));

    // openReceiver opens a receiver on address that accepts nothing by
    // itself and grants credit for n messages once the broker has attached
    // it. (Granting it earlier sends a flow frame before the session knows
    // the broker's next-outgoing-id; RabbitMQ, whose ids start just below
    // the 32-bit wrap, then ends the session with a window violation.)
    const openReceiver = (address, n) => {
        const rcv = conn.open_receiver({source: {address}, autoaccept: false, credit_window: 0});
        rcv.once('receiver_open', () => rcv.add_credit(n));
        return rcv;
    };

    // openSender opens a sender to address; its send(msg, then) sends msg as
    // soon as there is credit and calls then once the broker accepted it.
    // Any other outcome fails the peer.
    const openSender = (address) => {
        const snd = conn.open_sender({target: {address}});
        const queue = [];
        const pending = new Map();
        snd.on('accepted', (ctx) => {
            const then = pending.get(ctx.delivery);
            pending.delete(ctx.delivery);
            if (then) then();
        });
        snd.on('rejected', (ctx) => fail('rejected by ' + address + ': ' + JSON.stringify(ctx.delivery.remote_state)));
        snd.on('released', () => fail('released by ' + address));
        snd.on('modified', () => fail('modified by ' + address));
        const pump = () => {
            while (queue.length > 0 && snd.sendable()) {
                const [msg, then] = queue.shift();
                pending.set(snd.send(msg), then);
            }
        };
        snd.on('sendable', pump);
        return {send: (msg, then) => { queue.push([msg, then]); pump(); }};
    };

    if (mode === 'send') {
        const specs = JSON.parse(env('PEER_MESSAGES'));
        const snd = openSender(address);
        let accepted = 0;
        if (specs.length === 0) finish({peer: PEER, sent: 0});
        for (const spec of specs) {
            snd.send(build(spec), () => { if (++accepted === specs.length) finish({peer: PEER, sent: accepted}); });
        }
    } else if (mode === 'receive') {
        const n = Number(env('PEER_COUNT'));
        const got = [];
        const rcv = openReceiver(address, n);
        rcv.on('message', (ctx) => {
            got.push(show(ctx.message.raw));
            ctx.delivery.accept();
            if (got.length === n) finish({peer: PEER, messages: got});
        });
    } else if (mode === 'respond') {
        const n = Number(env('PEER_COUNT'));
        const got = [];
        const senders = {};
        let answered = 0;
        const rcv = openReceiver(address, n);
        rcv.on('message', (ctx) => {
            const req = ctx.message;
            const seen = show(req.raw);
            got.push(seen);
            if (!req.reply_to) fail('request without reply-to');
            const p = seen.properties || {};
            const id = p.correlation_id || p.message_id;
            const rep = {
                correlation_id: id ? fromTV(id) : undefined,
                application_properties: {peer: PEER},
                body: rhea.message.data_section(Buffer.concat([Buffer.from('reply:'), bodyBytes(req)])),
            };
            if (!senders[req.reply_to]) senders[req.reply_to] = openSender(req.reply_to);
            // The request is accepted once its reply has been accepted.
            senders[req.reply_to].send(rep, () => {
                ctx.delivery.accept();
                if (++answered === n) finish({peer: PEER, requests: got});
            });
        });
    } else if (mode === 'request') {
        const replyTo = env('PEER_REPLY_TO');
        const specs = JSON.parse(env('PEER_MESSAGES'));
        const got = [];
        const rcv = openReceiver(replyTo, specs.length);
        rcv.on('message', (ctx) => {
            got.push(show(ctx.message.raw));
            ctx.delivery.accept();
            if (got.length === specs.length) finish({peer: PEER, replies: got});
        });
        rcv.once('receiver_open', () => {
            const snd = openSender(address);
            for (const spec of specs) snd.send(Object.assign(build(spec), {reply_to: replyTo}), () => {});
        });
    }
}

main();
