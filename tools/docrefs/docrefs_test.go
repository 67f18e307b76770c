package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRefs(t *testing.T) {
	refs := Refs("a `pkg.T.M()` and `*x.Y` in pkg/a.go:12, see https://h/x.go\n" +
		"```\n`in.Fence` b.go\n```\n`not an ident` c.sh `d.go`")
	require.Equal(t, []Ref{
		{Line: 1, File: "pkg/a.go", At: 12},
		{Line: 1, Ident: []string{"pkg", "T", "M"}},
		{Line: 1, Ident: []string{"x", "Y"}},
		{Line: 3, File: "b.go"},
		{Line: 5, File: "c.sh"},
		{Line: 5, File: "d.go"},
	}, refs, "files anywhere but in URLs, identifiers outside fences, a file in backticks not an identifier")
}

// TestCheckFixture: what the fixture names wrongly is found, file names
// first on each line; what it names rightly, or cannot judge (the standard
// library, another module, a type with an embedded one, a lowercase package
// member), is not.
func TestCheckFixture(t *testing.T) {
	root := filepath.Join("testdata", "mod")
	m, err := Load(root)
	require.NoError(t, err)
	text, err := os.ReadFile(filepath.Join(root, "docs", "page.md"))
	require.NoError(t, err)
	require.Equal(t, []Problem{
		{Line: 7, Msg: "missing.go: no such file in the module"},
		{Line: 7, Msg: "pkg/pkg.go:99: pkg/pkg.go has 21 lines"},
		{Line: 7, Msg: "`pkg.Gone`: package pkg has no Gone"},
		{Line: 7, Msg: "`pkg.T.Gone`: type pkg.T has no Gone"},
		{Line: 7, Msg: "`T.Gone`: type T has no Gone"},
		{Line: 7, Msg: "`pkg.Nope.X`: package pkg has no Nope"},
		{Line: 10, Msg: "cmd/gone.go: no such file in the module"},
	}, m.Check(Refs(string(text))))
}
