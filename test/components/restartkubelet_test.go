package components

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// What deploy/kubernetes/components/restart-kubelet changes.
const (
	baseRemedyArg = "--remedy=report"
	remedyArg     = "--remedy=restart-kubelet"
)

// TestRestartKubeletComponent: the component changes the DaemonSet's
// --remedy=report into --remedy=restart-kubelet and nothing else, alone
// and together with the monitoring component.
func TestRestartKubeletComponent(t *testing.T) {
	base := build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))
	want, _ := withArg(t, base, baseRemedyArg, remedyArg)

	got := build(t, copyOverlay(t, nil, "restart-kubelet"))
	if diff := cmp.Diff(slices.Sorted(maps.Keys(base)), slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("objects (-base +overlay):\n%s", diff)
	}
	for k, o := range base {
		if k == dsKey || got[k] == nil {
			continue
		}
		if diff := cmp.Diff(o.Object, got[k].Object); diff != "" {
			t.Errorf("the component changed %s (-base +overlay):\n%s", k, diff)
		}
	}
	if diff := cmp.Diff(want, daemonSet(t, got[dsKey])); diff != "" {
		t.Errorf("patched DaemonSet (-want +got):\n%s", diff)
	}

	// With monitoring as well: each replaces its own argument.
	both := daemonSet(t, build(t, copyOverlay(t, nil, "restart-kubelet", "monitoring"))[dsKey])
	args := both.Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, remedyArg) || !slices.Contains(args, metricsArg) || slices.Contains(args, baseRemedyArg) || slices.Contains(args, baseMetricsArg) {
		t.Errorf("restart-kubelet and monitoring together: args %q, want %s and %s in place of the base's", args, remedyArg, metricsArg)
	}
}
