package components

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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

// TestComponentsFailOnMovedArg: each component patches one argument at
// its index, behind a test op; a base whose argument moved fails the build
// on that op instead of replacing some other argument.
func TestComponentsFailOnMovedArg(t *testing.T) {
	for _, tt := range []struct{ component, arg string }{
		{"monitoring", baseMetricsArg},
		{"restart-kubelet", baseRemedyArg},
	} {
		t.Run(tt.component, func(t *testing.T) {
			kustomize := kustomizeTool.path(t)
			overlay := copyOverlay(t, func(ds string) string {
				moved := strings.Replace(ds, "- "+tt.arg, "- --resync=30s\n            - "+tt.arg, 1)
				if moved == ds {
					t.Fatalf("%s not found in deploy/kubernetes/daemonset.yaml", tt.arg)
				}
				return moved
			}, tt.component)
			out, err := exec.Command(kustomize, "build", overlay).CombinedOutput()
			if err == nil {
				t.Fatalf("kustomize build succeeded with %s moved; output:\n%s", tt.arg, out)
			}
			if !strings.Contains(string(out), "test failed") {
				t.Errorf("kustomize build failed, but not on the patch's test op:\n%s", out)
			}
		})
	}
}
