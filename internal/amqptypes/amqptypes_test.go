package amqptypes

import (
	"fmt"
	"reflect"
	"testing"

	amqp "github.com/Azure/go-amqp"
	"github.com/stretchr/testify/require"
)

// viaGoAMQP is v sent as an amqp-value and, for primitives, as an
// application property, through go-amqp's real encoder and decoder.
func viaGoAMQP(v any, inProperties bool) (value, property any, err error) {
	m := &amqp.Message{Value: v}
	if inProperties {
		m.ApplicationProperties = map[string]any{"k": v}
	}
	defer func() {
		if r := recover(); r != nil {
			err = &Refusal{"panic", r}
		}
	}()
	data, err := m.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	var got amqp.Message
	if err := got.UnmarshalBinary(data); err != nil {
		return nil, nil, err
	}
	return got.Value, got.ApplicationProperties["k"], nil
}

// TestTableAgainstGoAMQP runs every row through go-amqp's encoder: an
// accepted row encodes (as an amqp-value, as what a pointer to it points to
// and, for primitives, as an application property) and decodes to the row's
// Decoded, which is also what Copier makes of it; a refused row fails
// go-amqp's encoder and Check.
func TestTableAgainstGoAMQP(t *testing.T) {
	for _, row := range Table {
		t.Run(fmt.Sprintf("%T %s", row.Example, row.AMQP), func(t *testing.T) {
			require.Equal(t, row.Kind, Lookup(row.Example).Kind)
			primitive := row.Kind == Scalar || row.Kind == Binary
			value, prop, err := viaGoAMQP(row.Example, primitive)
			reason, _ := Check(row.Example, Wire, 0)
			c := &Copier{Rules: Wire}
			copied, cerr := c.Value(row.Example, 0)
			if row.Kind == Refused {
				require.Error(t, err, "go-amqp encodes it")
				require.NotEmpty(t, reason)
				require.Error(t, cerr)
				return
			}
			require.NoError(t, err)
			require.Empty(t, reason)
			require.NoError(t, cerr)
			require.Equal(t, row.Decoded, value)
			require.IsType(t, row.Decoded, value)
			require.Equal(t, row.Decoded, copied)
			require.Equal(t, row.Decoded, Clone(copied))
			if primitive {
				require.Equal(t, row.Decoded, prop)
				reason, _ := Check(row.Example, Rules{}, 0)
				require.Empty(t, reason)
			} else {
				reason, _ := Check(row.Example, Rules{MaxDepth: 1}, 0)
				require.NotEmpty(t, reason, "compound in application-properties")
			}

			if row.Example == nil {
				return
			}
			p := reflect.New(reflect.TypeOf(row.Example))
			p.Elem().Set(reflect.ValueOf(row.Example))
			ptr := p.Interface()
			require.Contains(t, []Kind{Pointer, Described}, Lookup(ptr).Kind)
			value, _, err = viaGoAMQP(ptr, false)
			require.NoError(t, err)
			require.Equal(t, row.Decoded, value)
			copied, err = (&Copier{Rules: Wire}).Value(ptr, 0)
			require.NoError(t, err)
			require.Equal(t, row.Decoded, copied)
		})
	}
}

// TestRefusedValuesAgainstGoAMQP: values of accepted types that go-amqp
// still refuses are refused by Check and Copier too.
func TestRefusedValuesAgainstGoAMQP(t *testing.T) {
	var nilInt *int
	n := 1
	pp := &n
	var nilAny any = new(any)
	cases := map[string]any{
		"string":         "\xff",
		"map key":        map[string]any{"\xff": 1},
		"list element":   []any{1, make(chan int)},
		"string array":   []string{"a", "\xff"},
		"map array":      []map[any]any{{1: struct{}{}}},
		"annotation key": amqp.Annotations{1.5: 1},
		"nil pointer":    nilInt,
		"**int":          &pp,
		"*any":           nilAny,
		"nil described":  (*amqp.Error)(nil),
	}
	for name, v := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := viaGoAMQP(v, false)
			require.Error(t, err, "go-amqp encodes it")
			reason, _ := Check(v, Wire, 0)
			require.NotEmpty(t, reason)
			_, err = (&Copier{Rules: Wire}).Value(v, 0)
			require.Error(t, err)
		})
	}
}

// TestTimeRange: go-amqp wraps a timestamp out of range; TimeRange refuses it.
func TestTimeRange(t *testing.T) {
	late := MaxTime.Add(1)
	reason, _ := Check(late, Wire, 0)
	require.Empty(t, reason)
	reason, _ = Check(late, Rules{TimeRange: true}, 0)
	require.NotEmpty(t, reason)
	reason, _ = Check(MaxTime, Rules{TimeRange: true}, 0)
	require.Empty(t, reason)
	reason, _ = Check([]any{MinTime.Add(-1)}, Rules{Compound: true, TimeRange: true, MaxDepth: 2}, 0)
	require.NotEmpty(t, reason)
}

// TestDepth: nesting beyond MaxDepth is refused, which stops a list that
// contains itself.
func TestDepth(t *testing.T) {
	self := []any{nil}
	self[0] = self
	reason, _ := Check(self, Wire, 0)
	require.Equal(t, reasonDepth, reason)
	_, err := (&Copier{Rules: Wire}).Value(self, 0)
	require.Error(t, err)
}
