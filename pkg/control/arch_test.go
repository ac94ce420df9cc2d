package control

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoBackEdges holds the data flow to one direction: sources -> the
// daemon's snapshot -> Decide -> the writer and the executor. Only this
// package decides; the executors and the sources do not import it or each
// other's running parts, and the wiring never computes a decision's part
// itself. The feedback a control loop needs comes through its inputs: the
// executor writes the journal, which the loop reads like a source, and
// reads the Node only through the Observations the loop publishes.
func TestNoBackEdges(t *testing.T) {
	const mod = "github.com/hotplugd/hotplugd/"
	for _, tt := range []struct {
		dir string
		// forbidden imports and selectors (package.Name) in non-test files
		imports, selectors []string
	}{
		{"../remedy", []string{mod + "pkg/control", mod + "pkg/daemon"},
			[]string{"nodepatch.Watch", "nodepatch.NewWatch", "nodepatch.Writer", "nodepatch.NewWriter", "nodepatch.Reported"}},
		{"../nodepatch", []string{mod + "pkg/control", mod + "pkg/remedy", mod + "pkg/journal", mod + "pkg/daemon"}, nil},
		{"../daemon", []string{mod + "pkg/control", mod + "pkg/remedy", mod + "pkg/nodepatch", mod + "pkg/journal"}, nil},
		{"../kubeletwatch", []string{mod + "pkg/control", mod + "pkg/remedy", mod + "pkg/nodepatch"}, nil},
		{"../journal", []string{mod + "pkg/control", mod + "pkg/remedy", mod + "pkg/nodepatch"}, nil},
		{"../../cmd/hotplugd", nil, []string{"remedy.Key", "remedy.Decide", "nodepatch.Reported", "nodepatch.Compare", "control.Decide"}},
	} {
		files, err := filepath.Glob(filepath.Join(tt.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: no Go files (%v)", tt.dir, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range tt.imports {
					if p == bad {
						t.Errorf("%s imports %s: a back-edge into the loop's decision", f, p)
					}
				}
			}
			ast.Inspect(file, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok {
					for _, bad := range tt.selectors {
						if x.Name+"."+sel.Sel.Name == bad {
							t.Errorf("%s uses %s: only pkg/control decides", f, bad)
						}
					}
				}
				return true
			})
		}
	}
}
