package components

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/deploytest"
)

// copyOverlay copies deploy/kubernetes into a temporary directory as
// "base", lets edit change its daemonset.yaml, and writes beside it an
// overlay of it with the named components, as users add them; it returns
// the overlay's directory.
func copyOverlay(t *testing.T, edit func(daemonset string) string, components ...string) string {
	t.Helper()
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.CopyFS(base, os.DirFS(filepath.Join(repoRoot, "deploy", "kubernetes"))); err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		f := filepath.Join(base, "daemonset.yaml")
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(edit(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	overlay := filepath.Join(dir, "overlay")
	if err := os.Mkdir(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../base]\ncomponents:\n"
	for _, c := range components {
		k += "  - ../base/components/" + c + "\n"
	}
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return overlay
}

// TestComponentsPatchByName: each component sets its one environment
// variable by name (a strategic merge of env), so a base whose entries
// moved or grew still gets exactly that variable changed, in its place, and
// no duplicate.
func TestComponentsPatchByName(t *testing.T) {
	for _, tt := range []struct{ component, name, value string }{
		{"monitoring", metricsEnv, metricsAddr},
		{"restart-kubelet", remedyEnv, remedy},
	} {
		t.Run(tt.component, func(t *testing.T) {
			const extra = "HOTPLUGD_KUBELET_POLL"
			overlay := copyOverlay(t, func(ds string) string {
				// A new variable first among hotplugd's, and the one the
				// component sets moved to the end of the list.
				moved := strings.Replace(ds, "            - name: HOTPLUGD_NODE_NAME\n",
					"            - name: "+extra+"\n              value: 30s\n            - name: HOTPLUGD_NODE_NAME\n", 1)
				if moved == ds {
					t.Fatal("HOTPLUGD_NODE_NAME not found in deploy/kubernetes/daemonset.yaml")
				}
				return moved
			}, tt.component)
			c := daemonSet(t, build(t, overlay)[dsKey]).Spec.Template.Spec.Containers[0]
			var names []string
			for _, e := range c.Env {
				names = append(names, e.Name)
			}
			if n := strings.Count(" "+strings.Join(names, " ")+" ", " "+tt.name+" "); n != 1 {
				t.Errorf("%s appears %d times in env %q, want once", tt.name, n, names)
			}
			if v, _ := env(&c, tt.name); v != tt.value {
				t.Errorf("%s=%q, want %s", tt.name, v, tt.value)
			}
			if v, _ := env(&c, extra); v != "30s" {
				t.Errorf("the base's %s lost: %q", extra, v)
			}
		})
	}
}

// TestEnvReferences: in the base and with every combination of components,
// each $(NAME) in the container's env values or args names a variable
// defined earlier in env (the kubelet expands only those, and leaves any
// other reference as it is), and each HOTPLUGD_ variable names a flag of
// `hotplugd run` (any other would be ignored).
func TestEnvReferences(t *testing.T) {
	flags := runFlags(t)
	for _, comps := range [][]string{nil, {"monitoring"}, {"restart-kubelet"}, {"restart-kubelet", "monitoring"}} {
		c := daemonSet(t, build(t, copyOverlay(t, nil, comps...))[dsKey]).Spec.Template.Spec.Containers[0]
		defined := map[string]bool{}
		ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
		for _, e := range c.Env {
			for _, m := range ref.FindAllStringSubmatch(e.Value, -1) {
				if !defined[m[1]] {
					t.Errorf("components %v: %s=%q refers to $(%s), not defined before it", comps, e.Name, e.Value, m[1])
				}
			}
			defined[e.Name] = true
			if flag, ok := strings.CutPrefix(e.Name, "HOTPLUGD_"); ok && !flags[strings.ReplaceAll(strings.ToLower(flag), "_", "-")] {
				t.Errorf("components %v: %s names no flag of hotplugd run", comps, e.Name)
			}
		}
		for _, a := range append(append([]string{}, c.Command...), c.Args...) {
			for _, m := range ref.FindAllStringSubmatch(a, -1) {
				if !defined[m[1]] {
					t.Errorf("components %v: argument %q refers to $(%s), not in env", comps, a, m[1])
				}
			}
		}
	}
}

// runFlags are the flags of `hotplugd run`, from its --help.
func runFlags(t *testing.T) map[string]bool {
	t.Helper()
	bin, err := daemontest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	if !flags["remedy"] || !flags["node-name"] {
		t.Fatalf("no --remedy or --node-name in hotplugd run --help:\n%s", out)
	}
	return flags
}

// TestAnotherNamespace: an overlay that moves hotplugd to another
// namespace with kustomize's namespace: moves every namespaced object and
// the bindings' subjects, and nothing still names hotplugd-system; the
// components follow (they target the DaemonSet by name).
func TestAnotherNamespace(t *testing.T) {
	overlay := copyOverlay(t, nil, "restart-kubelet", "monitoring")
	k := filepath.Join(overlay, "kustomization.yaml")
	b, err := os.ReadFile(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k, append([]byte("namespace: ops\n"), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := deploytest.Kustomize(t, overlay)
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(y), "hotplugd-system") {
			t.Errorf("%s %s still names hotplugd-system:\n%s", o.GetKind(), o.GetName(), y)
		}
		if o.GetKind() == "DaemonSet" {
			ds = daemonSet(t, o)
		}
	}
	if ds == nil || ds.Namespace != "ops" {
		t.Fatalf("no DaemonSet in namespace ops")
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if v, _ := env(&c, remedyEnv); v != remedy {
		t.Errorf("restart-kubelet did not follow the DaemonSet to ops: %s=%q", remedyEnv, v)
	}
	if v, _ := env(&c, metricsEnv); v != metricsAddr {
		t.Errorf("monitoring did not follow the DaemonSet to ops: %s=%q", metricsEnv, v)
	}
}

// TestReportOnlyPrivileges: the base DaemonSet (report only) mounts only
// what reporting needs, every host path read-only but hotplugd's own state
// directory, none of the remedy's (the system bus, the pod logs, the
// kubelet's binary and environment); runs with NET_ADMIN alone, no
// privilege escalation, a read-only root; only on Linux nodes, tolerating
// NoSchedule taints only. test/e2e TestDaemonSet checks the running pod.
func TestReportOnlyPrivileges(t *testing.T) {
	ds := daemonSet(t, build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))[dsKey])
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	type mount struct {
		Host, Container string
		ReadOnly        bool
	}
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath == nil {
			t.Errorf("volume %s is not a hostPath: %+v", v.Name, v.VolumeSource)
			continue
		}
		hostPaths[v.Name] = v.HostPath.Path
	}
	var got []mount
	for _, m := range c.VolumeMounts {
		got = append(got, mount{hostPaths[m.Name], m.MountPath, m.ReadOnly})
	}
	want := []mount{
		{"/sys", "/host/sys", true},
		{"/proc", "/host/proc", true},
		{"/var/lib/kubelet", "/var/lib/kubelet", true},
		{"/var/lib/hotplugd", "/var/lib/hotplugd", false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the report-only pod's mounts (-want +got):\n%s", diff)
	}
	for _, m := range remedyMounts {
		if _, ok := hostPaths[m.name]; ok {
			t.Errorf("the report-only base has the remedy's volume %s (%s)", m.name, m.path)
		}
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatal("no securityContext.capabilities")
	}
	if diff := cmp.Diff([]v1.Capability{"ALL"}, sc.Capabilities.Drop); diff != "" {
		t.Errorf("capabilities dropped (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1.Capability{"NET_ADMIN"}, sc.Capabilities.Add); diff != "" {
		t.Errorf("capabilities added (-want +got):\n%s", diff)
	}
	if sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("securityContext %+v: want unprivileged, no escalation, read-only root", sc)
	}
	if v, _ := env(&c, remedyEnv); v != baseRemedy {
		t.Errorf("the base's %s=%q, want %s", remedyEnv, v, baseRemedy)
	}
	if diff := cmp.Diff(map[string]string{"kubernetes.io/os": "linux"}, spec.NodeSelector); diff != "" {
		t.Errorf("nodeSelector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]v1.Toleration{{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}, spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
}
