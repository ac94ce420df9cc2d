package cpumgr

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/doccheck"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// declaredFormats are the values of the package's Format constants, read
// from its source so that a new one is seen.
func declaredFormats(t *testing.T) []Format {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []Format
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			g, ok := decl.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, spec := range g.Specs {
				vs := spec.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Format" {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("%s: a Format constant that is not a string literal", fset.Position(v.Pos()))
					}
					s, _ := strconv.Unquote(lit.Value)
					out = append(out, Format(s))
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no Format constants found")
	}
	return out
}

var formatName = regexp.MustCompile(`\bV\d+\b`)

// formatsIn returns the format names in s, sorted, once each.
func formatsIn(s string) []Format {
	var out []Format
	for _, m := range formatName.FindAllString(s, -1) {
		out = append(out, Format(m))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// paragraphStarting returns the paragraph of doc that starts with prefix
// (a list item's marker ignored).
func paragraphStarting(t *testing.T, doc, prefix string) string {
	t.Helper()
	for _, p := range doccheck.Paragraphs(doc) {
		if strings.HasPrefix(strings.TrimPrefix(p, "- "), prefix) {
			return p
		}
	}
	t.Fatalf("the package doc has no paragraph starting %q", prefix)
	return ""
}

// TestDocNamesFormats: the package doc names the formats the code has. The
// first sentence of its Parse guarantee names every Format constant (Parse
// reads them all; a later sentence says what it refuses), its Marshal
// guarantee exactly the layouts Marshal writes (what Parse reads back from
// Marshal's bytes for each Format), and it names no other format.
func TestDocNamesFormats(t *testing.T) {
	doc, err := doccheck.PackageDoc(".")
	if err != nil {
		t.Fatal(err)
	}
	declared := declaredFormats(t)
	slices.Sort(declared)

	reads, _, _ := strings.Cut(paragraphStarting(t, doc, "Parse "), ". ")
	if got := formatsIn(reads); !slices.Equal(got, declared) {
		t.Errorf("the first sentence of the doc's Parse guarantee names formats %q; Parse reads %q: %q", got, declared, reads)
	}

	written := map[Format]bool{}
	for _, f := range declared {
		s := &State{
			Format: f, PolicyName: PolicyStatic, DefaultCPUSet: cpuset.New(0, 1),
			Entries:    map[string]map[string]cpuset.CPUSet{"pod": {"app": cpuset.New(2)}},
			PodEntries: map[string]cpuset.CPUSet{"pod2": cpuset.New(3)},
		}
		b, err := s.Marshal()
		if err != nil {
			t.Fatalf("Marshal(%s): %v", f, err)
		}
		back, err := Parse(b)
		if err != nil {
			t.Fatalf("Parse(Marshal(%s)): %v", f, err)
		}
		written[back.Format] = true
	}
	if got, want := formatsIn(paragraphStarting(t, doc, "Marshal ")), slices.Sorted(maps.Keys(written)); !slices.Equal(got, want) {
		t.Errorf("the doc's Marshal guarantee names formats %q; Marshal writes %q", got, want)
	}

	for _, f := range formatsIn(doc) {
		if !slices.Contains(declared, f) {
			t.Errorf("the package doc names format %s, which the package does not have (%q)", f, declared)
		}
	}
}

// TestDocNamesWhatEachReleaseWrites: the package doc's paragraph on
// Config.Release names every release of the table, and the clause of each
// (up to the next ";") says it writes exactly the layouts its CPU manager
// writes, under either setting of PodLevelResourceManagers.
func TestDocNamesWhatEachReleaseWrites(t *testing.T) {
	doc, err := doccheck.PackageDoc(".")
	if err != nil {
		t.Fatal(err)
	}
	var para string
	for _, p := range doccheck.Paragraphs(doc) {
		if strings.Contains(p, "Config.Release") {
			para = p
			break
		}
	}
	if para == "" {
		t.Fatal("the package doc has no paragraph on Config.Release")
	}
	writes := regexp.MustCompile(`\bwrites? (V\d+)\b`)
	for _, rel := range kubeletversion.Releases() {
		minor := regexp.MustCompile(`\b1\.` + strconv.Itoa(rel.Minor) + `\b`)
		var said []Format
		for clause := range strings.SplitSeq(para, ";") {
			if !minor.MatchString(clause) {
				continue
			}
			for _, m := range writes.FindAllStringSubmatch(clause, -1) {
				said = append(said, Format(m[1]))
			}
		}
		if len(said) == 0 {
			t.Errorf("the package doc does not say what kubelet 1.%d writes: %q", rel.Minor, para)
			continue
		}
		slices.Sort(said)
		said = slices.Compact(said)
		var want []Format
		for _, gate := range []bool{false, true} {
			want = append(want, Config{Release: rel, PodLevelResourceManagers: gate}.writes())
		}
		slices.Sort(want)
		want = slices.Compact(want)
		if !slices.Equal(said, want) {
			t.Errorf("the package doc says kubelet 1.%d writes %q; it writes %q", rel.Minor, said, want)
		}
	}
}
