package sqlfilter

import (
	"fmt"
	"unicode/utf8"
)

// SyntaxError is an expression RabbitMQ would refuse at attach time.
type SyntaxError struct {
	Expr string // the expression as given
	Pos  int    // 1-based character (not byte) position in Expr of what is wrong
	Msg  string // what is wrong, or what was expected there
}

// Error names the column and quotes a short window of the expression around
// it, so that a log line stays readable whatever the user passed.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("sql filter: column %d: %s, near %s", e.Pos, e.Msg, e.window())
}

// Characters of Expr shown before and after Pos.
const (
	windowBefore = 20
	windowAfter  = 40
)

func (e *SyntaxError) window() string {
	from := max(e.Pos-1-windowBefore, 0)
	start, end := runeOffset(e.Expr, from), runeOffset(e.Expr, e.Pos-1+windowAfter)
	w := fmt.Sprintf("%q", e.Expr[start:end])
	if start > 0 {
		w = "…" + w
	}
	if end < len(e.Expr) {
		w += "…"
	}
	return w
}

// runeOffset is the byte offset of the n-th character of s (0-based),
// or len(s) when s is shorter. An invalid byte counts as one character,
// as it does in a range loop.
func runeOffset(s string, n int) int {
	off := 0
	for ; n > 0 && off < len(s); n-- {
		_, size := utf8.DecodeRuneInString(s[off:])
		off += size
	}
	return off
}

// column is the 1-based character position of byte offset off in s.
func column(s string, off int) int {
	return utf8.RuneCountInString(s[:off]) + 1
}

// errAt builds the SyntaxError for byte offset off of expr.
func errAt(expr string, off int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Expr: expr, Pos: column(expr, off), Msg: fmt.Sprintf(format, args...)}
}
