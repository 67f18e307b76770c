package sqlfilter

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/amqpactor/amqpactor/messages"
)

// FuzzParse: Parse never panics, its error is a SyntaxError that points
// into the expression, and a Filter it returns matches any message without
// panicking.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"country = 'UK' AND weight > 5",
		"NOT (absent IN ('v1', 'v2') OR active)",
		"p.subject LIKE 'Order%' AND region = 'emea'",
		"key LIKE '🍰@%🥕' ESCAPE '@'",
		"description LIKE 'T_i% a %e_%e_sa%'",
		"k LIKE '%%a%%b%%'",
		"weight + weight * quantity - -temperature / 2 = 502.5",
		"101 % (percentage % 30) = 11",
		"99999999999999999999999 > 1.0E23",
		"umax - 9223372036854775807 = 9223372036854775808",
		"p.absolute_expiry_time IS NULL OR p.absolute_expiry_time > UTC()",
		"h.priority > 4 AND p.group_sequence % 3 = 0",
		"signature IN (0xCAFEBABE, 0xDEADBEEF)",
		"[order-status] = 'pending' AND [[[ key ]]] AND []]]",
		`"They said ""Hello""" = key`,
		"x BETWEEN 1 AND 2",
		"(a = 1",
		"data = 0x1a",
		strings.Repeat("NOT ", 101) + "x",
		"id LIKE '_pattern*' ESCAPE '*'",
		"\xff",
	} {
		f.Add(seed)
	}
	msgs := []*messages.Message{
		nil,
		{},
		{
			MessageID: uint64(math.MaxUint64), CorrelationID: []byte{0xCA, 0xFE}, UserID: []byte("Bob"),
			To: "orders", Subject: "Order 42", ReplyTo: "r", ContentType: "application/json",
			ContentEncoding: "zstd", GroupID: "g", ReplyToGroupID: "h", GroupSequence: 9, Priority: 7,
			CreationTime: time.UnixMilli(1753365622000), AbsoluteExpiryTime: time.UnixMilli(1),
			Headers: map[string]any{
				"country": "UK", "weight": uint16(5), "price": 10.5, "active": true, "premium": false,
				"k": "xaxbx", "key": "_foo", "umax": uint64(math.MaxUint64), "min": int64(math.MinInt64),
				"signature": []byte{0xDE, 0xAD, 0xBE, 0xEF}, "missing": nil, "nan": math.NaN(),
				"description": "This is a test message", "bad": string([]byte{0xff, 'a', '\n'}),
				"order-status": "pending", "list": []any{1},
			},
		},
	}
	f.Fuzz(func(t *testing.T, expr string) {
		flt, err := Parse(expr)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("%q: %T is not a *SyntaxError", expr, err)
			}
			if se.Pos < 1 || se.Pos > utf8.RuneCountInString(expr)+1 {
				t.Fatalf("%q: Pos %d is outside the expression", expr, se.Pos)
			}
			if se.Expr != expr || se.Msg == "" || se.Error() == "" {
				t.Fatalf("%q: incomplete error %#v", expr, se)
			}
			return
		}
		if flt.String() != expr {
			t.Fatalf("String() = %q, want %q", flt.String(), expr)
		}
		for _, m := range msgs {
			flt.Match(m)
		}
	})
}
