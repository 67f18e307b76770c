package jsonschema_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amqpactor/amqpactor/internal/jsonschema"
)

type Base struct {
	ID      string `json:"id"`
	Comment string `json:"comment,omitempty"`
}

type Tree struct {
	Base
	Name     string            `json:"name"`
	Count    int64             `json:"count,string"`
	Small    int8              `json:"small"`
	Ratio    float64           `json:"ratio"`
	OK       bool              `json:"ok"`
	Raw      []byte            `json:"raw"`
	At       time.Time         `json:"at"`
	Maybe    *time.Duration    `json:"maybe"`
	Labels   map[string]string `json:"labels,omitempty"`
	Children []*Tree           `json:"children"`
	Pair     [2]uint16         `json:"pair"`
	Any      any               `json:"any"`
	Msg      json.RawMessage   `json:"msg"`
	Skipped  string            `json:"-"`
	NoTag    string
	hidden   string
}

func TestSchemaOfAStruct(t *testing.T) {
	g := jsonschema.New("#/defs/")
	s := g.Schema(reflect.TypeFor[*Tree]())
	require.Equal(t, "#/defs/Tree", s.Ref)
	defs := g.Definitions()
	tree := defs["Tree"]
	require.NotNil(t, tree)
	require.Equal(t, "object", tree.Type)

	props := tree.Properties
	require.ElementsMatch(t, []string{"id", "comment", "name", "count", "small", "ratio", "ok", "raw", "at",
		"maybe", "labels", "children", "pair", "any", "msg", "NoTag"}, keys(props))
	require.Equal(t, "string", props["id"].Type, "embedded fields are flattened")
	require.Equal(t, "string", props["count"].Type, ",string quotes the number")
	require.Equal(t, "integer", props["small"].Type)
	require.Equal(t, -128.0, *props["small"].Minimum)
	require.Equal(t, 127.0, *props["small"].Maximum)
	require.Equal(t, "number", props["ratio"].Type)
	require.Equal(t, "boolean", props["ok"].Type)
	require.Equal(t, &jsonschema.Schema{Type: "string", ContentEncoding: "base64"}, props["raw"])
	require.Equal(t, &jsonschema.Schema{Type: "string", Format: "date-time"}, props["at"])
	require.Equal(t, "integer", props["maybe"].Type, "a pointer is its element")
	require.Equal(t, "object", props["labels"].Type)
	require.Equal(t, "string", props["labels"].AdditionalProperties.Type)
	require.Equal(t, "array", props["children"].Type)
	require.Equal(t, "#/defs/Tree", props["children"].Items.Ref, "a recursive type refers to itself")
	require.Equal(t, 2, *props["pair"].MinItems)
	require.Equal(t, 2, *props["pair"].MaxItems)
	require.Equal(t, &jsonschema.Schema{}, props["any"])
	require.Equal(t, &jsonschema.Schema{}, props["msg"])

	require.ElementsMatch(t, []string{"id", "name", "count", "small", "ratio", "ok", "raw", "at", "children",
		"pair", "any", "msg", "NoTag"}, tree.Required, "omitempty and pointers are optional")

	_, err := json.Marshal(defs)
	require.NoError(t, err)
}

func TestSchemaOfBasicTypes(t *testing.T) {
	g := jsonschema.New("#/defs/")
	require.Equal(t, "string", g.Schema(reflect.TypeFor[string]()).Type)
	require.Equal(t, "array", g.Schema(reflect.TypeFor[[]int]()).Type)
	u := g.Schema(reflect.TypeFor[uint64]())
	require.Equal(t, 0.0, *u.Minimum)
	require.Nil(t, u.Maximum)
	require.Equal(t, &jsonschema.Schema{}, g.Schema(reflect.TypeFor[chan int]()))
	require.Empty(t, g.Definitions())
	anon := g.Schema(reflect.TypeFor[struct {
		A int `json:"a"`
	}]())
	require.Equal(t, "object", anon.Type, "an anonymous struct is written in place")
	require.Equal(t, []string{"a"}, anon.Required)
}

type (
	Left  struct{ X int }
	Right struct{ X int }
	// Both embeds two structs with a field X at the same depth: encoding/json
	// drops X, and so does the schema.
	Both struct {
		Left
		Right
		Y int
	}
	TaggedX struct {
		X string `json:"X"`
	}
	// Tagged embeds an untagged and a tagged X at the same depth: the
	// tagged one wins.
	Tagged struct {
		Left
		TaggedX
	}
)

func TestEmbeddingFollowsEncodingJSON(t *testing.T) {
	g := jsonschema.New("#/defs/")
	g.Schema(reflect.TypeFor[Both]())
	require.Equal(t, []string{"Y"}, keys(g.Definitions()["Both"].Properties))
	b, err := json.Marshal(Both{Y: 1})
	require.NoError(t, err)
	require.JSONEq(t, `{"Y":1}`, string(b))

	g.Schema(reflect.TypeFor[Tagged]())
	require.Equal(t, []string{"X"}, keys(g.Definitions()["Tagged"].Properties))
	require.Equal(t, "string", g.Definitions()["Tagged"].Properties["X"].Type)
	b, err = json.Marshal(Tagged{Left{1}, TaggedX{"x"}})
	require.NoError(t, err)
	require.JSONEq(t, `{"X":"x"}`, string(b))
}

type textID [4]byte

func (id textID) MarshalText() ([]byte, error) { return []byte("id"), nil }

func TestTextMarshalerIsAString(t *testing.T) {
	g := jsonschema.New("#/defs/")
	require.Equal(t, "string", g.Schema(reflect.TypeFor[textID]()).Type)
}

func TestNamesAreUniqueAndSafe(t *testing.T) {
	type Order struct{ A int }
	g := jsonschema.New("#/defs/")
	g.Schema(reflect.TypeFor[Order]())
	g.Schema(reflect.TypeFor[outerOrder]())
	require.Equal(t, "Order", g.NameOf(reflect.TypeFor[Order]()))
	require.Equal(t, "Order_2", g.NameOf(reflect.TypeFor[outerOrder]()), "a second type called Order")
	require.Equal(t, "#/defs/Order_2", g.Schema(reflect.TypeFor[outerOrder]()).Ref)
	require.Equal(t, "Page_github.com_amqpactor_amqpactor_internal_jsonschema_test.Base",
		g.NameOf(reflect.TypeFor[Page[Base]]()))
}

// Order shares its name with the Order declared inside the test.
type Order struct{ B int }

type outerOrder = Order

type Page[T any] struct{ Items []T }

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
