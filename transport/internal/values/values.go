// Package values converts the elements of a list and the values of a map
// one by one, as both transports convert x-arguments and header values,
// naming the element or key a conversion refuses.
package values

import "fmt"

// List is in with f applied to every element; the error names the first
// element f refuses.
func List(in []any, f func(any) (any, error)) ([]any, error) {
	out := make([]any, len(in))
	for i, e := range in {
		n, err := f(e)
		if err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
		out[i] = n
	}
	return out, nil
}

// Map puts every value of in, with f applied, into out under its key and
// returns out; the error names, as what (a "key", a "queue argument"), the
// key whose value f refuses.
func Map[M ~map[string]any](out M, in map[string]any, what string, f func(any) (any, error)) (M, error) {
	for k, e := range in {
		n, err := f(e)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", what, k, err)
		}
		out[k] = n
	}
	return out, nil
}
