// Package deploytest deploys hotplugd's DaemonSet in end-to-end tests as
// users do: deploy/kubernetes through a kustomize overlay, built by the real
// kustomize (hack/tool.sh), and applied object by object with server-side
// apply, which is what `kubectl apply --server-side -k` does.
//
// It is its own package because two test packages run the DaemonSet:
// test/e2e (on this machine's kubelet) and test/e2e/node (on a systemd
// node in a VM), and the overlay is where what a test may change is
// written down once. Nothing of hotplugd imports it.
package deploytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/template"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hotplugd/hotplugd/internal/hacktool"
	"github.com/hotplugd/hotplugd/internal/kubeapitest"
	"github.com/hotplugd/hotplugd/internal/testimage"
)

// The DaemonSet's namespace, name and pod label (deploy/kubernetes).
const (
	Namespace = "hotplugd-system"
	Name      = "hotplugd"
	Selector  = "app.kubernetes.io/name=hotplugd"
)

// Overlay is a test overlay of deploy/kubernetes: the only things a test
// cluster changes. The image is one `make image` built, imported into the
// node's containerd (no registry), pinned by digest as the kustomization
// pins it. The pod reaches the API server at APIHost:APIPort, since no
// kube-proxy routes the kubernetes Service's ClusterIP in these clusters
// (the pod is hostNetwork). Components are the opt-in kustomize
// components of deploy/kubernetes/components an operator would add, by
// directory name ("restart-kubelet").
type Overlay struct {
	Image            testimage.Image
	APIHost, APIPort string
	Components       []string
}

const overlayTemplate = `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - {{.Base}}
{{- if .Components}}
components:
{{- range .Components}}
  - {{$.Base}}/components/{{.}}
{{- end}}
{{- end}}
images:
  - name: {{.Name}}
    digest: {{.Digest}}
patches:
  - target:
      kind: DaemonSet
      name: hotplugd
    patch: |-
      apiVersion: apps/v1
      kind: DaemonSet
      metadata:
        name: hotplugd
        namespace: hotplugd-system
      spec:
        template:
          spec:
            containers:
              - name: hotplugd
                env:
                  - name: KUBERNETES_SERVICE_HOST
                    value: "{{.Host}}"
                  - name: KUBERNETES_SERVICE_PORT
                    value: "{{.Port}}"
`

// Build writes the overlay into dir (created if missing) over the
// deploy/kubernetes of the repository at root, runs `kustomize build` on
// it and returns the objects in kustomize's order. It fails the test when
// the DaemonSet does not come out with the overlay's image by digest.
func Build(t testing.TB, root, dir string, o Overlay) []*unstructured.Unstructured {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(filepath.Join(root, "deploy", "kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	// kustomize takes a base and components only by relative paths.
	base, err := filepath.Rel(absDir, abs)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	err = template.Must(template.New("overlay").Parse(overlayTemplate)).Execute(&b, map[string]any{
		"Base": base, "Components": o.Components, "Name": o.Image.Name, "Digest": o.Image.Digest,
		"Host": o.APIHost, "Port": o.APIPort,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	objs := Kustomize(t, dir)
	if img := DaemonSetImage(objs); img != o.Image.Ref() {
		t.Fatalf("kustomize build %s: the DaemonSet's image is %q, want %s (does deploy/kubernetes still name %s?)", dir, img, o.Image.Ref(), o.Image.Name)
	}
	return objs
}

// Kustomize runs the real `kustomize build dir` and decodes its objects.
func Kustomize(t testing.TB, dir string) []*unstructured.Unstructured {
	t.Helper()
	bin, err := hacktool.Path("kustomize")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kustomize build %s: %v: %s", dir, err, stderr.String())
	}
	return Decode(t, out)
}

// Decode decodes a YAML stream of objects (kustomize's or helm's output),
// in order, leaving out empty documents.
func Decode(t testing.TB, out []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding objects: %v", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// DaemonSetImage is the image of the DaemonSet's first container; "" when
// objs have none.
func DaemonSetImage(objs []*unstructured.Unstructured) string {
	img, _ := daemonSetContainer(objs)["image"].(string)
	return img
}

// DaemonSetArgs are the arguments of the DaemonSet's first container.
func DaemonSetArgs(objs []*unstructured.Unstructured) []string {
	args, _, _ := unstructured.NestedStringSlice(daemonSetContainer(objs), "args")
	return args
}

// DaemonSetEnv is the value of the environment variable name of the first
// DaemonSet's first container in objs (the DaemonSet's settings are
// HOTPLUGD_<FLAG> variables), and whether it is set there.
func DaemonSetEnv(objs []*unstructured.Unstructured, name string) (string, bool) {
	env, _, _ := unstructured.NestedSlice(daemonSetContainer(objs), "env")
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			v, _ := m["value"].(string)
			return v, true
		}
	}
	return "", false
}

// daemonSetContainer is the first container of the first DaemonSet in
// objs; nil when there is none.
func daemonSetContainer(objs []*unstructured.Unstructured) map[string]any {
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if len(cs) > 0 {
			c, _ := cs[0].(map[string]any)
			return c
		}
		return nil
	}
	return nil
}

// Apply applies each object with server-side apply (field manager "e2e",
// forced), in kustomize's order, and returns a function that deletes them
// again in reverse order, reporting errors to t.
func Apply(t testing.TB, cfg *rest.Config, objs []*unstructured.Unstructured) func() {
	t.Helper()
	ctx := context.Background()
	res, err := kubeapitest.NewResources(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var applied []dynamic.ResourceInterface
	var names []string
	for _, obj := range objs {
		ri, id, err := res.For(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "e2e", Force: true}); err != nil {
			t.Fatalf("applying %s: %v", id, err)
		}
		applied = append(applied, ri)
		names = append(names, obj.GetName())
	}
	return func() {
		for i := len(applied) - 1; i >= 0; i-- {
			err := applied[i].Delete(ctx, names[i], metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("deleting %s: %v", names[i], err)
			}
		}
	}
}

// Describe is a line per pod: its node, phase and containers' states.
func Describe(pods []v1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "  %s node=%q phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			fmt.Fprintf(&b, " %s: ready=%v restarts=%d state=%+v", c.Name, c.Ready, c.RestartCount, c.State)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Pods lists the DaemonSet's pods.
func Pods(t testing.TB, c kubernetes.Interface) []v1.Pod {
	t.Helper()
	list, err := c.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: Selector})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// PodReady is whether the pod runs, is not being deleted, and its Ready
// condition is True.
func PodReady(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
