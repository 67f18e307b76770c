package address

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckStreamFilter(t *testing.T) {
	st := Stream("audit")
	ok := []StreamFilter{
		{},
		{Values: []string{"eu"}},
		{Headers: map[string]string{"kind": "order"}, Properties: map[string]string{"subject": "a", "user-id": "u"}},
		{Values: []string{"eu"}, SQL: "kind = 'order' AND p.subject LIKE 'o%'"},
	}
	for _, f := range ok {
		require.NoError(t, CheckStreamFilter(st, f), "%+v", f)
	}
	require.NoError(t, CheckStreamFilter(Queue("q"), StreamFilter{}), "no filter on a queue")

	many := map[string]string{}
	for i := range MaxStreamFilterFields + 1 {
		many[fmt.Sprint("h", i)] = "v"
	}
	for _, c := range []struct {
		a    Address
		f    StreamFilter
		want string
	}{
		{Queue("q"), StreamFilter{Values: []string{"eu"}}, "Stream address only"},
		{Queue("q"), StreamFilter{SQL: "a = 1"}, "Stream address only"},
		{st, StreamFilter{Values: []string{""}}, "empty stream filter value"},
		{st, StreamFilter{Headers: map[string]string{"": "x"}}, "empty name"},
		{st, StreamFilter{Headers: map[string]string{"k": "&p:x"}}, "may not begin with '&'"},
		{st, StreamFilter{Properties: map[string]string{"subject": "&s:x"}}, "may not begin with '&'"},
		{st, StreamFilter{Properties: map[string]string{"creation-time": "1"}}, `"creation-time": not a field`},
		{st, StreamFilter{Properties: map[string]string{"Subject": "x"}}, "not a field"},
		{st, StreamFilter{Headers: many}, "at most 16"},
		{st, StreamFilter{SQL: "kind = 'a'", Headers: map[string]string{"k": "v"}}, "not both"},
		{st, StreamFilter{SQL: "kind = 'a'", Properties: map[string]string{"subject": "v"}}, "not both"},
		{st, StreamFilter{SQL: "kind = 'a' and x = 1"}, "SQL filter"},
		{st, StreamFilter{SQL: "(kind = 'a'"}, "SQL filter"},
	} {
		err := CheckStreamFilter(c.a, c.f)
		require.ErrorContains(t, err, c.want, "%+v", c.f)
		require.ErrorContains(t, err, c.a.String(), "the error names the address")
		var ae *Error
		require.ErrorAs(t, err, &ae)
	}
}
