package components

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// What deploy/kubernetes/components/restart-kubelet changes.
const (
	baseRemedyArg = "--remedy=report"
	remedyArg     = "--remedy=restart-kubelet"
)

// What the component mounts read-only at the host's paths, on kubeadm
// nodes: the directory of the kubelet's binary (the remedy restarts only
// when the binary has not changed since the kubelet started) and of its
// unit's environment file /etc/default/kubelet (only when the command line
// systemd would start is the running one).
const (
	kubeletBinDir = "/usr/bin"
	kubeletEnvDir = "/etc/default"
)

// TestRestartKubeletComponent: the component changes the DaemonSet's
// --remedy=report into --remedy=restart-kubelet and mounts the kubelet's
// binary's and environment file's directories, read-only at their host
// paths, and nothing else, alone and together with the monitoring
// component.
func TestRestartKubeletComponent(t *testing.T) {
	base := build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))
	want, c := withArg(t, base, baseRemedyArg, remedyArg)
	dir := v1.HostPathDirectory
	for _, m := range []struct{ name, path string }{{"kubelet-binary", kubeletBinDir}, {"kubelet-env", kubeletEnvDir}} {
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: m.name, MountPath: m.path, ReadOnly: true})
		want.Spec.Template.Spec.Volumes = append(want.Spec.Template.Spec.Volumes, v1.Volume{Name: m.name,
			VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: m.path, Type: &dir}}})
	}

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
	for _, p := range []string{kubeletBinDir, kubeletEnvDir} {
		if !slices.ContainsFunc(both.Spec.Template.Spec.Containers[0].VolumeMounts, func(m v1.VolumeMount) bool {
			return m.MountPath == p && m.ReadOnly
		}) {
			t.Errorf("restart-kubelet and monitoring together: no read-only mount of %s", p)
		}
	}
}
