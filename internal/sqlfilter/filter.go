package sqlfilter

import "github.com/amqpactor/amqpactor/messages"

// Filter is a compiled SQL filter expression. It is immutable: any number
// of goroutines may call Match at once.
type Filter struct {
	expr string
	root node
}

// Parse compiles expr. Its error is a *SyntaxError.
func Parse(expr string) (*Filter, error) {
	root, err := parse(expr)
	if err != nil {
		return nil, err
	}
	return &Filter{expr: expr, root: root}, nil
}

// Match reports whether m's metadata makes the expression TRUE. FALSE and
// UNKNOWN (a NULL operand, a division by zero, a LIKE on a number, ...) are
// not a match. A nil m is a message with nothing set.
func (f *Filter) Match(m *messages.Message) bool {
	return isTrue(f.root.eval(m))
}

// String returns the expression as given to Parse.
func (f *Filter) String() string { return f.expr }
