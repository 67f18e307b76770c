package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Module is what docrefs knows of a module: its files, and the Go names
// each of its packages and types declares.
type Module struct {
	root  string
	files []string // slash-separated, relative to root
	// pkgs holds the top-level names of each package name (a "_test"
	// package's with its package's: a document may name a test's helper).
	pkgs map[string][]*pkg
	// types holds each type name's declarations, in whatever package.
	types map[string][]*typ
}

type pkg struct {
	dir   string
	names map[string]bool
	types map[string]*typ
}

type typ struct {
	members map[string]bool // fields, methods, embedded types
	// open: members may come from elsewhere (an embedded type, an alias, a
	// definition on another type), so a name not in members proves nothing.
	open bool
}

// Problem is one reference that names nothing in the module.
type Problem struct {
	Line int
	Msg  string
}

// skipDir is a folder whose files are not the module's code or docs.
func skipDir(name string) bool {
	return name != "." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata" || name == "vendor")
}

// Load reads every file name under root and every Go file's declarations.
func Load(root string) (*Module, error) {
	m := &Module{root: root, pkgs: map[string][]*pkg{}, types: map[string][]*typ{}}
	byDir := map[string]*pkg{} // per folder and package name
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && skipDir(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		m.files = append(m.files, rel)
		if !strings.HasSuffix(rel, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil // not ours to judge; go vet is
		}
		name := strings.TrimSuffix(f.Name.Name, "_test")
		if name == "main" {
			return nil
		}
		key := path.Dir(rel) + " " + name
		pk := byDir[key]
		if pk == nil {
			pk = &pkg{dir: path.Dir(rel), names: map[string]bool{}, types: map[string]*typ{}}
			byDir[key] = pk
			m.pkgs[name] = append(m.pkgs[name], pk)
		}
		m.declare(pk, f)
		return nil
	})
	return m, err
}

func (m *Module) typeOf(pk *pkg, name string) *typ {
	t := pk.types[name]
	if t == nil {
		t = &typ{members: map[string]bool{}}
		pk.types[name] = t
		m.types[name] = append(m.types[name], t)
	}
	return t
}

func (m *Module) declare(pk *pkg, f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil || len(d.Recv.List) == 0 {
				pk.names[d.Name.Name] = true
				continue
			}
			if r := recvName(d.Recv.List[0].Type); r != "" {
				m.typeOf(pk, r).members[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						pk.names[n.Name] = true
					}
				case *ast.TypeSpec:
					pk.names[s.Name.Name] = true
					t := m.typeOf(pk, s.Name.Name)
					if s.Assign.IsValid() {
						t.open = true
					}
					members(t, s.Type)
				}
			}
		}
	}
}

// members notes the fields and methods a type's definition declares.
func members(t *typ, e ast.Expr) {
	var list *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		list = e.Fields
	case *ast.InterfaceType:
		list = e.Methods
	default:
		t.open = true // defined on another type: its fields are this one's
		return
	}
	for _, f := range list.List {
		if len(f.Names) == 0 {
			t.open = true
			if n := recvName(f.Type); n != "" {
				t.members[n] = true
			}
		}
		for _, n := range f.Names {
			t.members[n.Name] = true
		}
	}
}

// recvName is the type name of a receiver or an embedded field: T, *T,
// T[P], pkg.T.
func recvName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.SelectorExpr:
			return x.Sel.Name
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// Check returns the refs that name nothing in the module.
func (m *Module) Check(refs []Ref) []Problem {
	var out []Problem
	for _, r := range refs {
		var msg string
		if r.File != "" {
			msg = m.checkFile(r)
		} else {
			msg = m.checkIdent(r.Ident)
		}
		if msg != "" {
			out = append(out, Problem{Line: r.Line, Msg: msg})
		}
	}
	return out
}

func (m *Module) checkFile(r Ref) string {
	var found []string
	for _, f := range m.files {
		if f == r.File || strings.HasSuffix(f, "/"+r.File) {
			found = append(found, f)
		}
	}
	switch {
	case len(found) == 0:
		return fmt.Sprintf("%s: no such file in the module", r.File)
	case r.At == 0 || len(found) > 1:
		return "" // which of them is meant is not for this check to guess
	}
	b, err := os.ReadFile(filepath.Join(m.root, found[0]))
	if err != nil {
		return fmt.Sprintf("%s: %v", r.File, err)
	}
	lines := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		lines++
	}
	if r.At > lines {
		return fmt.Sprintf("%s:%d: %s has %d lines", r.File, r.At, found[0], lines)
	}
	return ""
}

func (m *Module) checkIdent(id []string) string {
	a, b := id[0], id[1]
	pkgs := m.pkgs[a]
	if stdPackages[a] || !token.IsExported(b) {
		// sync.Map, url.URL: never ours to judge; and no other package
		// can name pkg.lower, so amqpactor.published is a metric's name.
		pkgs = nil
	}
	types := m.types[a]
	if len(pkgs) == 0 && len(types) == 0 {
		return "" // another module's, or a variable
	}
	spelt := strings.Join(id, ".")
	if len(id) == 3 {
		if len(pkgs) == 0 {
			return "" // a field of a field: not followed
		}
		c := id[2]
		declared := false
		for _, p := range pkgs {
			if t := p.types[b]; t != nil {
				if t.open || t.members[c] {
					return ""
				}
				declared = true
			} else if p.names[b] {
				return "" // a variable's member: its type is not followed
			}
		}
		if declared {
			return fmt.Sprintf("`%s`: type %s.%s has no %s", spelt, a, b, c)
		}
		return fmt.Sprintf("`%s`: package %s has no %s", spelt, a, b)
	}
	for _, p := range pkgs {
		if p.names[b] {
			return ""
		}
	}
	for _, t := range types {
		if t.open || t.members[b] {
			return ""
		}
	}
	switch {
	case len(pkgs) > 0 && len(types) > 0:
		return fmt.Sprintf("`%s`: neither package %s nor type %s has %s", spelt, a, a, b)
	case len(pkgs) > 0:
		return fmt.Sprintf("`%s`: package %s has no %s", spelt, a, b)
	}
	return fmt.Sprintf("`%s`: type %s has no %s", spelt, a, b)
}
