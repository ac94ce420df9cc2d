package metricsref

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The client_golang packages a call site can come from.
const (
	promPkg       = "github.com/prometheus/client_golang/prometheus"
	promautoPkg   = "github.com/prometheus/client_golang/prometheus/promauto"
	collectorsPkg = "github.com/prometheus/client_golang/prometheus/collectors"
)

// constructors are client_golang's metric constructors that take options
// with the name, by the type of the metric they make.
var constructors = map[string]string{
	"NewCounter": "counter", "NewCounterVec": "counter", "NewCounterFunc": "counter",
	"NewGauge": "gauge", "NewGaugeVec": "gauge", "NewGaugeFunc": "gauge",
	"NewHistogram": "histogram", "NewHistogramVec": "histogram",
	"NewSummary": "summary", "NewSummaryVec": "summary",
	"NewUntypedFunc": "untyped",
}

// notMetrics are the other functions of package prometheus named New*: they
// make no metric family of their own (a const metric or a vector takes a
// Desc, which NewDesc makes).
var notMetrics = []string{
	"NewRegistry", "NewPedanticRegistry", "NewConstMetric", "NewConstMetricWithCreatedTimestamp",
	"NewConstHistogram", "NewConstHistogramWithCreatedTimestamp", "NewConstNativeHistogram",
	"NewConstSummary", "NewConstSummaryWithCreatedTimestamp", "NewMetricWithTimestamp",
	"NewMetricWithExemplars", "NewTimer", "NewMetricVec", "NewInvalidMetric", "NewInvalidDesc",
}

// defaultRegistry are the functions and variables of package prometheus
// that use its default registry, which hotplugd's /metrics does not serve.
var defaultRegistry = []string{"Register", "MustRegister", "Unregister", "DefaultRegisterer", "DefaultGatherer"}

// collectorMetric names, for each constructor of client_golang's
// collectors package, one metric its collector exports.
var collectorMetric = map[string]string{
	"NewGoCollector":      "go_goroutines",
	"NewProcessCollector": "process_start_time_seconds",
}

// site is a metric family a call site makes.
type site struct {
	pos  string
	name string
	typ  string   // "" for NewDesc: no type
	labs []string // nil: not a literal
}

// linkedFiles returns the non-test Go files of this module's packages that
// are linked into cmd/hotplugd.
func linkedFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f",
		`{{if .Module}}{{if .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{range .CgoFiles}}{{$d}}/{{.}}{{"\n"}}{{end}}{{end}}{{end}}`,
		"./cmd/hotplugd")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	files := strings.Fields(string(out))
	if len(files) < 20 {
		t.Fatalf("go list -deps ./cmd/hotplugd: %d files of this module, not hotplugd's", len(files))
	}
	return files
}

// callSites finds in a Go file the metric families client_golang is asked
// to make, and what the check cannot read (a name that is not a string
// literal, promauto, the default registry, an unknown constructor).
func callSites(fset *token.FileSet, f *ast.File) (sites []site, problems []string) {
	names := map[string]string{} // local name: import path
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if path != promPkg && path != promautoPkg && path != collectorsPkg {
			continue
		}
		if path == promautoPkg {
			problems = append(problems, fmt.Sprintf("%s: imports promauto, which registers on the default registry: /metrics serves daemon.Metrics.Registry", fset.Position(imp.Pos())))
		}
		local := filepath.Base(path)
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == "." || local == "_" {
			problems = append(problems, fmt.Sprintf("%s: imports %s as %s: the check reads only qualified calls", fset.Position(imp.Pos()), path, local))
			continue
		}
		names[local] = path
	}
	if len(names) == 0 {
		return nil, problems
	}
	// pkgSel is the import path and the name of pkg.Name or pkg.V2.Name.
	pkgSel := func(e ast.Expr) (string, string, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return "", "", false
		}
		x := sel.X
		if inner, ok := x.(*ast.SelectorExpr); ok && inner.Sel.Name == "V2" {
			x = inner.X
		}
		id, ok := x.(*ast.Ident)
		if !ok || names[id.Name] == "" {
			return "", "", false
		}
		return names[id.Name], sel.Sel.Name, true
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.SelectorExpr:
			if path, name, ok := pkgSel(n); ok && path == promPkg && slices.Contains(defaultRegistry, name) {
				problems = append(problems, fmt.Sprintf("%s: prometheus.%s uses the default registry: /metrics serves daemon.Metrics.Registry", fset.Position(n.Pos()), name))
			}
		case *ast.CallExpr:
			path, name, ok := pkgSel(n.Fun)
			if !ok || !strings.HasPrefix(name, "New") {
				return true
			}
			pos := fset.Position(n.Pos()).String()
			switch {
			case path == collectorsPkg:
				if m, ok := collectorMetric[name]; ok {
					sites = append(sites, site{pos: pos, name: m})
				} else {
					problems = append(problems, fmt.Sprintf("%s: collectors.%s: teach the check (collectorMetric) one metric it exports", pos, name))
				}
			case path != promPkg || slices.Contains(notMetrics, name):
			case name == "NewDesc":
				if len(n.Args) == 0 {
					return true
				}
				if s, ok := stringLit(n.Args[0]); ok {
					sites = append(sites, site{pos: pos, name: s})
				} else {
					problems = append(problems, fmt.Sprintf("%s: prometheus.NewDesc with a name that is not a string literal: the check cannot read it", pos))
				}
			case constructors[name] != "":
				s, err := optsSite(n, constructors[name])
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s: prometheus.%s: %v", pos, name, err))
					return true
				}
				s.pos = pos
				sites = append(sites, s)
			default:
				problems = append(problems, fmt.Sprintf("%s: prometheus.%s: a constructor the check does not know (constructors, notMetrics)", pos, name))
			}
		}
		return true
	})
	return sites, problems
}

// optsSite reads the name (Namespace, Subsystem, Name) and, for a vector,
// the labels of a constructor's call.
func optsSite(call *ast.CallExpr, typ string) (site, error) {
	if len(call.Args) == 0 {
		return site{}, fmt.Errorf("no options")
	}
	fields := map[string]ast.Expr{}
	var collect func(e ast.Expr) bool
	collect = func(e ast.Expr) bool {
		if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
			e = u.X
		}
		lit, ok := e.(*ast.CompositeLit)
		if !ok {
			return false
		}
		for _, el := range lit.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			key, _ := kv.Key.(*ast.Ident)
			if key == nil {
				continue
			}
			// V2's *VecOpts embed the options (CounterOpts: ...).
			if strings.HasSuffix(key.Name, "Opts") && collect(kv.Value) {
				continue
			}
			fields[key.Name] = kv.Value
		}
		return true
	}
	if !collect(call.Args[0]) {
		return site{}, fmt.Errorf("options that are not a composite literal: the check cannot read the name")
	}
	var parts [3]string
	for i, k := range []string{"Namespace", "Subsystem", "Name"} {
		e, ok := fields[k]
		if !ok {
			continue
		}
		s, ok := stringLit(e)
		if !ok {
			return site{}, fmt.Errorf("%s is not a string literal: the check cannot read it", k)
		}
		parts[i] = s
	}
	s := site{name: prometheus.BuildFQName(parts[0], parts[1], parts[2]), typ: typ}
	if s.name == "" {
		return site{}, fmt.Errorf("no Name")
	}
	labels := fields["VariableLabels"] // V2
	if labels == nil && strings.HasSuffix(callName(call), "Vec") && len(call.Args) > 1 {
		labels = call.Args[1]
	}
	if lit, ok := labels.(*ast.CompositeLit); ok {
		s.labs = []string{}
		for _, el := range lit.Elts {
			l, ok := stringLit(el)
			if !ok {
				s.labs = nil
				break
			}
			s.labs = append(s.labs, l)
		}
	} else if labels == nil && !strings.HasSuffix(callName(call), "Vec") {
		s.labs = []string{}
	}
	slices.Sort(s.labs)
	return s, nil
}

func callName(call *ast.CallExpr) string {
	if sel, ok := call.Fun.(*ast.SelectorExpr); ok {
		return sel.Sel.Name
	}
	return ""
}

// stringLit is the value of a string literal, or of a concatenation of
// them.
func stringLit(e ast.Expr) (string, bool) {
	switch e := e.(type) {
	case *ast.BasicLit:
		if e.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(e.Value)
		return s, err == nil
	case *ast.BinaryExpr:
		if e.Op != token.ADD {
			return "", false
		}
		x, ok1 := stringLit(e.X)
		y, ok2 := stringLit(e.Y)
		return x + y, ok1 && ok2
	case *ast.ParenExpr:
		return stringLit(e.X)
	}
	return "", false
}

// TestInventoryHasEveryConstructedMetric reads every call to a
// client_golang constructor in the code linked into cmd/hotplugd: the
// metric each one makes must be in the inventory, with the same type (and
// labels, where they are a literal); and every hotplugd_ metric of the
// inventory must have been found, so that the scan itself has no blind spot
// the inventory hides. A metric added in a package Inventory does not
// build fails here.
func TestInventoryHasEveryConstructedMetric(t *testing.T) {
	metrics, err := Inventory()
	if err != nil {
		t.Fatal(err)
	}
	inv := map[string]Metric{}
	for _, m := range metrics {
		inv[m.Name] = m
	}
	fset := token.NewFileSet()
	found := map[string]bool{}
	files := linkedFiles(t)
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		sites, problems := callSites(fset, f)
		for _, p := range problems {
			t.Error(p)
		}
		for _, s := range sites {
			found[s.name] = true
			m, ok := inv[s.name]
			switch {
			case !ok:
				t.Errorf("%s: %s is not in the inventory: make metricsref.Inventory build the collector that makes it, as cmd/hotplugd does", s.pos, s.name)
			case s.typ != "" && m.Type != s.typ:
				t.Errorf("%s: %s is a %s here, a %s in the inventory", s.pos, s.name, s.typ, m.Type)
			case s.labs != nil && !slices.Equal(m.Labels, s.labs):
				t.Errorf("%s: %s has labels %q here, %q in the inventory", s.pos, s.name, s.labs, m.Labels)
			}
		}
	}
	for name := range inv {
		if strings.HasPrefix(name, "hotplugd_") && !found[name] {
			t.Errorf("%s is in the inventory but no call site makes it: the scan has a blind spot", name)
		}
	}
	t.Logf("%d files, %d metrics made, %d in the inventory", len(files), len(found), len(inv))
}

// TestCallSites: the scan reads the forms client_golang offers and reports
// what it cannot read.
func TestCallSites(t *testing.T) {
	src := `package x

import (
	p "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

const name = "c_total"

var (
	a = p.NewCounterVec(p.CounterOpts{Namespace: "hotplugd", Subsystem: "x", Name: "a_total", Help: "h"}, []string{"b", "a"})
	b = p.NewGauge(p.GaugeOpts{Name: "hotplugd_" + "b"})
	c = p.NewCounter(p.CounterOpts{Name: name})
	d = p.V2.NewHistogramVec(p.HistogramVecOpts{HistogramOpts: p.HistogramOpts{Name: "d_seconds"}, VariableLabels: p.UnconstrainedLabels{"x"}})
	e = p.NewDesc("e", "h", nil, nil)
	f = collectors.NewGoCollector()
	g = collectors.NewBuildInfoCollector()
	h = promauto.NewCounter(p.CounterOpts{Name: "h"})
	i = p.NewRegistry()
	j = p.NewSomethingNew(p.CounterOpts{Name: "j"})
)

func init() { p.MustRegister(a) }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "x.go", src, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	sites, problems := callSites(fset, f)
	var got []string
	for _, s := range sites {
		got = append(got, fmt.Sprintf("%s %s %q", s.name, s.typ, s.labs))
	}
	want := []string{
		`hotplugd_x_a_total counter ["a" "b"]`,
		`hotplugd_b gauge []`,
		`d_seconds histogram ["x"]`,
		`e  []`,
		`go_goroutines  []`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("sites:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, want := range []string{
		"imports promauto", "prometheus.NewCounter: Name is not a string literal", "collectors.NewBuildInfoCollector",
		"prometheus.NewSomethingNew: a constructor the check does not know", "prometheus.MustRegister uses the default registry",
	} {
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, want) }) {
			t.Errorf("no problem %q in\n%s", want, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != 5 {
		t.Errorf("%d problems, want 5:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}
