package components

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// What deploy/kubernetes/components/restart-kubelet changes.
const (
	baseRemedyArg = "--remedy=report"
	remedyArg     = "--remedy=restart-kubelet"
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

// TestRestartKubeletComponent: the component changes the DaemonSet's
// --remedy=report into --remedy=restart-kubelet and nothing else, alone
// and together with the monitoring component.
func TestRestartKubeletComponent(t *testing.T) {
	base := build(t, filepath.Join(repoRoot, "deploy", "kubernetes"))
	want := daemonSet(t, base[dsKey])
	c := &want.Spec.Template.Spec.Containers[0]
	i := slices.Index(c.Args, baseRemedyArg)
	if i < 0 {
		t.Fatalf("the base DaemonSet has no %s (args %q): update the component and this test", baseRemedyArg, c.Args)
	}
	c.Args[i] = remedyArg

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

// TestRestartKubeletFailsOnMovedArg: a base whose --remedy argument moved
// fails the build on the patch's test op instead of replacing another
// argument.
func TestRestartKubeletFailsOnMovedArg(t *testing.T) {
	kustomize := kustomizeTool.path(t)
	overlay := copyOverlay(t, func(ds string) string {
		moved := strings.Replace(ds, "- "+baseRemedyArg, "- --resync=30s\n            - "+baseRemedyArg, 1)
		if moved == ds {
			t.Fatalf("%s not found in deploy/kubernetes/daemonset.yaml", baseRemedyArg)
		}
		return moved
	}, "restart-kubelet")
	out, err := exec.Command(kustomize, "build", overlay).CombinedOutput()
	if err == nil {
		t.Fatalf("kustomize build succeeded with --remedy moved; output:\n%s", out)
	}
	if !strings.Contains(string(out), "test failed") {
		t.Errorf("kustomize build failed, but not on the patch's test op:\n%s", out)
	}
}
