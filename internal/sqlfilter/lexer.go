package sqlfilter

import (
	"math"
	"math/big"
	"strconv"
	"strings"
)

// tokKind is the kind of a token. The lexer follows RabbitMQ's
// (rabbit_amqp_sql_lexer.xrl): longest match, and at equal length the
// reserved words win over identifiers.
type tokKind uint8

const (
	tEOF tokKind = iota
	tInt
	tFloat
	tString
	tBinary
	tIdent
	tTrue
	tFalse
	tAnd
	tOr
	tNot
	tLike
	tIn
	tIs
	tNull
	tEscape
	tUTC
	tEq
	tNe
	tGt
	tGe
	tLt
	tLe
	tPlus
	tMinus
	tStar
	tSlash
	tPercent
	tLParen
	tRParen
	tComma
)

// token is one lexeme of the expression.
type token struct {
	kind     tokKind
	off, end int    // byte offsets in the expression
	text     string // tString, tBinary: the decoded bytes; tIdent: the application property key
	num      value  // tInt, tFloat
	field    field  // tIdent
	regular  bool   // tIdent written as a regular identifier (not [delimited], not section.qualified)
}

// The reserved words, written in upper case (§ "Reserved words and
// operator names must be written in upper case").
var upperWords = map[string]tokKind{
	"AND": tAnd, "OR": tOr, "NOT": tNot,
	"LIKE": tLike, "IN": tIn, "IS": tIs, "NULL": tNull, "ESCAPE": tEscape,
	"TRUE": tTrue, "FALSE": tFalse, "UTC": tUTC,
}

// reserved are the words no regular identifier may be, in any case: the
// operators and also what the spec reserves and RabbitMQ does not implement.
var reserved = map[string]bool{
	"and": true, "or": true, "not": true,
	"like": true, "in": true, "is": true, "null": true, "escape": true,
	"true": true, "false": true, "exists": true, "nan": true, "inf": true,
	"lower": true, "upper": true, "left": true, "right": true,
	"substring": true, "utc": true, "date": true,
}

// lex splits expr into tokens, ending with tEOF.
func lex(expr string) ([]token, *SyntaxError) {
	var toks []token
	for i := 0; ; {
		for i < len(expr) && isSpace(expr[i]) {
			i++
		}
		if i == len(expr) {
			return append(toks, token{kind: tEOF, off: i, end: i}), nil
		}
		t, err := lexOne(expr, i)
		if err != nil {
			return nil, err
		}
		toks = append(toks, t)
		i = t.end
	}
}

// isSpace is RabbitMQ's whitespace: space, tab, form feed, LF and CR.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\f' || c == '\n' || c == '\r'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isHex(c byte) bool    { return isDigit(c) || 'A' <= c && c <= 'F' } // upper case only, as RabbitMQ

// lexOne reads the token that starts at expr[i], which is not whitespace.
func lexOne(expr string, i int) (token, *SyntaxError) {
	c := expr[i]
	switch {
	case isDigit(c):
		return lexNumber(expr, i)
	case isLetter(c):
		return lexWord(expr, i)
	case c == '\'' || c == '"':
		return lexString(expr, i)
	case c == '[':
		return lexDelimited(expr, i)
	}
	two := ""
	if i+1 < len(expr) {
		two = expr[i : i+2]
	}
	switch two {
	case "<>", "!=":
		return token{kind: tNe, off: i, end: i + 2}, nil
	case ">=":
		return token{kind: tGe, off: i, end: i + 2}, nil
	case "<=":
		return token{kind: tLe, off: i, end: i + 2}, nil
	}
	if k, ok := punct[c]; ok {
		return token{kind: k, off: i, end: i + 1}, nil
	}
	if c == '.' {
		return token{}, errAt(expr, i, "unexpected character '.': a number has digits on both sides of its point (0.5)")
	}
	r := expr[i:runeOffsetFrom(expr, i)]
	return token{}, errAt(expr, i, "unexpected character %q", r)
}

var punct = map[byte]tokKind{
	'=': tEq, '>': tGt, '<': tLt, '+': tPlus, '-': tMinus, '*': tStar,
	'/': tSlash, '%': tPercent, '(': tLParen, ')': tRParen, ',': tComma,
}

// runeOffsetFrom is the byte offset just past the character at expr[i].
func runeOffsetFrom(expr string, i int) int { return i + runeOffset(expr[i:], 1) }

// lexNumber reads an integer, a decimal or approximate number (digits on
// both sides of the point, an optional upper-case E exponent) or a binary
// constant (0x and pairs of upper-case hex digits).
func lexNumber(expr string, i int) (token, *SyntaxError) {
	if strings.HasPrefix(expr[i:], "0x") {
		j := i + 2
		for j+1 < len(expr) && isHex(expr[j]) && isHex(expr[j+1]) {
			j += 2
		}
		if j > i+2 {
			b := make([]byte, 0, (j-i-2)/2)
			for k := i + 2; k < j; k += 2 {
				n, _ := strconv.ParseUint(expr[k:k+2], 16, 8)
				b = append(b, byte(n))
			}
			return token{kind: tBinary, off: i, end: j, text: string(b)}, nil
		}
	}
	j := scanDigits(expr, i)
	if j+1 < len(expr) && expr[j] == '.' && isDigit(expr[j+1]) {
		j = scanDigits(expr, j+1)
		if j < len(expr) && expr[j] == 'E' {
			k := j + 1
			if k < len(expr) && (expr[k] == '+' || expr[k] == '-') {
				k++
			}
			if k < len(expr) && isDigit(expr[k]) {
				j = scanDigits(expr, k)
			}
		}
		f, err := strconv.ParseFloat(expr[i:j], 64)
		if err != nil && (math.IsInf(f, 0) || math.IsNaN(f)) {
			return token{}, errAt(expr, i, "number %s is out of range", expr[i:j])
		}
		return token{kind: tFloat, off: i, end: j, num: floatValue(f)}, nil
	}
	if n, err := strconv.ParseInt(expr[i:j], 10, 64); err == nil {
		return token{kind: tInt, off: i, end: j, num: intValue(n)}, nil
	}
	// RabbitMQ's integers have no bound.
	b, _ := new(big.Int).SetString(expr[i:j], 10)
	return token{kind: tInt, off: i, end: j, num: bigValue(b)}, nil
}

func scanDigits(expr string, i int) int {
	for i < len(expr) && isDigit(expr[i]) {
		i++
	}
	return i
}

// lexWord reads a reserved word, a regular identifier or a
// section-qualified one (p.subject). A regular identifier is RabbitMQ's
// [A-Za-z][A-Za-z0-9_]*: no $ and no leading _, which the spec allows.
func lexWord(expr string, i int) (token, *SyntaxError) {
	// A section name is letters, '_' and '-'; then '.' and a regular identifier.
	j := i + 1
	for j < len(expr) && (isLetter(expr[j]) || expr[j] == '_' || expr[j] == '-') {
		j++
	}
	if j+1 < len(expr) && expr[j] == '.' && isLetter(expr[j+1]) {
		end := scanRegular(expr, j+1)
		f, key, msg := resolveSection(expr[i:j], expr[j+1:end])
		if msg != "" {
			return token{}, errAt(expr, i, "%s", msg)
		}
		return token{kind: tIdent, off: i, end: end, field: f, text: key}, nil
	}
	end := scanRegular(expr, i)
	w := expr[i:end]
	if k, ok := upperWords[w]; ok {
		return token{kind: k, off: i, end: end}, nil
	}
	if lw := strings.ToLower(w); reserved[lw] {
		if _, op := upperWords[strings.ToUpper(w)]; op {
			return token{}, errAt(expr, i, "%q is a reserved word: write operators in upper case (%s), and a name that is a reserved word in brackets ([%s])", w, strings.ToUpper(w), w)
		}
		return token{}, errAt(expr, i, "%q is a reserved word RabbitMQ does not implement (a name that is one goes in brackets: [%s])", w, w)
	}
	return token{kind: tIdent, off: i, end: end, field: fApp, text: w, regular: true}, nil
}

func scanRegular(expr string, i int) int {
	i++ // a letter
	for i < len(expr) && (isLetter(expr[i]) || isDigit(expr[i]) || expr[i] == '_') {
		i++
	}
	return i
}

// lexString reads a string in single or double quotes, where the quote
// doubled stands for itself.
func lexString(expr string, i int) (token, *SyntaxError) {
	q := expr[i]
	var b strings.Builder
	for j := i + 1; j < len(expr); j++ {
		if expr[j] != q {
			b.WriteByte(expr[j])
			continue
		}
		if j+1 < len(expr) && expr[j+1] == q {
			b.WriteByte(q)
			j++
			continue
		}
		return token{kind: tString, off: i, end: j + 1, text: b.String()}, nil
	}
	return token{}, errAt(expr, i, "string is not closed: a %c inside it is written twice", q)
}

// lexDelimited reads a [delimited identifier], in which [[ and ]] stand for
// [ and ]. Like RabbitMQ's lexer it takes the longest match, so in []]] the
// ]] is an escape and in []] it is not.
func lexDelimited(expr string, i int) (token, *SyntaxError) {
	last := -1 // offset just past the last ] that could close the identifier
scan:
	for j := i + 1; j < len(expr); {
		switch expr[j] {
		case ']':
			last = j + 1
			if j+1 == len(expr) || expr[j+1] != ']' {
				break scan
			}
			j += 2
		case '[':
			if j+1 == len(expr) || expr[j+1] != '[' {
				break scan
			}
			j += 2
		default:
			j++
		}
	}
	if last < 0 {
		return token{}, errAt(expr, i, "delimited identifier is not closed by ] (a [ or ] inside it is written twice)")
	}
	raw := expr[i+1 : last-1]
	for k := 0; k < len(raw); k++ {
		if isControl(raw[k]) {
			return token{}, errAt(expr, i, "control character %q in a delimited identifier", raw[k])
		}
	}
	key := strings.ReplaceAll(strings.ReplaceAll(raw, "[[", "["), "]]", "]")
	return token{kind: tIdent, off: i, end: last, field: fApp, text: key}, nil
}

// isControl is RabbitMQ's control character: below 32, and DEL.
func isControl[T byte | rune](c T) bool { return c < 32 || c == 127 }
