package components

import (
	"bytes"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/deploytest"
)

var helmTool = tool{name: "helm"}

// chartDir is hotplugd's Helm chart.
var chartDir = filepath.Join(repoRoot, "deploy", "helm", "hotplugd")

// helmTemplate renders the chart as `helm template hotplugd` into
// namespace ns with the --set values, and decodes its objects keyed by
// kind/namespace/name.
func helmTemplate(t *testing.T, ns string, set ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "hotplugd", chartDir, "--namespace", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	cmd := exec.Command(helmTool.path(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objs := map[string]*unstructured.Unstructured{}
	for _, o := range deploytest.Decode(t, stdout.Bytes()) {
		k := key(o.GetKind(), o.GetNamespace(), o.GetName())
		if _, dup := objs[k]; dup {
			t.Fatalf("helm template: %s twice", k)
		}
		objs[k] = o
	}
	return objs
}

// TestChart: for the same settings, the chart renders what the kustomize
// build of deploy/kubernetes (with the matching components) gives, object
// for object, but the Namespace, which `helm install --create-namespace`
// makes. Lists whose order kustomize changes (a strategic merge moves the
// entries a patch names to their front) compare as sets: env by name,
// volumes and mounts; TestEnvReferences checks the order that matters.
func TestChart(t *testing.T) {
	for _, tt := range []struct {
		name       string
		set        []string
		components []string
	}{
		{"default", nil, nil},
		{"remedy", []string{"remedy=restart-kubelet"}, []string{"restart-kubelet"}},
		{"monitoring", []string{"podMonitor.enabled=true", "prometheusRule.enabled=true"}, []string{"monitoring"}},
		{"remedy and monitoring", []string{"remedy=restart-kubelet", "metrics.nodeAddress=true", "podMonitor.enabled=true", "prometheusRule.enabled=true"},
			[]string{"restart-kubelet", "monitoring"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want := build(t, copyOverlay(t, nil, tt.components...))
			got := helmTemplate(t, "hotplugd-system", tt.set...)
			nsKey := key("Namespace", "", "hotplugd-system")
			if want[nsKey] == nil {
				t.Fatalf("kustomize made no %s", nsKey)
			}
			delete(want, nsKey)
			if diff := cmp.Diff(slices.Sorted(maps.Keys(want)), slices.Sorted(maps.Keys(got))); diff != "" {
				t.Fatalf("objects (-kustomize +helm):\n%s", diff)
			}
			for k, w := range want {
				if k == dsKey {
					if diff := cmp.Diff(daemonSet(t, w), daemonSet(t, got[k]), anyOrder...); diff != "" {
						t.Errorf("%s (-kustomize +helm):\n%s", k, diff)
					}
					continue
				}
				if diff := cmp.Diff(w.Object, got[k].Object); diff != "" {
					t.Errorf("%s (-kustomize +helm):\n%s", k, diff)
				}
			}
		})
	}
}

// TestChartValues: the values node-agent charts have reach the DaemonSet,
// in another namespace nothing names hotplugd-system, and the schema
// refuses what hotplugd would not take.
func TestChartValues(t *testing.T) {
	got := helmTemplate(t, "ops",
		"dryRun=true", "logLevel=debug", "extraArgs[0]=--heartbeat-interval=10m",
		"nodeSelector.pool=gpu", "priorityClassName=", "image.repository=registry.example.com/hotplugd", "image.tag=v9.9.9",
		"tolerations[0].operator=Exists")
	for k, o := range got {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(y), "hotplugd-system") {
			t.Errorf("%s still names hotplugd-system", k)
		}
	}
	ds := daemonSet(t, got[key("DaemonSet", "ops", "hotplugd")])
	c := &ds.Spec.Template.Spec.Containers[0]
	for name, want := range map[string]string{"HOTPLUGD_DRY_RUN": "true", "HOTPLUGD_LOG_LEVEL": "debug", "HOTPLUGD_REMEDY": "report"} {
		if v, _ := env(c, name); v != want {
			t.Errorf("%s=%q, want %q", name, v, want)
		}
	}
	if !slices.Contains(c.Args, "--heartbeat-interval=10m") {
		t.Errorf("args %q: no extra argument", c.Args)
	}
	if c.Image != "registry.example.com/hotplugd:v9.9.9" {
		t.Errorf("image %s", c.Image)
	}
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["pool"] != "gpu" || spec.PriorityClassName != "" || len(spec.Tolerations) != 1 || spec.Tolerations[0].Effect != "" {
		t.Errorf("nodeSelector %v, priorityClassName %q, tolerations %+v", spec.NodeSelector, spec.PriorityClassName, spec.Tolerations)
	}

	for _, bad := range []string{"remedy=restart", "logFormat=xml", "extraArgs[0]=heartbeat", "image.digest=sha256:abc", "unknownValue=1"} {
		cmd := exec.Command(helmTool.path(t), "template", "hotplugd", chartDir, "--set", bad)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "schema") {
			t.Errorf("helm template --set %s: %v, want a values schema error:\n%s", bad, err, out)
		}
	}
}

// TestChartLint: helm lint --strict passes.
func TestChartLint(t *testing.T) {
	out, err := exec.Command(helmTool.path(t), "lint", "--strict", chartDir).CombinedOutput()
	if err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
}
