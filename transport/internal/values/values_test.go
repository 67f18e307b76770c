package values

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func double(v any) (any, error) {
	n, ok := v.(int)
	if !ok {
		return nil, errors.New("not an int")
	}
	return 2 * n, nil
}

func TestList(t *testing.T) {
	out, err := List([]any{1, 2}, double)
	require.NoError(t, err)
	require.Equal(t, []any{2, 4}, out)
	_, err = List([]any{1, "x"}, double)
	require.EqualError(t, err, "element 1: not an int")
}

func TestMap(t *testing.T) {
	type table map[string]any
	out, err := Map(table{}, map[string]any{"a": 1}, "key", double)
	require.NoError(t, err)
	require.Equal(t, table{"a": 2}, out)
	_, err = Map(table{}, map[string]any{"b": "x"}, "queue argument", double)
	require.EqualError(t, err, `queue argument "b": not an int`)
}
