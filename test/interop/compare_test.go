package interop

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/amqpactor/amqpactor"
)

// same reports whether got is exactly want: the same Go types all the way
// down (an int32 is not an int64, nil is not an empty slice), times by
// instant (time.Time.Equal; the zone is not part of the value).
// sameMap reports whether w and g hold the same keys with the same values
// (as same sees them), nil apart from empty.
func sameMap[K comparable](w, g map[K]any) bool {
	if (w == nil) != (g == nil) || len(w) != len(g) {
		return false
	}
	for k, v := range w {
		gv, ok := g[k]
		if !ok || !same(v, gv) {
			return false
		}
	}
	return true
}

func same(want, got any) bool {
	switch w := want.(type) {
	case time.Time:
		g, ok := got.(time.Time)
		return ok && w.Equal(g)
	case map[string]any:
		g, ok := got.(map[string]any)
		return ok && sameMap(w, g)
	case map[any]any:
		g, ok := got.(map[any]any)
		return ok && sameMap(w, g)
	case []any:
		g, ok := got.([]any)
		if !ok || (w == nil) != (g == nil) || len(w) != len(g) {
			return false
		}
		for i := range w {
			if !same(w[i], g[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(want, got)
}

// diffMessage lists every field of got that is not exactly as in want.
func diffMessage(want, got *amqpactor.Message) []string {
	var out []string
	wv, gv := reflect.ValueOf(want).Elem(), reflect.ValueOf(got).Elem()
	for i := range wv.NumField() {
		f := wv.Type().Field(i)
		w, g := wv.Field(i).Interface(), gv.Field(i).Interface()
		switch f.Name {
		case "Headers", "Annotations", "DeliveryAnnotations", "Footer":
			wm, gm := w.(map[string]any), g.(map[string]any)
			if (wm == nil) != (gm == nil) {
				out = append(out, fmt.Sprintf("%s: got %s, want %s", f.Name, show(g), show(w)))
				continue
			}
			for k, v := range wm {
				if gv, ok := gm[k]; !ok {
					out = append(out, fmt.Sprintf("%s[%q]: missing, want %s", f.Name, k, show(v)))
				} else if !same(v, gv) {
					out = append(out, fmt.Sprintf("%s[%q]: got %s, want %s", f.Name, k, show(gv), show(v)))
				}
			}
			for k, v := range gm {
				if _, ok := wm[k]; !ok {
					out = append(out, fmt.Sprintf("%s[%q]: unexpected %s", f.Name, k, show(v)))
				}
			}
		default:
			if !same(w, g) {
				out = append(out, fmt.Sprintf("%s: got %s, want %s", f.Name, show(g), show(w)))
			}
		}
	}
	return out
}

// show renders a value with its Go type.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case time.Time:
		return fmt.Sprintf("time.Time(%s)", x.UTC().Format(time.RFC3339Nano))
	case []byte:
		if x == nil {
			return "[]byte(nil)"
		}
		return fmt.Sprintf("[]byte(%q)", x)
	case map[string]any:
		parts := make([]string, 0, len(x))
		for k, e := range x {
			parts = append(parts, fmt.Sprintf("%q: %s", k, show(e)))
		}
		return "map[string]any{" + strings.Join(parts, ", ") + "}"
	case map[any]any:
		parts := make([]string, 0, len(x))
		for k, e := range x {
			parts = append(parts, fmt.Sprintf("%s: %s", show(k), show(e)))
		}
		return "map[any]any{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			parts = append(parts, show(e))
		}
		return "[]any{" + strings.Join(parts, ", ") + "}"
	}
	return fmt.Sprintf("%T(%#v)", v, v)
}
