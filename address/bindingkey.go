package address

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// MatchAll is the binding key of a topic subscription given none: every
// message of the topic, whatever its routing key.
const MatchAll = "#"

// MaxBindingKey bounds a binding key's length in bytes: AMQP 0-9-1 carries
// it as a short string, and a key must mean the same on every broker.
const MaxBindingKey = 255

// BindingKeys is a validated set of topic binding patterns, as a topic
// exchange reads them: words separated by '.', where a word "*" matches
// exactly one word and a word "#" matches zero or more. The zero value is
// the set {"#"}: every message.
type BindingKeys struct {
	keys  []string   // sorted, without duplicates; nil: {"#"}
	words [][]string // keys split into words, consecutive "#" folded
}

// ParseBindingKeys checks the patterns a subscription to a binds with and
// returns them as a set; an error names a. No patterns means MatchAll. A pattern may
// not be empty, longer than MaxBindingKey, invalid UTF-8, hold control
// characters or an empty word ("a..b"), or use '*' or '#' inside a word
// ("ord*"), where a topic exchange would take it literally and match
// nothing the writer meant.
func ParseBindingKeys(a Address, patterns []string) (BindingKeys, error) {
	if len(patterns) > 0 && a.kind != KindTopic {
		return BindingKeys{}, &Error{Address: a, Reason: "binding keys apply to a topic subscription only"}
	}
	var k BindingKeys
	for _, p := range patterns {
		if err := checkBindingKey(p); err != nil {
			return BindingKeys{}, &Error{Address: a, Reason: fmt.Sprintf("binding key %q: %s", p, err)}
		}
		if p == MatchAll {
			// "#" takes everything: the other patterns add nothing.
			return BindingKeys{}, nil
		}
		k.keys = append(k.keys, p)
	}
	slices.Sort(k.keys)
	k.keys = slices.Compact(k.keys)
	for _, p := range k.keys {
		var ws []string
		for _, w := range strings.Split(p, ".") {
			if w == "#" && len(ws) > 0 && ws[len(ws)-1] == "#" {
				continue
			}
			ws = append(ws, w)
		}
		k.words = append(k.words, ws)
	}
	return k, nil
}

func checkBindingKey(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty (use %q for every message)", MatchAll)
	case len(p) > MaxBindingKey:
		return fmt.Errorf("longer than %d bytes", MaxBindingKey)
	case !utf8.ValidString(p):
		return fmt.Errorf("not valid UTF-8")
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("holds a control character")
	}
	for w := range strings.SplitSeq(p, ".") {
		switch {
		case w == "":
			return fmt.Errorf("empty word (words are separated by single dots)")
		case w != "*" && w != "#" && strings.ContainsAny(w, "*#"):
			return fmt.Errorf("word %q: '*' and '#' must be whole words", w)
		}
	}
	return nil
}

// All reports whether the set takes every message ({"#"}).
func (k BindingKeys) All() bool { return len(k.keys) == 0 }

// Keys lists the patterns, sorted: {"#"} for the zero value.
func (k BindingKeys) Keys() []string {
	if k.All() {
		return []string{MatchAll}
	}
	return slices.Clone(k.keys)
}

// String renders the patterns as a space-separated list.
func (k BindingKeys) String() string { return strings.Join(k.Keys(), " ") }

// Match reports whether a message with this routing key (its subject) is
// bound by any pattern of the set.
func (k BindingKeys) Match(routingKey string) bool {
	if k.All() {
		return true
	}
	start := 0
	if routingKey == "" {
		// An empty routing key has no words: only "#" matches it.
		start = len(routingKey) + 1
	}
	for _, ws := range k.words {
		if matchWords(ws, routingKey, start) {
			return true
		}
	}
	return false
}

// MatchBindingKey reports whether the pattern p binds routingKey, with
// topic exchange semantics; p is not checked.
func MatchBindingKey(p, routingKey string) bool {
	start := 0
	if routingKey == "" {
		start = 1
	}
	return matchWords(strings.Split(p, "."), routingKey, start)
}

// matchWords matches the pattern words ws against the words of key from
// byte i on; i past len(key) means no word is left.
func matchWords(ws []string, key string, i int) bool {
	for len(ws) > 0 {
		w := ws[0]
		ws = ws[1:]
		if w == "#" {
			if len(ws) == 0 {
				return true
			}
			// "#" takes zero words, then one more at a time.
			for {
				if matchWords(ws, key, i) {
					return true
				}
				if i > len(key) {
					return false
				}
				_, i = nextWord(key, i)
			}
		}
		if i > len(key) {
			return false
		}
		word, next := nextWord(key, i)
		if w != "*" && w != word {
			return false
		}
		i = next
	}
	return i > len(key)
}

// nextWord returns the word of key that starts at i and where the one after
// it starts (past len(key) when it was the last).
func nextWord(key string, i int) (string, int) {
	if j := strings.IndexByte(key[i:], '.'); j >= 0 {
		return key[i : i+j], i + j + 1
	}
	return key[i:], len(key) + 1
}

// CheckBindingKeys reports whether dialect d can bind a subscription to the
// topic a with k: any k on RabbitMQ4 (a topic is a topic exchange), only
// the zero value elsewhere, with an error that names the broker's limit.
func CheckBindingKeys(d Dialect, a Address, k BindingKeys) error {
	if k.All() || d == RabbitMQ4 {
		return nil
	}
	reason := "binding keys need a topic exchange, which this broker has not"
	switch d {
	case Artemis:
		reason = "Artemis routes a message by its address, never by its subject: its wildcards match " +
			"address names, and a selector cannot say what '*' and '#' say, so a topic " +
			"subscription there takes every message of the topic (no binding keys, or \"#\")"
	case ServiceBus:
		reason = "Service Bus filters a subscription by the rules of its entity, not by binding " +
			"keys: set a SQL filter on the subscription there instead"
	}
	return &Error{Address: a, Dialect: d, Reason: reason}
}
