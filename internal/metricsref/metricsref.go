// Package metricsref is hotplugd's metrics reference, read from the code:
// Inventory lists every metric hotplugd can export (name, type, help,
// label names), and Markdown renders that list as the tables of
// docs/metrics.md.
//
// Inventory does not keep a list: it builds the collectors as `hotplugd
// run` does (cmd/hotplugd/run.go) — daemon.NewMetrics with the build info,
// then nodepatch's client and writer, the remedy and cpuonline, each
// registering on the daemon's registry through its Registerer option, with
// options that reach nothing (a kubeconfig of a server never dialled, a
// journal in memory) — gives every vector one child, and gathers the
// registry once: each family's name, type, help and label names are the
// exposition's. A collector it built that is described but exports no
// family is an error, not a gap.
//
// What Inventory does not build, a new package's collector or one
// registered outside these constructors, its test
// TestInventoryHasEveryConstructedMetric finds: it reads every client_golang
// constructor call in the code linked into cmd/hotplugd and fails for a
// metric the inventory lacks (or whose type or labels differ).
// TestMetricsDoc keeps docs/metrics.md current.
package metricsref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/record"

	"github.com/hotplugd/hotplugd/pkg/control"
	"github.com/hotplugd/hotplugd/pkg/cpuonline"
	"github.com/hotplugd/hotplugd/pkg/daemon"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// When hotplugd exports a metric (Metric.When).
const (
	// Always: every `hotplugd run`, --standalone included.
	Always = "always"
	// WithCluster: `hotplugd run` without --standalone (it watches and
	// writes its Node).
	WithCluster = "without `--standalone`"
	// WithOnlineNewCPUs: `hotplugd run --online-new-cpus`.
	WithOnlineNewCPUs = "with `--online-new-cpus`"
)

// Metric is one metric family hotplugd can export.
type Metric struct {
	Name string
	// Type is the exposition's TYPE in lower case: counter, gauge,
	// histogram, summary or untyped.
	Type string
	Help string
	// Labels are the label names hotplugd sets, sorted; the scrape adds
	// the target's (job, instance, node, ...).
	Labels []string
	// When is Always, WithCluster or WithOnlineNewCPUs.
	When string
}

// recorder is a prometheus.Registerer that registers on another one and
// remembers what it registered.
type recorder struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recorder) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.collectors = append(r.collectors, c)
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// kubeconfig names a server nodepatch.NewClient never dials.
const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: inventory
  cluster:
    server: https://hotplugd-inventory.invalid
contexts:
- name: inventory
  context:
    cluster: inventory
current-context: inventory
`

// Inventory returns every metric hotplugd can export, sorted by name.
func Inventory() ([]Metric, error) {
	m := daemon.NewMetrics()
	if err := m.RegisterBuildInfo("inventory"); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	when := map[prometheus.Collector]string{}
	// NewMetrics registers its exported fields on its own Registry, not
	// through a Registerer: take them from the struct, each checked to be
	// registered there.
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		if k := fv.Kind(); (k == reflect.Pointer || k == reflect.Interface) && fv.IsNil() {
			continue
		}
		c, ok := fv.Interface().(prometheus.Collector)
		if _, registry := c.(prometheus.Gatherer); !ok || registry {
			continue // not a metric, or the Registry itself
		}
		var are prometheus.AlreadyRegisteredError
		if err := m.Registry.Register(c); !errors.As(err, &are) || are.ExistingCollector != c {
			return nil, fmt.Errorf("metricsref: daemon.Metrics.%s is not registered on its Registry (%v)", f.Name, err)
		}
		when[c] = Always
	}

	dir, err := os.MkdirTemp("", "hotplugd-metricsref-")
	if err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	defer os.RemoveAll(dir)
	config := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(config, []byte(kubeconfig), 0o600); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	cluster := &recorder{Registerer: m.Registry}
	client, _, err := nodepatch.NewClient(nodepatch.ClientOptions{Kubeconfig: config, QPS: 1, Burst: 1, Registerer: cluster})
	if err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	if _, err := nodepatch.NewWriter(nodepatch.WriterOptions{
		Client: client, NodeName: "inventory", Recorder: record.NewFakeRecorder(0), Registerer: cluster,
	}); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	if _, err := remedy.New(remedy.Options{
		Kubelet: kubeletwatch.New(kubeletwatch.Options{}), Node: control.NewObservations(),
		Snapshot:   func() (*topology.Snapshot, error) { return nil, errors.New("metricsref: no machine") },
		Registerer: cluster,
	}); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	if err := cluster.Register(control.BudgetWaitingGauge(func() bool { return false })); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	cpus := &recorder{Registerer: m.Registry}
	if _, err := cpuonline.New(cpuonline.Options{SysfsRoot: dir, Registerer: cpus}); err != nil {
		return nil, fmt.Errorf("metricsref: %w", err)
	}
	for _, c := range cluster.collectors {
		when[c] = WithCluster
	}
	for _, c := range cpus.collectors {
		when[c] = WithOnlineNewCPUs
	}

	// A vector without a child exports nothing: give each one child, so
	// that Gather describes its family too.
	described := map[string]string{} // fqName: When
	for c, w := range when {
		if err := addChild(c); err != nil {
			return nil, err
		}
		names, err := fqNames(c)
		if err != nil {
			return nil, err
		}
		for _, name := range names {
			described[name] = w
		}
	}
	families, err := m.Registry.Gather()
	if err != nil {
		return nil, fmt.Errorf("metricsref: gathering: %w", err)
	}
	var out []Metric
	for _, f := range families {
		labels := map[string]bool{}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = true
			}
		}
		w, ok := described[f.GetName()]
		if !ok {
			w = Always // registered by NewMetrics or RegisterBuildInfo: the Go runtime, the process, the build
		}
		delete(described, f.GetName())
		out = append(out, Metric{
			Name: f.GetName(), Type: strings.ToLower(f.GetType().String()), Help: f.GetHelp(),
			Labels: sortedKeys(labels), When: w,
		})
	}
	if len(described) > 0 {
		return nil, fmt.Errorf("metricsref: %s described but not exported: the inventory cannot tell their type and labels", strings.Join(sortedKeys(described), ", "))
	}
	slices.SortFunc(out, func(a, b Metric) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// maxLabels bounds the search for a vector's number of labels.
const maxLabels = 32

// addChild gives a vector one child, with every label value "" (its number
// of labels is the one GetMetricWithLabelValues accepts); other collectors
// are left as they are.
func addChild(c prometheus.Collector) error {
	var vec *prometheus.MetricVec
	switch v := c.(type) {
	case *prometheus.CounterVec:
		vec = v.MetricVec
	case *prometheus.GaugeVec:
		vec = v.MetricVec
	case *prometheus.HistogramVec:
		vec = v.MetricVec
	case *prometheus.SummaryVec:
		vec = v.MetricVec
	case *prometheus.MetricVec:
		vec = v
	default:
		return nil
	}
	for n := range maxLabels + 1 {
		if _, err := vec.GetMetricWithLabelValues(make([]string, n)...); err == nil {
			return nil
		}
	}
	names, _ := fqNames(c)
	return fmt.Errorf("metricsref: %s: found no number of labels its vector takes", strings.Join(names, ", "))
}

// fqNames are the names of c's descriptors, read from their String (the
// only place a Desc shows its name). Gather checks them: a name read
// wrongly is a described name that was not gathered.
func fqNames(c prometheus.Collector) ([]string, error) {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var names []string
	var errs []error
	for d := range ch {
		s, ok := strings.CutPrefix(d.String(), `Desc{fqName: "`)
		name, _, found := strings.Cut(s, `"`)
		if !ok || !found {
			errs = append(errs, fmt.Errorf("metricsref: cannot read the name of %s", d))
			continue
		}
		names = append(names, name)
	}
	return names, errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Markdown renders the inventory as docs/metrics.md's tables: hotplugd's
// own metrics, then the Go runtime's and the process's.
func Markdown(metrics []Metric) string {
	var own, std strings.Builder
	own.WriteString("| Metric | Type | Labels | Exported | Help |\n|---|---|---|---|---|\n")
	std.WriteString("| Metric | Type | Labels | Help |\n|---|---|---|---|\n")
	for _, m := range metrics {
		labels := make([]string, len(m.Labels))
		for i, l := range m.Labels {
			labels[i] = "`" + l + "`"
		}
		help := strings.ReplaceAll(strings.Join(strings.Fields(m.Help), " "), "|", `\|`)
		if strings.HasPrefix(m.Name, "hotplugd_") {
			fmt.Fprintf(&own, "| `%s` | %s | %s | %s | %s |\n", m.Name, m.Type, strings.Join(labels, ", "), m.When, help)
		} else {
			fmt.Fprintf(&std, "| `%s` | %s | %s | %s |\n", m.Name, m.Type, strings.Join(labels, ", "), help)
		}
	}
	return "## hotplugd's metrics\n\n" + own.String() +
		"\n## The Go runtime's and the process's\n\n" +
		"client_golang's Go and process collectors, as every Go exporter has them.\n\n" + std.String()
}
