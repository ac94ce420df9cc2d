package components

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
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
	// The restart budget's objects come with the component, and only they.
	wantKeys := slices.Sorted(maps.Keys(base))
	wantKeys = append(wantKeys, budgetKeys...)
	slices.Sort(wantKeys)
	if diff := cmp.Diff(wantKeys, slices.Sorted(maps.Keys(got))); diff != "" {
		t.Errorf("objects (-base and the budget's +overlay):\n%s", diff)
	}
	checkBudgetRBAC(t, got, rbacv1.Subject{Kind: "ServiceAccount", Name: "hotplugd", Namespace: "hotplugd-system"})
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

// budgetKeys are the restart budget's objects (deploy/kubernetes/budget and
// the component's binding): nothing else of the component's is an object.
var budgetKeys = []string{
	key("Role", "hotplugd-system", "hotplugd-restart-budget"),
	key("RoleBinding", "hotplugd-system", "hotplugd-restart-budget"),
	key("ValidatingAdmissionPolicy", "", "hotplugd-restart-budget"),
	key("ValidatingAdmissionPolicyBinding", "", "hotplugd-restart-budget"),
}

// checkBudgetRBAC: the restart budget's Role grants exactly what pkg/budget
// does with Leases (get, list, create, update; no delete, no watch, nothing
// else) in hotplugd's namespace, bound to subject alone.
func checkBudgetRBAC(t *testing.T, objs map[string]*unstructured.Unstructured, subject rbacv1.Subject) {
	t.Helper()
	var role rbacv1.Role
	var rb rbacv1.RoleBinding
	for k, into := range map[string]any{budgetKeys[0]: &role, budgetKeys[1]: &rb} {
		o := objs[k]
		if o == nil {
			t.Errorf("no %s", k)
			return
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatal(err)
		}
	}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "create", "update"}}}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("the budget's Role (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]rbacv1.Subject{subject}, rb.Subjects); diff != "" || rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "Role" {
		t.Errorf("the budget's RoleBinding: role %s %s, subjects (-want +got):\n%s", rb.RoleRef.Kind, rb.RoleRef.Name, diff)
	}
}

// TestSystemdCluster: deploy/systemd/cluster, which docs/install.md has an
// admin apply for systemd nodes with the remedy, is the namespace, the
// service account whose Node-bound tokens hold the budget, and the restart
// budget's objects, and nothing else: no DaemonSet, no Node permissions.
func TestSystemdCluster(t *testing.T) {
	got := build(t, filepath.Join(repoRoot, "deploy", "systemd", "cluster"))
	want := append([]string{key("Namespace", "", "hotplugd-system"), key("ServiceAccount", "hotplugd-system", "hotplugd")}, budgetKeys...)
	slices.Sort(want)
	if diff := cmp.Diff(want, slices.Sorted(maps.Keys(got))); diff != "" {
		t.Fatalf("objects (-want +got):\n%s", diff)
	}
	checkBudgetRBAC(t, got, rbacv1.Subject{Kind: "ServiceAccount", Name: "hotplugd", Namespace: "hotplugd-system"})
}
