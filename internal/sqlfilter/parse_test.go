package sqlfilter

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestSyntaxErrors: what RabbitMQ refuses at attach time, and where the
// error points (Pos, a 1-based character column).
func TestSyntaxErrors(t *testing.T) {
	for _, c := range []struct {
		expr string
		pos  int
		msg  string // a part of Msg
	}{
		// Reserved words are upper case; in any other case they are no names either.
		{"country = 'UK' and weight = 5", 16, "reserved word"},
		{"Not x", 1, "upper case (NOT)"},
		{"not", 1, "reserved"}, {"Is", 1, "reserved"}, {"true", 1, "reserved"}, {"False", 1, "reserved"},
		{"x = null", 5, "reserved"}, {"x like 'a'", 3, "reserved"}, {"utc()", 1, "reserved"},
		{"upper", 1, "does not implement"}, {"lower", 1, "does not implement"}, {"left", 1, "does not implement"},
		{"right", 1, "does not implement"}, {"substring", 1, "does not implement"}, {"date", 1, "does not implement"},
		{"exists", 1, "does not implement"}, {"EXISTS", 1, "does not implement"},
		// No special numeric constants.
		{"x = INF", 5, "does not implement"}, {"x = NAN", 5, "does not implement"}, {"x > inf", 5, "reserved"},
		// Sections.
		{"d.abc", 1, "sections only"}, {"delivery_annotations.abc", 1, "sections only"},
		{"delivery-annotations.abc", 1, "sections only"}, {"m.abc", 1, "sections only"},
		{"message_annotations.abc", 1, "sections only"}, {"message-annotations.abc", 1, "sections only"},
		{"application-properties.foo = 'bar'", 1, "underscores"}, {"footer.abc", 1, "sections only"},
		{"f.abc", 1, "sections only"},
		{"x = 1 AND header.invalid", 11, "only priority"}, {"h.durable = TRUE", 1, "only priority"},
		{"properties.invalid", 1, "not a field"}, {"p.message-id = 'x'", 1, "message_id"},
		{"my.key", 1, "unknown section"},
		// Identifiers.
		{"my$key", 3, "unexpected character"}, {"$mykey", 1, "unexpected character"},
		{"_mykey", 1, "unexpected character"}, {"1mykey", 2, "found 'mykey'"},
		{"[\n]", 1, "control character"}, {"[\r]", 1, "control character"},
		{"[abc", 1, "not closed"}, {"[a[b]", 1, "not closed"}, {"[[key]]", 1, "not closed"},
		{"[]] = 1", 3, "unexpected character"},
		// Strings and numbers.
		{"x = 'abc", 5, "not closed"}, {`x = "abc`, 5, "not closed"}, {"x = 'It's'", 10, "not closed"},
		{"5. > 0", 2, "unexpected character"}, {".5 > 0", 1, "unexpected character"},
		{".5E2 > 0", 1, "unexpected character"}, {"5E2 > 0", 2, "5.0E2"}, {"1.5e3 = x", 4, "upper-case E"},
		{"x = 1.0E400", 5, "out of range"},
		{"data = 0x", 9, "binary constant"}, {"data = 0x1", 9, "binary constant"},
		{"data = 0x123", 12, "binary constant"}, {"data = 0xG1", 9, "binary constant"},
		{"data = 0x1G", 9, "binary constant"}, {"data = 0x1a", 9, "binary constant"},
		{"data = 0xab", 9, "binary constant"}, {"data = 0xAb", 9, "binary constant"},
		{"data = 0xdead", 9, "binary constant"},
		{"x = '\xff'", 6, "UTF-8"}, {"\xc3", 1, "UTF-8"},
		// Grammar.
		{"", 1, "empty"}, {"  \n ", 5, "empty"}, {"!!!", 1, "unexpected character"}, {"x !", 3, "unexpected character"},
		{"AND NOT", 1, "found 'AND'"}, {"TRUE FALSE", 6, "found 'FALSE'"},
		{"x = 'a' AND", 12, "end of the expression"}, {"x == 1", 4, "found '='"},
		{"(a = 1", 7, "')' to close the '(' at column 1"}, {"((a = 1)", 9, "column 1"},
		{"a = 1)", 6, "without a matching '('"}, {"a = (1 + 2))", 12, "without a matching '('"},
		{"a = b = c", 7, "cannot follow a comparison"}, {"a LIKE 'x' = TRUE", 12, "cannot follow a comparison"},
		{"(a = b = c)", 8, "cannot follow a comparison"}, {"a = 1 IS NULL", 7, "cannot follow a comparison"},
		{"x + 1 IS NULL", 7, "identifier only"}, {"(x) IS NULL", 5, "identifier only"},
		{"5 IS NULL", 3, "identifier only"}, {"-x IS NULL", 4, "identifier only"},
		{"x IS 5", 6, "expected NULL"}, {"x IS NOT 5", 10, "expected NULL"},
		{"x IN ()", 7, "expected a value"}, {"x IN ('a' 'b')", 11, "',' or ')'"}, {"x IN 'a'", 6, "'(' after IN"},
		{"x IN ('a',)", 11, "expected a value"}, {"x NOT y", 7, "LIKE or IN after NOT"},
		{"--5 = x", 2, "expected a value"}, {"- -5 = x", 3, "expected a value"}, {"NOT -NOT x", 6, "expected a value"},
		{"x BETWEEN 1 AND 2", 3, "BETWEEN"}, {"x NOT BETWEEN 1 AND 2", 7, "BETWEEN"},
		{"x + NOT y", 5, "expected a value"},
		{"UTC(123)", 5, "no arguments"}, {"UTC( 123 )", 6, "no arguments"}, {"UTC('arg')", 5, "no arguments"},
		{"UTC(TRUE)", 5, "no arguments"}, {"UTC", 4, "'(' after UTC"}, {"UTC() = UTC", 12, "'(' after UTC"},
		{"p.subject = 'x' OR m.x = 1", 20, "sections only"},
		// LIKE.
		{"data LIKE 0x48", 11, "quoted pattern"}, {"x LIKE y", 8, "quoted pattern"},
		{"id LIKE 'pattern*' ESCAPE '*'", 9, "ends in its escape"},
		{"id LIKE '_pattern*' ESCAPE '*'", 9, "ends in its escape"},
		{"id LIKE '\n'", 9, "control"}, {"id LIKE '\r'", 9, "control"}, {"id LIKE '_\n'", 9, "control"},
		{"id LIKE '%\r'", 9, "control"}, {"id LIKE '!\r' ESCAPE '!'", 9, "control"}, {"id LIKE 'a\x7f%%'", 9, "control"},
		{"id LIKE 'a' ESCAPE ''", 20, "exactly one character"}, {"id LIKE 'a' ESCAPE 'ab'", 20, "exactly one character"},
		{"id LIKE 'a' ESCAPE x", 20, "quoted character"}, {"id LIKE 'a' ESCAPE", 19, "quoted character"},
	} {
		_, err := Parse(c.expr)
		var se *SyntaxError
		require.True(t, errors.As(err, &se), "%q: %v", c.expr, err)
		require.Equal(t, c.expr, se.Expr)
		require.Equal(t, c.pos, se.Pos, "%q: %v", c.expr, err)
		require.Contains(t, se.Msg, c.msg, c.expr)
	}
}

// TestBounds: RabbitMQ's 4096 characters and 200 tokens, and our depth.
func TestBounds(t *testing.T) {
	ok := func(expr string) {
		t.Helper()
		_, err := Parse(expr)
		require.NoError(t, err)
	}
	fails := func(expr string, pos int, msg string) {
		t.Helper()
		_, err := Parse(expr)
		var se *SyntaxError
		require.True(t, errors.As(err, &se), "%v", err)
		require.Equal(t, pos, se.Pos, "%v", err)
		require.Contains(t, se.Msg, msg)
	}

	// Length counts characters, as RabbitMQ does, not bytes.
	ok(strings.Repeat("x", 4088) + " IS NULL")
	fails(strings.Repeat("x", 4089)+" IS NULL", 4097, "longer than 4096 characters")
	fails(strings.Repeat("x", 4096)+" IS NULL", 4097, "longer than 4096 characters")
	ok("[" + strings.Repeat("🥕", 4094) + "]")
	fails("["+strings.Repeat("🥕", 4095)+"]", 4097, "longer")

	// 200 tokens pass; the 201st is refused, where it is.
	ok("-a" + strings.Repeat(" + a", 99))
	long := "a" + strings.Repeat(" + a", 100)
	fails(long, len(long), "more than 200 tokens")
	in := "id IN (" + strings.Repeat("'x',", 99) + "'x')" // RabbitMQ's own case, 203 tokens
	fails(in, strings.Index(in, strings.Repeat("'x',", 98))+4*98+4, "more than 200 tokens")

	// Nesting: 100 levels pass, the 101st is refused. Parentheses reach the
	// token bound first.
	ok(strings.Repeat("NOT ", 100) + "x")
	fails(strings.Repeat("NOT ", 101)+"x", 401, "nested more than 100 deep")
	ok(strings.Repeat("(", 99) + "x" + strings.Repeat(")", 99))
	fails(strings.Repeat("(", 100)+"x"+strings.Repeat(")", 100), 201, "more than 200 tokens")
	fails(strings.Repeat("(NOT ", 51)+"x"+strings.Repeat(")", 51), 251, "nested more than 100 deep")
	ok(strings.Repeat("(NOT ", 50) + "x" + strings.Repeat(")", 50))
	ok("x IN (" + strings.Repeat("1,", 95) + "1)")
}

// TestErrorText: the message names the column and what was expected, and
// quotes no more than a short window of the expression.
func TestErrorText(t *testing.T) {
	_, err := Parse("country = 'UK' and weight = 5")
	require.EqualError(t, err, `sql filter: column 16: "and" is a reserved word: write operators in upper case (AND), and a name that is a reserved word in brackets ([and]), near "country = 'UK' and weight = 5"`)

	_, err = Parse("(a = 1")
	require.EqualError(t, err, `sql filter: column 7: expected ')' to close the '(' at column 1, found the end of the expression, near "(a = 1"`)

	expr := strings.Repeat("a + ", 30) + "b c" + strings.Repeat(" + d", 30)
	_, err = Parse(expr)
	require.ErrorContains(t, err, "column 123: expected AND, OR or the end of the expression, found 'c', near …"+strconv.Quote(expr[102:162])+"…")

	for _, e := range []string{
		strings.Repeat("x", 10000) + " IS NULL",
		"x = '" + strings.Repeat("y", 3000) + "' AND",
		"'" + strings.Repeat("y", 3000) + "' '" + strings.Repeat("z", 1000) + "'",
		strings.Repeat("é", 5000),
	} {
		_, err := Parse(e)
		require.Error(t, err)
		require.Less(t, utf8.RuneCountInString(err.Error()), 200, err.Error())
	}

	// The column counts characters.
	expr = "[🥕🥕] = 1 AND [ニンジン] = = 2"
	_, err = Parse(expr)
	var se *SyntaxError
	require.ErrorAs(t, err, &se)
	require.Equal(t, utf8.RuneCountInString(expr[:strings.LastIndex(expr, "= 2")])+1, se.Pos)
	require.Equal(t, 23, se.Pos)
}
