package main

import (
	"regexp"
	"strconv"
	"strings"
)

// Ref is one reference a document makes.
type Ref struct {
	Line int    // in the document, from 1
	File string // a file's path as written ("amqpwire/guard.go"), or ""
	At   int    // the line of File it names (x.go:NN), 0 when none
	// Ident is a Go identifier as written in backticks, split at its dots
	// ("amqpwire", "Management", "Request"), without a leading * or & and
	// a trailing "()".
	Ident []string
}

var (
	// A URL's path is another site's, never a file here.
	urlRE = regexp.MustCompile(`[a-z][a-z0-9+.-]*://\S+`)
	// A file of the kinds the docs name, with an optional :line; what
	// precedes it may not continue a path or a word.
	fileRE   = regexp.MustCompile(`(^|[^A-Za-z0-9_./$~-])((?:\./)?(?:[A-Za-z0-9_-][A-Za-z0-9_.-]*/)*[A-Za-z0-9_-][A-Za-z0-9_.-]*\.(?:go|sh|md))(?::([0-9]+))?`)
	spanRE   = regexp.MustCompile("`([^`\n]+)`")
	identRE  = regexp.MustCompile(`^[*&]?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*){1,2})(?:\(\))?$`)
	fileKind = regexp.MustCompile(`\.(go|sh|md|html|json|yaml|yml|txt|js|py|mod|sum)$`)
)

// Refs finds the references of a Markdown text: file names anywhere but in
// URLs, identifiers in backticks outside fenced code blocks (a command's
// flags and a program's output are not prose about the code).
func Refs(text string) []Ref {
	var refs []Ref
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		n := i + 1
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		plain := urlRE.ReplaceAllStringFunc(line, func(s string) string { return strings.Repeat(" ", len(s)) })
		for _, m := range fileRE.FindAllStringSubmatch(plain, -1) {
			r := Ref{Line: n, File: strings.TrimPrefix(m[2], "./")}
			if m[3] != "" {
				r.At, _ = strconv.Atoi(m[3])
			}
			refs = append(refs, r)
		}
		if fenced {
			continue
		}
		for _, m := range spanRE.FindAllStringSubmatch(line, -1) {
			id := identRE.FindStringSubmatch(strings.TrimSpace(m[1]))
			if id == nil || fileKind.MatchString(id[1]) {
				continue
			}
			refs = append(refs, Ref{Line: n, Ident: strings.Split(id[1], ".")})
		}
	}
	return refs
}
