// Package jsonschema derives a JSON Schema (draft-07, the dialect AsyncAPI
// 3.0 schemas extend) from a Go type by reflection, following the rules of
// encoding/json: exported struct fields under their json tag names, omitempty
// and pointer fields not required, "-" skipped, the ",string" option as a
// string, embedded structs flattened, []byte as base64 text, time.Time as a
// date-time string, maps as objects, slices and arrays as arrays.
//
// Named struct types become definitions referenced with $ref, so recursive
// types terminate and a type used twice is described once. A type whose JSON
// form encoding/json cannot know from its shape (a json.Marshaler or
// encoding.TextMarshaler other than time.Time, an interface) is described by
// the empty schema: any value.
package jsonschema

import (
	"encoding"
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Schema is one JSON Schema. Only the keywords the generator writes exist.
type Schema struct {
	Ref                  string             `json:"$ref,omitempty"`
	Title                string             `json:"title,omitempty"`
	Description          string             `json:"description,omitempty"`
	Type                 string             `json:"type,omitempty"`
	Format               string             `json:"format,omitempty"`
	ContentEncoding      string             `json:"contentEncoding,omitempty"`
	Minimum              *float64           `json:"minimum,omitempty"`
	Maximum              *float64           `json:"maximum,omitempty"`
	Properties           map[string]*Schema `json:"properties,omitempty"`
	Required             []string           `json:"required,omitempty"`
	AdditionalProperties *Schema            `json:"additionalProperties,omitempty"`
	Items                *Schema            `json:"items,omitempty"`
	MinItems             *int               `json:"minItems,omitempty"`
	MaxItems             *int               `json:"maxItems,omitempty"`
}

// Generator describes types, collecting the definitions of named structs.
// The zero value is not ready: use New.
type Generator struct {
	// refPrefix is put before a definition's name in a $ref, e.g.
	// "#/components/schemas/".
	refPrefix string
	defs      map[string]*Schema
	names     map[reflect.Type]string
	taken     map[string]reflect.Type
}

// New returns a Generator whose references read refPrefix + name.
func New(refPrefix string) *Generator {
	return &Generator{refPrefix: refPrefix, defs: map[string]*Schema{},
		names: map[reflect.Type]string{}, taken: map[string]reflect.Type{}}
}

// Definitions returns the named schemas collected so far, by name.
func (g *Generator) Definitions() map[string]*Schema { return g.defs }

// NameOf returns the definition name the generator gives t (or would give
// it): the type's name, made safe for a JSON pointer and an AsyncAPI
// component key, and made unique across packages.
func (g *Generator) NameOf(t reflect.Type) string {
	if n, ok := g.names[t]; ok {
		return n
	}
	base := safeName(t.Name())
	if base == "" {
		base = "Anonymous"
	}
	n := base
	for i := 2; ; i++ {
		if other, ok := g.taken[n]; !ok || other == t {
			break
		}
		n = base + "_" + strconv.Itoa(i)
	}
	g.names[t] = n
	g.taken[n] = t
	return n
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func safeName(s string) string {
	return strings.Trim(unsafeChars.ReplaceAllString(s, "_"), "_")
}

var (
	timeType          = reflect.TypeFor[time.Time]()
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshaler     = reflect.TypeFor[encoding.TextMarshaler]()
	byteSliceElemKind = reflect.Uint8
)

// Schema describes t. A named struct is added to the definitions and
// returned as a reference.
func (g *Generator) Schema(t reflect.Type) *Schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == timeType:
		return &Schema{Type: "string", Format: "date-time"}
	case t == rawMessageType:
		return &Schema{}
	case t.Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler):
		return &Schema{}
	case t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler):
		return &Schema{Type: "string"}
	}
	switch t.Kind() {
	case reflect.Bool:
		return &Schema{Type: "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return intSchema(t)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return intSchema(t)
	case reflect.Float32, reflect.Float64:
		return &Schema{Type: "number"}
	case reflect.String:
		return &Schema{Type: "string"}
	case reflect.Slice:
		if t.Elem().Kind() == byteSliceElemKind && !implementsAny(t.Elem()) {
			return &Schema{Type: "string", ContentEncoding: "base64"}
		}
		return &Schema{Type: "array", Items: g.Schema(t.Elem())}
	case reflect.Array:
		n := t.Len()
		if t.Elem().Kind() == byteSliceElemKind && !implementsAny(t.Elem()) {
			// encoding/json writes a byte array as an array of numbers.
			return &Schema{Type: "array", Items: intSchema(t.Elem()), MinItems: &n, MaxItems: &n}
		}
		return &Schema{Type: "array", Items: g.Schema(t.Elem()), MinItems: &n, MaxItems: &n}
	case reflect.Map:
		return &Schema{Type: "object", AdditionalProperties: g.Schema(t.Elem())}
	case reflect.Struct:
		if t.Name() == "" {
			return g.structSchema(t)
		}
		name := g.NameOf(t)
		if _, ok := g.defs[name]; !ok {
			g.defs[name] = &Schema{} // placeholder: a recursive reference ends here
			s := g.structSchema(t)
			s.Title = t.Name()
			g.defs[name] = s
		}
		return &Schema{Ref: g.refPrefix + name}
	}
	// Interfaces hold anything; channels and funcs are not encodable, so
	// nothing better can be said of them.
	return &Schema{}
}

func implementsAny(t reflect.Type) bool {
	return t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler)
}

func intSchema(t reflect.Type) *Schema {
	s := &Schema{Type: "integer"}
	bits := t.Bits()
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		lo := 0.0
		s.Minimum = &lo
		if bits < 64 {
			hi := float64(uint64(1)<<bits - 1)
			s.Maximum = &hi
		}
	default:
		if bits < 64 {
			lo, hi := -float64(int64(1)<<(bits-1)), float64(int64(1)<<(bits-1)-1)
			s.Minimum, s.Maximum = &lo, &hi
		}
	}
	return s
}

// field is one JSON member of a struct, after embedding is resolved.
type field struct {
	name     string
	index    []int
	typ      reflect.Type
	tagged   bool
	optional bool
	quoted   bool
}

func (g *Generator) structSchema(t reflect.Type) *Schema {
	s := &Schema{Type: "object", Properties: map[string]*Schema{}}
	for _, f := range fields(t) {
		var fs *Schema
		if f.quoted {
			fs = &Schema{Type: "string"}
		} else {
			fs = g.Schema(f.typ)
		}
		s.Properties[f.name] = fs
		if !f.optional {
			s.Required = append(s.Required, f.name)
		}
	}
	return s
}

// fields lists the JSON members of struct t the way encoding/json picks
// them: breadth first through embedded structs, the shallowest field of a
// name winning, a tagged field winning over an untagged one at the same
// depth, and names left ambiguous dropped.
func fields(t reflect.Type) []field {
	type level struct {
		t     reflect.Type
		index []int
	}
	var current []level
	next := []level{{t: t}}
	visited := map[reflect.Type]bool{}
	var out []field
	seen := map[string]int{} // name -> depth at which it was found
	for depth := 0; len(next) > 0; depth++ {
		current, next = next, nil
		byName := map[string][]field{}
		var order []string
		for _, l := range current {
			if visited[l.t] {
				continue
			}
			visited[l.t] = true
			for i := 0; i < l.t.NumField(); i++ {
				sf := l.t.Field(i)
				if sf.Anonymous {
					ft := sf.Type
					if ft.Kind() == reflect.Pointer {
						ft = ft.Elem()
					}
					if !sf.IsExported() && ft.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				index := append(append([]int(nil), l.index...), i)
				ft := sf.Type
				if name == "" && sf.Anonymous {
					et := ft
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if et.Kind() == reflect.Struct {
						next = append(next, level{t: et, index: index})
						continue
					}
				}
				tagged := name != ""
				if name == "" {
					name = sf.Name
				}
				f := field{name: name, index: index, typ: ft, tagged: tagged,
					optional: hasOpt(opts, "omitempty") || hasOpt(opts, "omitzero") || ft.Kind() == reflect.Pointer,
					quoted:   hasOpt(opts, "string") && quotable(ft)}
				if _, ok := byName[name]; !ok {
					order = append(order, name)
				}
				byName[name] = append(byName[name], f)
			}
		}
		for _, name := range order {
			if _, ok := seen[name]; ok {
				continue // a shallower field of this name wins
			}
			seen[name] = depth
			fs := byName[name]
			if len(fs) > 1 {
				var tagged []field
				for _, f := range fs {
					if f.tagged {
						tagged = append(tagged, f)
					}
				}
				if len(tagged) != 1 {
					continue // ambiguous: encoding/json drops it
				}
				fs = tagged
			}
			out = append(out, fs[0])
		}
	}
	return out
}

func hasOpt(opts, want string) bool {
	for opts != "" {
		var o string
		o, opts, _ = strings.Cut(opts, ",")
		if o == want {
			return true
		}
	}
	return false
}

// quotable reports whether the ",string" option applies to t.
func quotable(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.String:
		return true
	}
	return false
}
