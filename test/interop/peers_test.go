package interop

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amqpactor/amqpactor/test/kit/livetest"
)

// A peer is an AMQP 1.0 client that we did not write, driven through a
// script or program in this directory. All take the same mode argument and
// environment and print the same JSON (proton_peer.py describes it).
type peer struct {
	name  string
	probe []string // a command that succeeds when the peer's stack is installed
	cmd   []string // the script; the mode is appended
	// sectionsExact: the peer reports the sections of a message exactly, in
	// wire order, and a header only when the message has one (rhea, fe2o3).
	// Proton's Message shows neither.
	sectionsExact bool
	// explicitFalse: the peer writes a header field it is given even when
	// it is the default (rhea); Proton and fe2o3 leave durable=false off the
	// wire.
	explicitFalse bool
	// multiSections: the peer can send more than one data or amqp-sequence
	// section (rhea and fe2o3 can, Proton's Message cannot).
	multiSections bool
}

var peers = []peer{
	{
		name:  "proton",
		probe: []string{"/usr/bin/python3", "-c", "import proton, proton.utils"},
		cmd:   []string{"/usr/bin/python3", "proton_peer.py"},
	},
	{
		name:          "rhea",
		probe:         []string{"node", "-e", "require('rhea')"},
		cmd:           []string{"node", "rhea_peer.js"},
		sectionsExact: true,
		explicitFalse: true,
		multiSections: true,
	},
	{
		name:          "fe2o3",
		probe:         []string{fe2o3Bin, "probe"},
		cmd:           []string{fe2o3Bin},
		sectionsExact: true,
		multiSections: true,
	},
}

// peerTimeout bounds every wait inside a peer; peerRunTimeout bounds the
// whole peer process, which is killed past it.
const (
	peerTimeout    = 30 * time.Second
	peerRunTimeout = 60 * time.Second
)

var probes sync.Map // peer name -> error from its probe

// require skips the test (or fails it under REQUIRE_LIVE=1) when the peer's
// stack is not installed.
func (p peer) require(t *testing.T) {
	t.Helper()
	v, ok := probes.Load(p.name)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, p.probe[0], p.probe[1:]...)
		cmd.Stderr = &stderr
		var err error
		if e := cmd.Run(); e != nil {
			err = fmt.Errorf("%s: %v: %s", strings.Join(p.probe, " "), e, strings.TrimSpace(stderr.String()))
		}
		v, _ = probes.LoadOrStore(p.name, err)
	}
	if err, _ := v.(error); err != nil {
		livetest.Missing(t, fmt.Sprintf("the %s peer is not installed (%v), so the %s interop tests cannot run. "+
			"Install (and build) the peers with `bash test/interop/setup.sh` (as root)", p.name, err, strings.ToUpper(p.name)))
	}
}

// peerRun is one run of a peer script.
type peerRun struct {
	peer   peer
	mode   string
	done   chan struct{}
	stdout bytes.Buffer
	stderr bytes.Buffer
	err    error
}

// start runs the peer in mode with the PEER_* variables of vars, bounded by
// peerRunTimeout. The test waits for it before it ends.
func (p peer) start(t *testing.T, mode string, vars map[string]string) *peerRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), peerRunTimeout)
	args := append(append([]string{}, p.cmd[1:]...), mode)
	cmd := exec.CommandContext(ctx, p.cmd[0], args...)
	cmd.Env = append(os.Environ(), "PEER_TIMEOUT="+fmt.Sprint(peerTimeout.Seconds()))
	for k, v := range vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	r := &peerRun{peer: p, mode: mode, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &r.stdout, &r.stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%s %s: %v", p.name, mode, err)
	}
	go func() {
		defer close(r.done)
		defer cancel()
		r.err = cmd.Wait()
		if ctx.Err() != nil {
			r.err = fmt.Errorf("killed after %v: %w", peerRunTimeout, errors.Join(r.err, ctx.Err()))
		}
	}()
	t.Cleanup(func() { <-r.done })
	return r
}

// wait waits for the run to end (it ends by peerRunTimeout) and decodes the
// JSON line it printed into out.
func (r *peerRun) wait(t *testing.T, out any) {
	t.Helper()
	<-r.done
	if r.err != nil {
		t.Fatalf("%s %s failed: %v\nstderr:\n%s\nstdout:\n%s", r.peer.name, r.mode, r.err, r.stderr.String(), r.stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(r.stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), out); err != nil {
		t.Fatalf("%s %s printed no JSON result: %v\nstdout:\n%s\nstderr:\n%s", r.peer.name, r.mode, err, r.stdout.String(), r.stderr.String())
	}
	if s := strings.TrimSpace(r.stderr.String()); s != "" {
		t.Logf("%s %s stderr:\n%s", r.peer.name, r.mode, s)
	}
}

// run runs the peer to its end.
func (p peer) run(t *testing.T, mode string, vars map[string]string, out any) {
	t.Helper()
	p.start(t, mode, vars).wait(t, out)
}

// The JSON that the peers read and print.

// tv is an AMQP value tagged with its type.
type tv struct {
	T string          `json:"t"`
	V json.RawMessage `json:"v,omitempty"`
	D *tv             `json:"d,omitempty"`
}

type pair [2]tv

type peerHeader struct {
	Durable       *bool   `json:"durable,omitempty"`
	Priority      *int    `json:"priority,omitempty"`
	TTL           *int64  `json:"ttl,omitempty"`
	FirstAcquirer *bool   `json:"first_acquirer,omitempty"`
	DeliveryCount *uint32 `json:"delivery_count,omitempty"`
}

type peerProps struct {
	MessageID          *tv     `json:"message_id,omitempty"`
	UserID             []byte  `json:"user_id,omitempty"` // base64 in JSON
	To                 *string `json:"to,omitempty"`
	Subject            *string `json:"subject,omitempty"`
	ReplyTo            *string `json:"reply_to,omitempty"`
	CorrelationID      *tv     `json:"correlation_id,omitempty"`
	ContentType        *string `json:"content_type,omitempty"`
	ContentEncoding    *string `json:"content_encoding,omitempty"`
	AbsoluteExpiryTime *int64  `json:"absolute_expiry_time,omitempty"`
	CreationTime       *int64  `json:"creation_time,omitempty"`
	GroupID            *string `json:"group_id,omitempty"`
	GroupSequence      *uint32 `json:"group_sequence,omitempty"`
	ReplyToGroupID     *string `json:"reply_to_group_id,omitempty"`
}

// peerBody is {"kind": "data", "v": [base64...]}, {"kind": "value", "v": tv}
// or {"kind": "sequence", "v": [[tv...]...]}.
type peerBody struct {
	Kind string          `json:"kind"`
	V    json.RawMessage `json:"v"`
}

type peerMsg struct {
	Peer                  string        `json:"peer,omitempty"`
	Sections              []string      `json:"sections,omitempty"`
	Header                *peerHeader   `json:"header,omitempty"`
	DeliveryAnnotations   []pair        `json:"delivery_annotations,omitempty"`
	MessageAnnotations    []pair        `json:"message_annotations,omitempty"`
	Properties            *peerProps    `json:"properties,omitempty"`
	ApplicationProperties map[string]tv `json:"application_properties,omitempty"`
	Body                  *peerBody     `json:"body,omitempty"`
	Footer                []pair        `json:"footer,omitempty"`
}

type peerResult struct {
	Peer     string    `json:"peer"`
	Sent     int       `json:"sent"`
	Messages []peerMsg `json:"messages"`
	Requests []peerMsg `json:"requests"`
	Replies  []peerMsg `json:"replies"`
}

func specs(msgs ...peerMsg) string {
	b, err := json.Marshal(msgs)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Tagged values.

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func tvNull() tv               { return tv{T: "null"} }
func tvBool(b bool) tv         { return tv{T: "boolean", V: raw(b)} }
func tvStr(s string) tv        { return tv{T: "string", V: raw(s)} }
func tvSym(s string) tv        { return tv{T: "symbol", V: raw(s)} }
func tvNum(t string, n any) tv { return tv{T: t, V: raw(fmt.Sprint(n))} }
func tvBin(b []byte) tv        { return tv{T: "binary", V: raw(b)} }
func tvUUID(s string) tv       { return tv{T: "uuid", V: raw(s)} }
func tvTime(t time.Time) tv    { return tvNum("timestamp", t.UnixMilli()) }
func tvList(items ...tv) tv    { return tv{T: "list", V: raw(items)} }
func tvMap(pairs ...pair) tv   { return tv{T: "map", V: raw(pairs)} }
func ptr[T any](v T) *T        { return &v }
func dataBody(parts ...[]byte) *peerBody {
	return &peerBody{Kind: "data", V: raw(parts)}
}
func valueBody(v tv) *peerBody { return &peerBody{Kind: "value", V: raw(v)} }
func sequenceBody(seqs ...[]tv) *peerBody {
	return &peerBody{Kind: "sequence", V: raw(seqs)}
}

// String renders a tagged value for failure messages.
func (v tv) String() string {
	b, _ := json.Marshal(v)
	return string(b)
}

// equal compares two tagged values: same type, same value; floats by value,
// so that "1.5" and "1.50" (or a float's double rendering) are equal.
func (v tv) equal(w tv) bool {
	if v.T != w.T {
		return false
	}
	if (v.D == nil) != (w.D == nil) || (v.D != nil && !v.D.equal(*w.D)) {
		return false
	}
	switch v.T {
	case "null":
		return true
	case "float", "double":
		var a, b string
		if json.Unmarshal(v.V, &a) != nil || json.Unmarshal(w.V, &b) != nil {
			return false
		}
		var fa, fb float64
		if _, err := fmt.Sscan(a, &fa); err != nil {
			return false
		}
		if _, err := fmt.Sscan(b, &fb); err != nil {
			return false
		}
		if v.T == "float" {
			return float32(fa) == float32(fb)
		}
		return fa == fb
	case "list", "array":
		var a, b []tv
		if json.Unmarshal(v.V, &a) != nil || json.Unmarshal(w.V, &b) != nil || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !a[i].equal(b[i]) {
				return false
			}
		}
		return true
	case "map":
		var a, b []pair
		if json.Unmarshal(v.V, &a) != nil || json.Unmarshal(w.V, &b) != nil {
			return false
		}
		return pairsEqual(a, b)
	}
	var a, b any
	if json.Unmarshal(v.V, &a) != nil || json.Unmarshal(w.V, &b) != nil {
		return false
	}
	return a == b
}

// pairsEqual compares maps given as pairs, in any order.
func pairsEqual(a, b []pair) bool {
	if len(a) != len(b) {
		return false
	}
	used := make([]bool, len(b))
outer:
	for _, p := range a {
		for i, q := range b {
			if !used[i] && p[0].equal(q[0]) && p[1].equal(q[1]) {
				used[i] = true
				continue outer
			}
		}
		return false
	}
	return true
}
