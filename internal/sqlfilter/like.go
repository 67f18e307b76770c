package sqlfilter

import (
	"strings"
	"unicode/utf8"
)

// likePattern is a compiled LIKE pattern. RabbitMQ matches a pattern with
// no _ and at most one % by comparing bytes, and any other through a
// regular expression (% as .*?, _ as ., anchored by ^ and $); this follows
// both, with a matcher of its own for the second whose time is linear in
// the subject's length whatever the pattern. (RabbitMQ's regular expression
// gives up past a step limit and answers no match; this one always answers.)
type likePattern struct {
	wild   bool   // the pattern has a _ or more than one %
	exact  bool   // !wild: no % at all; prefix is the whole pattern
	prefix string // !wild: what comes before the %
	suffix string // !wild: what comes after it
	segs   []segment
}

// segment is the part of a wild pattern between two %s: characters and _s,
// so every match of it has the same number of characters.
type segment struct {
	elems []rune // anyRune stands for _
	lit   string // the text of elems when it has no _
	plain bool   // no _ in elems
	any   []uint64
	masks map[rune][]uint64 // per character of elems: the positions it matches (with the _s)
}

const anyRune rune = -1

// compileLike compiles pattern with the escape character esc (or none when
// hasEsc is false); msg says why the pattern is refused.
func compileLike(pattern string, esc rune, hasEsc bool) (p *likePattern, msg string) {
	var elems []rune // anyRune for _, manyRune for %
	const manyRune rune = -2
	percents, underscores := 0, 0
	for i := 0; i < len(pattern); {
		r, size := utf8.DecodeRuneInString(pattern[i:])
		i += size
		switch {
		case hasEsc && r == esc:
			if i == len(pattern) {
				return nil, "the pattern ends in its escape character"
			}
			r, size = utf8.DecodeRuneInString(pattern[i:])
			i += size
		case r == '%':
			elems = append(elems, manyRune)
			percents++
			continue
		case r == '_':
			elems = append(elems, anyRune)
			underscores++
			continue
		}
		if isControl(r) {
			return nil, "a LIKE pattern may not hold control characters"
		}
		elems = append(elems, r)
	}

	p = &likePattern{}
	if underscores == 0 && percents <= 1 {
		var b strings.Builder
		for _, r := range elems {
			if r == manyRune {
				p.prefix = b.String()
				b.Reset()
				continue
			}
			b.WriteRune(r)
		}
		if percents == 0 {
			p.exact, p.prefix = true, b.String()
		} else {
			p.suffix = b.String()
		}
		return p, ""
	}
	p.wild = true
	start := 0
	for i := 0; i <= len(elems); i++ {
		if i == len(elems) || elems[i] == manyRune {
			p.segs = append(p.segs, newSegment(elems[start:i]))
			start = i + 1
		}
	}
	return p, ""
}

func newSegment(elems []rune) segment {
	s := segment{elems: elems, plain: true}
	for _, r := range elems {
		if r == anyRune {
			s.plain = false
		}
	}
	if s.plain {
		s.lit = string(elems)
		return s
	}
	words := (len(elems) + 63) / 64
	s.any = make([]uint64, words)
	s.masks = map[rune][]uint64{}
	for j, r := range elems {
		if r == anyRune {
			s.any[j/64] |= 1 << (j % 64)
		}
	}
	for j, r := range elems {
		if r == anyRune {
			continue
		}
		m, ok := s.masks[r]
		if !ok {
			m = append([]uint64(nil), s.any...)
			s.masks[r] = m
		}
		m[j/64] |= 1 << (j % 64)
	}
	return s
}

// match reports whether subject matches: TRUE, FALSE, or UNKNOWN where
// RabbitMQ's regular expression refuses a subject that is not UTF-8.
func (p *likePattern) match(subject string) value {
	if !p.wild {
		switch {
		case p.exact:
			return boolValue(subject == p.prefix)
		case len(subject) < len(p.prefix)+len(p.suffix):
			return boolValue(false)
		}
		return boolValue(strings.HasPrefix(subject, p.prefix) && strings.HasSuffix(subject, p.suffix))
	}
	if !utf8.ValidString(subject) {
		return null
	}
	// RabbitMQ's regular expression is compiled without dotall, so % and _
	// do not match a line feed, and its $ also matches before a final one;
	// a pattern never holds a line feed (control characters are refused).
	subject = strings.TrimSuffix(subject, "\n")
	if strings.IndexByte(subject, '\n') >= 0 {
		return boolValue(false)
	}
	return boolValue(p.matchWild(subject))
}

// matchWild matches segments separated by %: the first at the start, the
// last at the end, and each one between at its leftmost place after the one
// before, which leaves the most room to the rest.
func (p *likePattern) matchWild(s string) bool {
	first, last := p.segs[0], p.segs[len(p.segs)-1]
	if len(p.segs) == 1 {
		end, ok := first.matchAt(s, 0)
		return ok && end == len(s)
	}
	pos, ok := first.matchAt(s, 0)
	if !ok {
		return false
	}
	lastStart := len(s)
	for range last.elems {
		if lastStart == 0 {
			return false
		}
		_, size := utf8.DecodeLastRuneInString(s[:lastStart])
		lastStart -= size
	}
	if lastStart < pos {
		return false
	}
	if _, ok := last.matchAt(s, lastStart); !ok {
		return false
	}
	for _, seg := range p.segs[1 : len(p.segs)-1] {
		end, ok := seg.find(s[pos:lastStart])
		if !ok {
			return false
		}
		pos += end
	}
	return true
}

// matchAt matches the segment at s[off:] and returns where the match ends.
func (g *segment) matchAt(s string, off int) (end int, ok bool) {
	for _, e := range g.elems {
		if off == len(s) {
			return 0, false
		}
		r, size := utf8.DecodeRuneInString(s[off:])
		if e != anyRune && e != r {
			return 0, false
		}
		off += size
	}
	return off, true
}

// find returns where the segment's leftmost match in s ends. A segment with
// a _ runs the bit-parallel shift-and automaton: one pass over s, a word of
// state per 64 characters of the segment.
func (g *segment) find(s string) (end int, ok bool) {
	if g.plain {
		i := strings.Index(s, g.lit)
		return i + len(g.lit), i >= 0
	}
	k := len(g.elems)
	state := make([]uint64, len(g.any))
	top, topBit := (k-1)/64, uint((k-1)%64)
	for i, r := range s {
		m, ok := g.masks[r]
		if !ok {
			m = g.any
		}
		carry := uint64(1)
		for w := range state {
			next := state[w]<<1 | carry
			carry = state[w] >> 63
			state[w] = next & m[w]
		}
		if state[top]>>topBit&1 == 1 {
			return i + utf8.RuneLen(r), true
		}
	}
	return 0, false
}
