package sqlfilter

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// The bounds on an expression. The first two are RabbitMQ's
// (rabbit_amqp_filter_sql.erl); the depth is ours, so that what any user
// string can make the parser and evaluator recurse through stays small.
const (
	maxLength = 4096 // characters
	maxTokens = 200
	maxDepth  = 100 // NOTs and parentheses within one another
)

// parser is a recursive-descent parser for RabbitMQ's grammar
// (rabbit_amqp_sql_parser.yrl), lowest precedence first:
//
//	or         = and { OR and }
//	and        = not { AND not }
//	not        = NOT not | comparison
//	comparison = additive [ cmpop additive
//	                      | [NOT] LIKE string [ESCAPE string]
//	                      | [NOT] IN ( additive { , additive } )
//	                      | IS [NOT] NULL ]      (IS only after a lone identifier)
//	additive   = multiplicative { (+|-) multiplicative }
//	multiplicative = unary { (*|/|%) unary }
//	unary      = [+|-] primary
//	primary    = ( or ) | literal | identifier | UTC ( )
type parser struct {
	expr  string
	toks  []token // ends with tEOF
	i     int
	depth int
}

// parse compiles expr, checking RabbitMQ's bounds in RabbitMQ's order:
// UTF-8, length, tokens, grammar.
func parse(expr string) (node, *SyntaxError) {
	if !utf8.ValidString(expr) {
		off := 0
		for off < len(expr) {
			r, size := utf8.DecodeRuneInString(expr[off:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			off += size
		}
		return nil, errAt(expr, off, "the expression is not valid UTF-8")
	}
	if utf8.RuneCountInString(expr) > maxLength {
		return nil, &SyntaxError{Expr: expr, Pos: maxLength + 1, Msg: "the expression is longer than 4096 characters"}
	}
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	if len(toks)-1 > maxTokens {
		return nil, errAt(expr, toks[maxTokens].off, "the expression has more than %d tokens", maxTokens)
	}
	p := &parser{expr: expr, toks: toks}
	if p.peek().kind == tEOF {
		return nil, errAt(expr, len(expr), "the expression is empty")
	}
	root, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	switch t := p.peek(); t.kind {
	case tEOF:
		return root, nil
	case tRParen:
		return nil, errAt(expr, t.off, "')' without a matching '('")
	}
	return nil, p.afterCondition("AND, OR or the end of the expression")
}

func (p *parser) peek() token { return p.toks[p.i] }

func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

// expect consumes a token of kind k, or says that want was expected.
func (p *parser) expect(k tokKind, want string) *SyntaxError {
	if p.peek().kind != k {
		return p.unexpected(want)
	}
	p.next()
	return nil
}

// enter counts one more level of nesting at t; leave undoes it.
func (p *parser) enter(t token) *SyntaxError {
	if p.depth++; p.depth > maxDepth {
		return errAt(p.expr, t.off, "NOTs and parentheses are nested more than %d deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

func (p *parser) parseOr() (node, *SyntaxError) {
	l, err := p.parseAnd()
	for err == nil && p.peek().kind == tOr {
		p.next()
		var r node
		if r, err = p.parseAnd(); err == nil {
			l = orNode{l, r}
		}
	}
	return l, err
}

func (p *parser) parseAnd() (node, *SyntaxError) {
	l, err := p.parseNot()
	for err == nil && p.peek().kind == tAnd {
		p.next()
		var r node
		if r, err = p.parseNot(); err == nil {
			l = andNode{l, r}
		}
	}
	return l, err
}

func (p *parser) parseNot() (node, *SyntaxError) {
	if p.peek().kind != tNot {
		return p.parseComparison()
	}
	if err := p.enter(p.next()); err != nil {
		return nil, err
	}
	defer p.leave()
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	return notNode{x}, nil
}

func (p *parser) parseComparison() (node, *SyntaxError) {
	start := p.i
	l, err := p.parseAdditive()
	if err != nil {
		return nil, err
	}
	switch t := p.peek(); t.kind {
	case tEq, tNe, tGt, tGe, tLt, tLe:
		p.next()
		r, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		return cmpNode{t.kind, l, r}, nil
	case tLike:
		p.next()
		return p.parseLike(l)
	case tIn:
		p.next()
		return p.parseIn(l)
	case tNot:
		p.next()
		var x node
		switch p.peek().kind {
		case tLike:
			p.next()
			x, err = p.parseLike(l)
		case tIn:
			p.next()
			x, err = p.parseIn(l)
		default:
			return nil, p.unexpected("LIKE or IN after NOT")
		}
		if err != nil {
			return nil, err
		}
		return notNode{x}, nil
	case tIs:
		id, ok := l.(fieldRef)
		if !ok || p.i != start+1 {
			return nil, errAt(p.expr, t.off, "IS [NOT] NULL applies to an identifier only")
		}
		p.next()
		not := p.peek().kind == tNot
		if not {
			p.next()
		}
		if err := p.expect(tNull, "NULL"); err != nil {
			return nil, err
		}
		if not {
			return notNode{isNullNode{id}}, nil
		}
		return isNullNode{id}, nil
	}
	return l, nil
}

// parseLike reads what follows LIKE: a string pattern, and an optional
// ESCAPE with a one-character string.
func (p *parser) parseLike(x node) (node, *SyntaxError) {
	pat := p.peek()
	if err := p.expect(tString, "a quoted pattern after LIKE"); err != nil {
		return nil, err
	}
	var esc rune
	hasEsc := p.peek().kind == tEscape
	if hasEsc {
		p.next()
		e := p.peek()
		if err := p.expect(tString, "a quoted character after ESCAPE"); err != nil {
			return nil, err
		}
		if utf8.RuneCountInString(e.text) != 1 {
			return nil, errAt(p.expr, e.off, "ESCAPE takes a string of exactly one character")
		}
		esc, _ = utf8.DecodeRuneInString(e.text)
	}
	lp, msg := compileLike(pat.text, esc, hasEsc)
	if msg != "" {
		return nil, errAt(p.expr, pat.off, "%s", msg)
	}
	return likeNode{x, lp}, nil
}

// parseIn reads what follows IN: a parenthesised list of one or more
// expressions (RabbitMQ takes any arithmetic expression there, not only
// constants).
func (p *parser) parseIn(x node) (node, *SyntaxError) {
	if err := p.expect(tLParen, "'(' after IN"); err != nil {
		return nil, err
	}
	n := inNode{x: x}
	for {
		e, err := p.parseAdditive()
		if err != nil {
			return nil, err
		}
		n.list = append(n.list, e)
		switch p.peek().kind {
		case tComma:
			p.next()
			continue
		case tRParen:
			p.next()
			return n, nil
		}
		return nil, p.unexpected("',' or ')' in the IN list")
	}
}

func (p *parser) parseAdditive() (node, *SyntaxError) {
	l, err := p.parseMultiplicative()
	for err == nil && (p.peek().kind == tPlus || p.peek().kind == tMinus) {
		op := p.next().kind
		var r node
		if r, err = p.parseMultiplicative(); err == nil {
			l = arithNode{op, l, r}
		}
	}
	return l, err
}

func (p *parser) parseMultiplicative() (node, *SyntaxError) {
	l, err := p.parseUnary()
	for err == nil && (p.peek().kind == tStar || p.peek().kind == tSlash || p.peek().kind == tPercent) {
		op := p.next().kind
		var r node
		if r, err = p.parseUnary(); err == nil {
			l = arithNode{op, l, r}
		}
	}
	return l, err
}

// parseUnary reads a sign and a primary: as in RabbitMQ's grammar a sign
// applies to a primary only, so --5 is refused and -(-5) is not.
func (p *parser) parseUnary() (node, *SyntaxError) {
	if k := p.peek().kind; k == tPlus || k == tMinus {
		p.next()
		x, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		return signNode{k == tMinus, x}, nil
	}
	return p.parsePrimary()
}

func (p *parser) parsePrimary() (node, *SyntaxError) {
	t := p.peek()
	switch t.kind {
	case tLParen:
		p.next()
		if err := p.enter(t); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.peek().kind != tRParen {
			return nil, p.afterCondition("')' to close the '(' at column " + strconv.Itoa(column(p.expr, t.off)))
		}
		p.next()
		return x, nil
	case tInt, tFloat:
		p.next()
		return literal{t.num}, nil
	case tString, tBinary:
		p.next()
		return literal{strValue(t.text)}, nil
	case tTrue, tFalse:
		p.next()
		return literal{boolValue(t.kind == tTrue)}, nil
	case tIdent:
		p.next()
		return fieldRef{t.field, t.text}, nil
	case tUTC:
		p.next()
		if err := p.expect(tLParen, "'(' after UTC"); err != nil {
			return nil, err
		}
		if err := p.expect(tRParen, "')': UTC takes no arguments"); err != nil {
			return nil, err
		}
		return utcNow{}, nil
	}
	return nil, p.unexpected("a value, an identifier or '('")
}

// afterCondition is unexpected after a whole condition, where a comparison
// operator means the user chained comparisons, which the grammar does not
// allow.
func (p *parser) afterCondition(want string) *SyntaxError {
	switch t := p.peek(); t.kind {
	case tEq, tNe, tGt, tGe, tLt, tLe, tLike, tIn, tIs, tNot:
		return errAt(p.expr, t.off, "%s cannot follow a comparison: join conditions with AND or OR, or compare a condition in parentheses", p.describe(t))
	}
	return p.unexpected(want)
}

// unexpected says that want was expected where the next token is, with a
// hint for the mistakes RabbitMQ users make.
func (p *parser) unexpected(want string) *SyntaxError {
	t := p.peek()
	if hint := p.hint(); hint != "" {
		return errAt(p.expr, t.off, "%s", hint)
	}
	return errAt(p.expr, t.off, "expected %s, found %s", want, p.describe(t))
}

func (p *parser) hint() string {
	t := p.peek()
	if t.kind == tIdent && t.regular && strings.EqualFold(t.text, "BETWEEN") {
		return "RabbitMQ does not support BETWEEN: write x >= a AND x <= b"
	}
	if p.i == 0 {
		return ""
	}
	prev := p.toks[p.i-1]
	if prev.end != t.off {
		return ""
	}
	word := t.kind == tIdent && t.regular
	switch {
	case prev.kind == tInt && p.expr[prev.off:prev.end] == "0" && word && t.text[0] == 'x',
		prev.kind == tBinary && (word || t.kind == tInt):
		return "a binary constant is 0x and pairs of upper-case hex digits (0x0A1B)"
	case prev.kind == tInt && word && (t.text[0] == 'E' || t.text[0] == 'e'):
		return "an approximate number needs digits on both sides of the point (5.0E2)"
	case prev.kind == tFloat && word && (t.text[0] == 'E' || t.text[0] == 'e'):
		return "an exponent is an upper-case E and digits (1.5E3, 1.5E-3)"
	}
	return ""
}

// describe names t in an error: its text, cut short.
func (p *parser) describe(t token) string {
	if t.kind == tEOF {
		return "the end of the expression"
	}
	s := p.expr[t.off:t.end]
	if n := runeOffset(s, 16); n < len(s) {
		s = s[:n] + "…"
	}
	if t.kind == tString {
		return "the string " + s
	}
	return "'" + s + "'"
}
