// Command docrefs fails when README.md or a page of docs/ names something
// the module does not have: a file (`path/to/x.go`, `x.go:NN` with NN past
// the file's end) or, in backticks, a Go identifier spelt `pkg.Name`,
// `Type.Member` or `pkg.Type.Member`. It reads the module's Go files with
// go/parser alone, so it needs nothing built. What it cannot resolve
// unambiguously (another module's `amqp.Error` or `actor.PID`, a standard
// library package such as `sync.Map`, a type whose members may come from an
// embedded one) it leaves alone: a check that cries wolf is soon ignored.
//
// It is a module of its own, so that the library's go.mod does not carry
// what only it and its tests use. Usage, from the repository root (make
// check runs it):
//
//	go -C tools/docrefs run . -root ../.. [FILE.md ...]
//
// Without files it reads README.md and docs/*.md under the root.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

func main() {
	root := flag.String("root", ".", "the module root")
	flag.Parse()
	files := flag.Args()
	if len(files) == 0 {
		files = append(files, "README.md")
		pages, _ := filepath.Glob(filepath.Join(*root, "docs", "*.md"))
		sort.Strings(pages)
		for _, p := range pages {
			rel, err := filepath.Rel(*root, p)
			if err != nil {
				rel = p
			}
			files = append(files, rel)
		}
	}
	mod, err := Load(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docrefs:", err)
		os.Exit(2)
	}
	bad := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(*root, f))
		if err != nil {
			fmt.Fprintln(os.Stderr, "docrefs:", err)
			os.Exit(2)
		}
		for _, p := range mod.Check(Refs(string(text))) {
			fmt.Printf("%s:%d: %s\n", f, p.Line, p.Msg)
			bad++
		}
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "docrefs: %d reference(s) to what the module does not have\n", bad)
		os.Exit(1)
	}
}
