package topology

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/doccheck"
)

// source is what the package's non-test files say of paths: every string
// literal's "/"-separated parts, the literal arguments of the SysPath and
// ProcPath calls (the directories under each root it reads from), and the
// string literals of the functions that read (read*, snapshot), but those
// in error messages.
type source struct {
	parts         map[string]bool
	sys, proc     []string
	readLiterals  []string
	readLiteralAt map[string]string
}

func readSource(t *testing.T) source {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	src := source{parts: map[string]bool{}, readLiteralAt: map[string]string{}}
	fset := token.NewFileSet()
	str := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if s, ok := str(asExpr(n)); ok {
				for _, p := range strings.Split(s, "/") {
					src.parts[p] = true
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && (sel.Sel.Name == "SysPath" || sel.Sel.Name == "ProcPath") {
				for _, a := range call.Args {
					s, ok := str(a)
					if !ok {
						t.Errorf("%s: %s with an argument that is not a string literal: the test cannot check it against the doc", fset.Position(a.Pos()), sel.Sel.Name)
						continue
					}
					if sel.Sel.Name == "SysPath" {
						src.sys = append(src.sys, s)
					} else {
						src.proc = append(src.proc, s)
					}
				}
			}
			return true
		})
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || !(strings.HasPrefix(fn.Name.Name, "read") || fn.Name.Name == "snapshot") {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					switch name := callName(call); name {
					case "parseError", "New", "Errorf", "SysPath", "ProcPath":
						return false // messages, and the roots' directories
					}
				}
				if s, ok := str(asExpr(n)); ok && s != "" {
					src.readLiterals = append(src.readLiterals, s)
					src.readLiteralAt[s] = fset.Position(n.Pos()).String()
				}
				return true
			})
		}
	}
	if len(src.sys) == 0 || len(src.proc) == 0 || len(src.readLiterals) == 0 {
		t.Fatalf("found no paths in the source: %+v", src)
	}
	return src
}

func asExpr(n ast.Node) ast.Expr {
	e, _ := n.(ast.Expr)
	return e
}

func callName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

// placeholder is a part of a documented path the kernel numbers or sizes:
// cpuN, nodeN, memoryN, hugepages-<size>kB.
var placeholder = regexp.MustCompile(`N$|<[a-z]+>`)

// TestDocListsTheFilesRead: the files the package doc lists under the
// sysfs and the procfs root are the ones the code reads. Each documented
// path lies under a directory the code opens under that root (SysPath,
// ProcPath), and every other part of it, its placeholders (cpuN,
// hugepages-<size>kB) cut out, is in a string literal of the code; each
// directory the code opens under a root is documented under it; and every
// string literal of the reading functions (a file name such as
// "block_size_bytes", "/nr_hugepages") is a part of a documented path.
func TestDocListsTheFilesRead(t *testing.T) {
	doc, err := doccheck.PackageDoc(".")
	if err != nil {
		t.Fatal(err)
	}
	src := readSource(t)
	documentedParts := map[string]bool{}
	for _, root := range []struct {
		phrase string
		dirs   []string
	}{
		{"configurable sysfs root", src.sys},
		{"configurable procfs root", src.proc},
	} {
		lines, err := doccheck.CodeAfter(doc, root.phrase)
		if err != nil {
			t.Fatalf("package doc: %v", err)
		}
		var paths []string
		for _, l := range lines {
			paths = append(paths, doccheck.Expand(strings.TrimSpace(l))...)
		}
		for _, p := range paths {
			i := slices.IndexFunc(root.dirs, func(d string) bool { return p == d || strings.HasPrefix(p, d+"/") })
			if i < 0 {
				t.Errorf("the doc lists %s under the %s, under no directory the code reads there (%q)", p, root.phrase, root.dirs)
				continue
			}
			for _, part := range strings.Split(strings.TrimPrefix(p, root.dirs[i]), "/") {
				for _, frag := range placeholder.Split(part, -1) {
					if frag == "" {
						continue
					}
					documentedParts[frag] = true
					if !src.parts[frag] {
						t.Errorf("the doc lists %s under the %s: the code has no %q", p, root.phrase, frag)
					}
				}
			}
			for _, part := range strings.Split(p, "/") {
				documentedParts[part] = true
				documentedParts[placeholder.ReplaceAllString(part, "")] = true
			}
		}
		for _, d := range root.dirs {
			if !slices.ContainsFunc(paths, func(p string) bool { return p == d || strings.HasPrefix(p, d+"/") }) {
				t.Errorf("the code reads under %s under the %s, which the doc does not list", d, root.phrase)
			}
		}
	}
	for _, s := range src.readLiterals {
		for _, part := range strings.Split(s, "/") {
			if part != "" && !documentedParts[part] {
				t.Errorf("%s: the code reads %q, which no path the doc lists has", src.readLiteralAt[s], s)
			}
		}
	}
}
