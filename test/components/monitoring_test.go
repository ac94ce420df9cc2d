package components

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/hacktool"
	"github.com/hotplugd/hotplugd/internal/metricsref"
)

// The repository's root: go test runs a test in its package's directory.
const repoRoot = "../.."

// What the component changes in the DaemonSet (its kustomization and
// patches in deploy/kubernetes/components/monitoring).
const (
	metricsEnv      = "HOTPLUGD_METRICS_ADDR"
	baseMetricsAddr = "127.0.0.1:9792"
	metricsAddr     = "$(POD_IP):9792"
	metricsPort     = 9792
	metricsPortName = "metrics"
	runbookBase     = "https://github.com/hotplugd/hotplugd/blob/main/docs/monitoring.md#"
)

// externalSeries are the series the rules use that hotplugd does not
// export, with where they come from (docs/monitoring.md lists them).
var externalSeries = map[string]string{
	"up": "Prometheus, per scrape target",
	"kube_daemonset_status_number_unavailable": "kube-state-metrics",
}

// tool is one of the command-line tools the tests run (hack/tool.sh's
// name; $HOTPLUGD_<NAME> overrides it: internal/hacktool).
type tool struct{ name string }

var (
	kustomizeTool = tool{name: "kustomize"}
	promtoolTool  = tool{name: "promtool"}
)

// path is the tool's binary. A tool hack/tool.sh cannot build skips the
// test, with the script's output.
func (tl tool) path(t *testing.T) string {
	t.Helper()
	p, err := hacktool.Path(tl.name)
	if err != nil {
		t.Skipf("%s cannot be built here (set $%s to a %s binary to run this test):\n%v", tl.name, hacktool.EnvVar(tl.name), tl.name, err)
	}
	return p
}

// run runs a tool and returns its combined output, or fails the test.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// build runs `kustomize build dir` and decodes its objects, keyed by
// kind/namespace/name.
func build(t *testing.T, dir string) map[string]*unstructured.Unstructured {
	t.Helper()
	kustomizeTool.path(t) // skips, saying why, where kustomize cannot be built
	objs := map[string]*unstructured.Unstructured{}
	for _, o := range deploytest.Kustomize(t, dir) {
		k := key(o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := objs[k]; dup {
			t.Fatalf("kustomize build %s: %s twice", dir, k)
		}
		objs[k] = o
	}
	return objs
}

// withEnv is the DaemonSet of base with its environment variable name
// changed from the value from to the value to, in place, and its
// container, for a test to change further.
func withEnv(t *testing.T, base map[string]*unstructured.Unstructured, name, from, to string) (*appsv1.DaemonSet, *v1.Container) {
	t.Helper()
	ds := daemonSet(t, base[dsKey])
	c := &ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e v1.EnvVar) bool { return e.Name == name })
	if i < 0 || c.Env[i].Value != from {
		t.Fatalf("the base DaemonSet has no %s=%s (env %+v): update the component and this test", name, from, c.Env)
	}
	c.Env[i].Value = to
	return ds, c
}

// anyOrder compares env, volume mounts and volumes as sets: kustomize's
// strategic merge moves the entries a patch names to the front of a list.
var anyOrder = []cmp.Option{
	cmpopts.SortSlices(func(a, b v1.EnvVar) bool { return a.Name < b.Name }),
	cmpopts.SortSlices(func(a, b v1.VolumeMount) bool { return a.MountPath < b.MountPath }),
	cmpopts.SortSlices(func(a, b v1.Volume) bool { return a.Name < b.Name }),
}

// env is the value of the container's environment variable name.
func env(c *v1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, true
		}
	}
	return "", false
}

func key(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

var (
	dsKey   = key("DaemonSet", "hotplugd-system", "hotplugd")
	pmKey   = key("PodMonitor", "hotplugd-system", "hotplugd")
	ruleKey = key("PrometheusRule", "hotplugd-system", "hotplugd")
)

func daemonSet(t *testing.T, o *unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	if o == nil {
		t.Fatal("no DaemonSet hotplugd-system/hotplugd")
	}
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &ds, true); err != nil {
		t.Fatalf("DaemonSet: %v", err)
	}
	return &ds
}

// TestComponent builds the overlay and compares it with the base: the
// DaemonSet serves on the pod's (the node's) address with a named port and
// a liveness probe that still reaches it, the PodMonitor and the
// PrometheusRule are added, and nothing else changes.
func TestComponent(t *testing.T) {
	base := build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))
	got := build(t, filepath.Join("testdata", "overlay"))

	for k, o := range base {
		if k == dsKey {
			continue
		}
		if diff := cmp.Diff(o.Object, got[k].Object); diff != "" {
			t.Errorf("the component changed %s (-base +overlay):\n%s", k, diff)
		}
	}
	var added []string
	for k := range got {
		if _, ok := base[k]; !ok {
			added = append(added, k)
		}
	}
	slices.Sort(added)
	if diff := cmp.Diff([]string{pmKey, ruleKey}, added); diff != "" {
		t.Errorf("objects the component adds (-want +got):\n%s", diff)
	}

	want, c := withEnv(t, base, metricsEnv, baseMetricsAddr, metricsAddr)
	c.Ports = append(c.Ports, v1.ContainerPort{Name: metricsPortName, ContainerPort: metricsPort, Protocol: v1.ProtocolTCP})
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Port.IntValue() != metricsPort {
		t.Fatalf("the base DaemonSet's liveness probe is not an HTTP GET of port %d: %+v", metricsPort, c.LivenessProbe)
	}
	c.LivenessProbe.HTTPGet.Host = "" // the pod's IP
	gotDS := daemonSet(t, got[dsKey])
	// kustomize moves the entries a patch names to the front; the order
	// matters only to $(VAR) references, which TestEnvReferences checks.
	if diff := cmp.Diff(want, gotDS, anyOrder...); diff != "" {
		t.Errorf("patched DaemonSet (-want +got):\n%s", diff)
	}
	if !gotDS.Spec.Template.Spec.HostNetwork {
		t.Error("the DaemonSet is not hostNetwork: status.podIP would not be the node's address")
	}
}

// TestPodMonitor: the PodMonitor scrapes the DaemonSet's pods, on the port
// the component declares, and labels the targets with their node.
func TestPodMonitor(t *testing.T) {
	got := build(t, filepath.Join("testdata", "overlay"))
	ds := daemonSet(t, got[dsKey])
	pm := got[pmKey]
	if pm == nil {
		t.Fatal("no PodMonitor hotplugd-system/hotplugd")
	}
	type endpoint struct {
		Port        string `json:"port"`
		Path        string `json:"path"`
		Relabelings []struct {
			SourceLabels []string `json:"sourceLabels"`
			TargetLabel  string   `json:"targetLabel"`
		} `json:"relabelings"`
	}
	var spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector   map[string]any `json:"namespaceSelector"`
		JobLabel            string         `json:"jobLabel"`
		PodMetricsEndpoints []endpoint     `json:"podMetricsEndpoints"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(pm.Object["spec"].(map[string]any), &spec); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ds.Spec.Template.Labels, spec.Selector.MatchLabels); diff != "" {
		t.Errorf("PodMonitor selector against the pods' labels (-pods +selector):\n%s", diff)
	}
	// Its own namespace, wherever that is: no namespaceSelector.
	if spec.NamespaceSelector != nil {
		t.Errorf("PodMonitor namespaceSelector %v, want none (the PodMonitor's own namespace)", spec.NamespaceSelector)
	}
	// The alerts select job="hotplugd": the pods' label names the job.
	if v := ds.Spec.Template.Labels[spec.JobLabel]; v != "hotplugd" {
		t.Errorf("PodMonitor jobLabel %q: the pods' value %q, want hotplugd (the alerts' job)", spec.JobLabel, v)
	}
	if len(spec.PodMetricsEndpoints) != 1 {
		t.Fatalf("PodMonitor endpoints: %+v, want one", spec.PodMetricsEndpoints)
	}
	ep := spec.PodMetricsEndpoints[0]
	if ep.Port != metricsPortName || ep.Path != "/metrics" {
		t.Errorf("PodMonitor scrapes port %q path %q, want %q /metrics", ep.Port, ep.Path, metricsPortName)
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Ports, func(p v1.ContainerPort) bool {
		return p.Name == ep.Port && p.ContainerPort == metricsPort
	}) {
		t.Errorf("the DaemonSet's container has no port %q = %d", ep.Port, metricsPort)
	}
	// The alerts name the node by this label.
	if !slices.ContainsFunc(ep.Relabelings, func(r struct {
		SourceLabels []string `json:"sourceLabels"`
		TargetLabel  string   `json:"targetLabel"`
	}) bool {
		return r.TargetLabel == "node" && slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"})
	}) {
		t.Errorf("PodMonitor does not label targets with node: %+v", ep.Relabelings)
	}
}

// ruleSpec is the PrometheusRule's spec, which is a Prometheus rule file.
type ruleSpec struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert       string            `json:"alert"`
			Record      string            `json:"record"`
			Expr        string            `json:"expr"`
			For         string            `json:"for"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// rulesFile writes the built PrometheusRule's spec into dir as rules.yaml,
// the file testdata/rules_test.yaml loads, and returns the spec.
func rulesFile(t *testing.T, dir string) ruleSpec {
	t.Helper()
	o := build(t, filepath.Join("testdata", "overlay"))[ruleKey]
	if o == nil {
		t.Fatal("no PrometheusRule hotplugd-system/hotplugd")
	}
	b, err := yaml.Marshal(o.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var spec ruleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("PrometheusRule spec: %v", err)
	}
	return spec
}

// TestPromtool runs `promtool check rules` on the PrometheusRule's rules
// and `promtool test rules` with testdata/rules_test.yaml.
func TestPromtool(t *testing.T) {
	promtool := promtoolTool.path(t)
	dir := t.TempDir()
	rulesFile(t, dir)
	tests, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(run(t, promtool, "check", "rules", filepath.Join(dir, "rules.yaml")))
	t.Log(run(t, promtool, "test", "rules", filepath.Join(dir, "rules_test.yaml")))
}

// ruleTests is what testdata/rules_test.yaml holds that the coverage check
// reads.
type ruleTests struct {
	Tests []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestRuleTestsCoverEveryAlert: every alert has at least one case that
// fires and one that does not, and no case names an alert that does not
// exist (promtool passes such a case when it expects nothing).
func TestRuleTestsCoverEveryAlert(t *testing.T) {
	spec := rulesFile(t, t.TempDir())
	b, err := os.ReadFile(filepath.Join("testdata", "rules_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var rt ruleTests
	if err := yaml.Unmarshal(b, &rt); err != nil {
		t.Fatal(err)
	}
	type count struct{ firing, quiet int }
	cases := map[string]*count{}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				cases[r.Alert] = &count{}
			}
		}
	}
	total := 0
	for _, tg := range rt.Tests {
		for _, at := range tg.AlertRuleTest {
			total++
			c, ok := cases[at.Alertname]
			if !ok {
				t.Errorf("test %q at %s: no alert %q in the PrometheusRule", tg.Name, at.EvalTime, at.Alertname)
				continue
			}
			if len(at.ExpAlerts) > 0 {
				c.firing++
			} else {
				c.quiet++
			}
		}
	}
	for name, c := range cases {
		if c.firing == 0 || c.quiet == 0 {
			t.Errorf("alert %s: %d firing and %d not firing cases in testdata/rules_test.yaml, want at least one of each", name, c.firing, c.quiet)
		}
	}
	t.Logf("%d alerts, %d alert_rule_test cases", len(cases), total)
}

// hotplugdMetrics are the metric names hotplugd exports, from the code
// (internal/metricsref, the inventory docs/metrics.md and the dashboard's
// test use).
func hotplugdMetrics(t *testing.T) map[string]bool {
	t.Helper()
	ms, err := metricsref.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, m := range ms {
		names[m.Name] = true
	}
	if !names["hotplugd_remedies_total"] {
		t.Fatal("the inventory has no hotplugd_remedies_total: not hotplugd's metrics")
	}
	return names
}

var (
	exprHotplugd = regexp.MustCompile(`\bhotplugd_[a-z0-9_]+`)
	// Other series: a name followed by a selector or a range.
	exprOther = regexp.MustCompile(`\b([a-z_][a-z0-9_]*)\s*[{\[]`)
)

// TestRuleConventions: every alert has a severity, a summary, a
// description and a runbook link to its section of docs/monitoring.md, and
// uses only series hotplugd exports or externalSeries.
func TestRuleConventions(t *testing.T) {
	spec := rulesFile(t, t.TempDir())
	doc, err := os.ReadFile(filepath.Join(repoRoot, "docs", "monitoring.md"))
	if err != nil {
		t.Fatal(err)
	}
	metrics := hotplugdMetrics(t)
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			name := r.Alert
			if name == "" {
				t.Errorf("group %s: recording rule %s: this file holds alerts only", g.Name, r.Record)
				continue
			}
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("%s: severity %q, want critical, warning or info", name, r.Labels["severity"])
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
			}
			anchor := strings.ToLower(name)
			if got := r.Annotations["runbook_url"]; got != runbookBase+anchor {
				t.Errorf("%s: runbook_url %q, want %q", name, got, runbookBase+anchor)
			}
			// GitHub's anchor of the heading "### HotplugdX" is hotplugdx.
			if !regexp.MustCompile(`(?m)^#+ ` + name + `\s*$`).Match(doc) {
				t.Errorf("%s: docs/monitoring.md has no section %q (the runbook link's anchor)", name, name)
			}
			for _, m := range exprHotplugd.FindAllString(r.Expr, -1) {
				if !metrics[m] {
					t.Errorf("%s: %s is not a metric hotplugd exports (Name: \"hotplugd_...\" in cmd, pkg, internal)", name, m)
				}
			}
			for _, m := range exprOther.FindAllStringSubmatch(r.Expr, -1) {
				if s := m[1]; !strings.HasPrefix(s, "hotplugd_") && externalSeries[s] == "" {
					t.Errorf("%s: series %s is neither hotplugd's nor one of externalSeries", name, s)
				}
			}
		}
	}
	for s, from := range externalSeries {
		if !bytes.Contains(doc, []byte(s)) {
			t.Errorf("docs/monitoring.md does not mention %s (from %s)", s, from)
		}
	}
}
