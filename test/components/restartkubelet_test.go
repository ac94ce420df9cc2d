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
	remedyEnv  = "HOTPLUGD_REMEDY"
	baseRemedy = "report"
	remedy     = "restart-kubelet"
)

// remedyMounts are what the component alone mounts, read-only at the
// host's paths, in its patch's order: the host's system bus (systemd's
// RestartUnit and the unit's properties), the kubelet's pod log directory
// (a NeedsDrain Event names the pods), and on kubeadm nodes the directory
// of the kubelet's binary (the remedy restarts only when the binary has not
// changed since the kubelet started) and of its unit's environment file
// /etc/default/kubelet (only when the command line systemd would start is
// the running one). The report-only base has none of them
// (TestReportOnlyPrivileges).
var remedyMounts = []struct {
	name, path string
	typ        v1.HostPathType
}{
	{"dbus", "/run/dbus", v1.HostPathDirectoryOrCreate},
	{"pod-logs", "/var/log/pods", v1.HostPathDirectoryOrCreate},
	{"kubelet-binary", "/usr/bin", v1.HostPathDirectory},
	{"kubelet-env", "/etc/default", v1.HostPathDirectory},
}

// TestRestartKubeletComponent: the component changes the DaemonSet's
// HOTPLUGD_REMEDY from report to restart-kubelet and adds the
// remedy's read-only mounts, and nothing else, alone and together with the
// monitoring component.
func TestRestartKubeletComponent(t *testing.T) {
	base := build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))
	want, c := withEnv(t, base, remedyEnv, baseRemedy, remedy)
	for _, m := range remedyMounts {
		c.VolumeMounts = append(c.VolumeMounts, v1.VolumeMount{Name: m.name, MountPath: m.path, ReadOnly: true})
		want.Spec.Template.Spec.Volumes = append(want.Spec.Template.Spec.Volumes, v1.Volume{Name: m.name,
			VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: m.path, Type: &m.typ}}})
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
	if diff := cmp.Diff(want, daemonSet(t, got[dsKey]), anyOrder...); diff != "" {
		t.Errorf("patched DaemonSet (-want +got):\n%s", diff)
	}

	// With monitoring as well: each sets its own variable.
	both := daemonSet(t, build(t, copyOverlay(t, nil, "restart-kubelet", "monitoring"))[dsKey])
	bc := &both.Spec.Template.Spec.Containers[0]
	if v, _ := env(bc, remedyEnv); v != remedy {
		t.Errorf("restart-kubelet and monitoring together: %s=%q, want %s", remedyEnv, v, remedy)
	}
	if v, _ := env(bc, metricsEnv); v != metricsAddr {
		t.Errorf("restart-kubelet and monitoring together: %s=%q, want %s", metricsEnv, v, metricsAddr)
	}
	for _, m := range remedyMounts {
		if !slices.ContainsFunc(bc.VolumeMounts, func(vm v1.VolumeMount) bool { return vm.MountPath == m.path && vm.ReadOnly }) {
			t.Errorf("restart-kubelet and monitoring together: no read-only mount of %s", m.path)
		}
	}
}
