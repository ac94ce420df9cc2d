package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/kubeapitest"
)

// deployDir holds the kustomization under test.
const deployDir = "../../deploy/kubernetes"

// The service account the manifests create and the policy names.
const (
	hotplugdNamespace = "hotplugd-system"
	hotplugdAccount   = "hotplugd"
)

// startAPIServer is an API server of the test's own, stopped when the test
// ends. The test skips, saying why, when the binaries are not built.
func startAPIServer(t testing.TB) *kubeapitest.Server {
	t.Helper()
	bin, err := kubeapitest.BinDir()
	if err != nil {
		t.Skipf("SKIPPED: no kube-apiserver: %v", err)
	}
	s, err := kubeapitest.Start(kubeapitest.Options{BinDir: bin})
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// kustomization is the part of kustomization.yaml the test reads.
type kustomization struct {
	Resources []string `json:"resources"`
	Images    []struct {
		Name    string `json:"name"`
		NewName string `json:"newName"`
		NewTag  string `json:"newTag"`
		Digest  string `json:"digest"`
	} `json:"images"`
}

func readKustomization(t testing.TB) kustomization {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	return k
}

// manifestObjects decodes every object of the kustomization's resources,
// in order. Documents are decoded strictly (duplicate keys fail).
func manifestObjects(t testing.TB, k kustomization) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	for _, file := range k.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, file))
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			var m map[string]any
			if err := yaml.UnmarshalStrict(doc, &m); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if len(m) == 0 { // only comments
				continue
			}
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
	return objs
}

// warnings collects the warnings the API server sends (deprecated fields,
// fields it ignores, ...).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// applyManifests creates every object of the kustomization's resources, in
// the listed order, with strict server-side field validation (an unknown or
// duplicated field fails), and returns the "Kind namespace/name" of each.
// The API server warns of nothing.
func applyManifests(t testing.TB, s *kubeapitest.Server, objs []*unstructured.Unstructured) []string {
	t.Helper()
	ctx := context.Background()
	cfg := s.RestConfig()
	var warned warnings
	cfg.WarningHandler = &warned
	res, err := kubeapitest.NewResources(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, obj := range objs {
		ri, id, err := res.For(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
			t.Fatalf("creating %s: %v", id, err)
		}
		applied = append(applied, id)
	}
	if len(warned.list) > 0 {
		t.Errorf("the API server warned while applying the manifests:\n%s", strings.Join(warned.list, "\n"))
	}
	return applied
}

// rbacNode creates a Node as a kubelet registers it, with an annotation and
// a label that are not hotplugd's.
func rbacNode(t testing.TB, c kubernetes.Interface, name string) {
	t.Helper()
	now := metav1.Now()
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{"kubernetes.io/hostname": name},
			Annotations: map[string]string{"example.com/owner": "someone-else"},
		},
		Status: v1.NodeStatus{
			Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("3Gi")},
			Conditions: []v1.NodeCondition{
				{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: v1.NodeMemoryPressure, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", LastHeartbeatTime: now, LastTransitionTime: now},
			},
			Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "192.0.2.1"}},
		},
	}
	if _, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podToken creates a Pod from the DaemonSet's template bound to node (as
// the DaemonSet controller and scheduler would; neither runs here) and
// returns a token of the hotplugd service account bound to it.
func podToken(t testing.TB, c kubernetes.Interface, ds *appsv1.DaemonSet, node string) string {
	t.Helper()
	ctx := context.Background()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + node, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels},
		Spec:       *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	pod, err := c.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a pod from the DaemonSet's template: %v", err)
	}
	tr, err := c.CoreV1().ServiceAccounts(ds.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

func clientFor(t testing.TB, s *kubeapitest.Server, token string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(s.TokenConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func patchNode(c kubernetes.Interface, node, subresource, patch string, opts metav1.PatchOptions) error {
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	_, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, []byte(patch), opts, sub...)
	return err
}

// checkForbidden fails unless err is a 403 whose message contains want.
func checkForbidden(t testing.TB, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("allowed, want 403 Forbidden (%q)", want)
	case !apierrors.IsForbidden(err):
		t.Errorf("error %v, want 403 Forbidden (%q)", err, want)
	case !strings.Contains(err.Error(), want):
		t.Errorf("403 with message %q, want one containing %q", err.Error(), want)
	}
}

// The messages of the admission policy's validations and of RBAC denials.
const (
	denyOtherNode    = "may change only the Node its pod runs on"
	denyAnnotation   = "may change only annotations under hotplugd.io/"
	denyMetadata     = "may not change a Node's labels, finalizers or owners"
	denyCondition    = "may change only the KubeletCapacityStale condition"
	denyCapacity     = "may not change a Node's capacity or allocatable"
	denyStatus       = "may change only the KubeletCapacityStale condition of a Node's status"
	denyNoNodeInAuth = "no node in its token"
	denyPatchNodes   = `cannot patch resource "nodes" in API group "" at the cluster scope`
)

// TestIntegrationNodeRBAC applies deploy/kubernetes to a real API server and
// shows that a token of the hotplugd service account, bound to a pod on
// node-a, can write hotplugd's condition and annotations on node-a and
// nothing else on any Node.
func TestIntegrationNodeRBAC(t *testing.T) {
	s := startAPIServer(t)
	ctx := context.Background()
	admin := s.Client()

	k := readKustomization(t)
	applied := applyManifests(t, s, manifestObjects(t, k))
	// Nothing else is granted or bound: a new object here needs a reason.
	wantApplied := []string{
		"Namespace " + hotplugdNamespace,
		"ServiceAccount " + hotplugdNamespace + "/" + hotplugdAccount,
		"ClusterRole hotplugd",
		"ClusterRoleBinding hotplugd",
		"Role " + hotplugdNamespace + "/hotplugd",
		"RoleBinding " + hotplugdNamespace + "/hotplugd",
		"ValidatingAdmissionPolicy hotplugd-own-node",
		"ValidatingAdmissionPolicyBinding hotplugd-own-node",
		"DaemonSet " + hotplugdNamespace + "/hotplugd",
	}
	if diff := cmp.Diff(wantApplied, applied); diff != "" {
		t.Errorf("objects of deploy/kubernetes (-want +got):\n%s", diff)
	}

	t.Run("ClusterRole", func(t *testing.T) {
		role, err := admin.RbacV1().ClusterRoles().Get(ctx, "hotplugd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
		}
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("ClusterRole hotplugd grants (-want +got):\n%s", diff)
		}
		binding, err := admin.RbacV1().ClusterRoleBindings().Get(ctx, "hotplugd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantSubjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: hotplugdAccount, Namespace: hotplugdNamespace}}
		if diff := cmp.Diff(wantSubjects, binding.Subjects); diff != "" {
			t.Errorf("ClusterRoleBinding hotplugd subjects (-want +got):\n%s", diff)
		}
		// Its own DaemonSet, read at SIGTERM (--prune-on-removal).
		nsRole, err := admin.RbacV1().Roles(hotplugdNamespace).Get(ctx, "hotplugd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		wantNS := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"hotplugd"}, Verbs: []string{"get", "list", "watch"}}}
		if diff := cmp.Diff(wantNS, nsRole.Rules); diff != "" {
			t.Errorf("Role hotplugd grants (-want +got):\n%s", diff)
		}
		nsBinding, err := admin.RbacV1().RoleBindings(hotplugdNamespace).Get(ctx, "hotplugd", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(wantSubjects, nsBinding.Subjects); diff != "" || nsBinding.RoleRef.Kind != "Role" || nsBinding.RoleRef.Name != "hotplugd" {
			t.Errorf("RoleBinding hotplugd: roleRef %+v, subjects (-want +got):\n%s", nsBinding.RoleRef, diff)
		}
	})

	ds, err := admin.AppsV1().DaemonSets(hotplugdNamespace).Get(ctx, "hotplugd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("DaemonSet", func(t *testing.T) {
		spec := ds.Spec.Template.Spec
		if !spec.HostNetwork || !spec.HostPID || spec.ServiceAccountName != hotplugdAccount || spec.PriorityClassName != "system-node-critical" {
			t.Errorf("pod spec: hostNetwork %v, hostPID %v, serviceAccountName %q, priorityClassName %q; want true, true, %q, system-node-critical",
				spec.HostNetwork, spec.HostPID, spec.ServiceAccountName, spec.PriorityClassName, hotplugdAccount)
		}
		if len(spec.Containers) != 1 {
			t.Fatalf("%d containers, want 1", len(spec.Containers))
		}
		ctr := spec.Containers[0]
		// kustomization.yaml pins the image by digest (make pin-image): the
		// DaemonSet's image name is the one its images entry rewrites.
		name, _, _ := strings.Cut(ctr.Image, "@")
		if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
			name = name[:i]
		}
		if len(k.Images) != 1 || k.Images[0].Name != name || k.Images[0].NewTag != "" ||
			!regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(k.Images[0].Digest) {
			t.Errorf("image %q: kustomization.yaml's images %+v do not pin it by digest", ctr.Image, k.Images)
		}
		var nodeName string
		for _, e := range ctr.Env {
			if e.Name == "HOTPLUGD_NODE_NAME" {
				nodeName = e.Value
			}
		}
		if nodeName != "$(NODE_NAME)" {
			t.Errorf("env %+v: HOTPLUGD_NODE_NAME is %q, want $(NODE_NAME)", ctr.Env, nodeName)
		}
		// Report only: the host's paths it reads are mounted read-only, and
		// the remedy's (the system bus, the pod logs) not at all
		// (components/restart-kubelet adds them; test/components
		// TestReportOnlyPrivileges and test/e2e TestDaemonSet check more).
		for _, m := range ctr.VolumeMounts {
			switch m.MountPath {
			case "/host/sys", "/host/proc", "/var/lib/kubelet":
				if !m.ReadOnly {
					t.Errorf("%s is mounted writable", m.MountPath)
				}
			case "/run/dbus", "/var/log/pods":
				t.Errorf("the report-only DaemonSet mounts %s", m.MountPath)
			}
		}
		sc := ctr.SecurityContext
		if sc == nil || sc.Privileged != nil && *sc.Privileged || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("securityContext %+v: want unprivileged with a read-only root file system", sc)
		} else if diff := cmp.Diff(&v1.Capabilities{Drop: []v1.Capability{"ALL"}, Add: []v1.Capability{"NET_ADMIN"}}, sc.Capabilities); diff != "" {
			t.Errorf("capabilities (-want +got):\n%s", diff)
		}
	})

	rbacNode(t, admin, "node-a")
	rbacNode(t, admin, "node-b")
	// The pod's admission (PodSecurity, Priority, ServiceAccount) passes
	// for the DaemonSet's template.
	token := podToken(t, admin, ds, "node-a")
	sa := clientFor(t, s, token)

	// Its own DaemonSet, by name, and no other object of its namespace.
	if _, err := sa.AppsV1().DaemonSets(hotplugdNamespace).Get(ctx, "hotplugd", metav1.GetOptions{}); err != nil {
		t.Errorf("hotplugd cannot read its DaemonSet: %v", err)
	}
	if _, err := sa.AppsV1().DaemonSets(hotplugdNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("hotplugd lists the DaemonSets of its namespace: %v, want 403", err)
	}
	// Its own, field-selected by name: the pause watch's list.
	if _, err := sa.AppsV1().DaemonSets(hotplugdNamespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=hotplugd"}); err != nil {
		t.Errorf("hotplugd cannot list its own DaemonSet by name (the pause watch): %v", err)
	}
	if _, err := sa.CoreV1().Secrets(hotplugdNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("hotplugd lists the Secrets of its namespace: %v, want 403", err)
	}

	// The policy takes effect once the API server's informers have seen it
	// and its binding: wait for a dry-run denial.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := patchNode(sa, "node-b", "status", `{"metadata":{"annotations":{"hotplugd.io/probe":"1"}}}`, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy is not in effect after 30 s: a dry-run patch of node-b by hotplugd returned %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	stale := `{"status":{"conditions":[{"type":"KubeletCapacityStale","status":"True","reason":"CapacityDrift","message":"cpu 2 -> 1","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
	for _, tc := range []struct {
		name        string
		node        string
		subresource string // "" (nodes) or "status"
		patch       string
		deny        string // "": allowed; else part of the 403 message
	}{
		{"own condition", "node-a", "status", stale, ""},
		{"own condition and annotation", "node-a", "status",
			`{"metadata":{"annotations":{"hotplugd.io/capacity":"cpu=1"}},"status":{"conditions":[{"type":"KubeletCapacityStale","status":"False","reason":"CapacityCurrent","message":"","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`, ""},
		{"own annotation", "node-a", "status", `{"metadata":{"annotations":{"hotplugd.io/x":"1"}}}`, ""},
		{"own annotation through nodes", "node-a", "", `{"metadata":{"annotations":{"hotplugd.io/y":"1"}}}`, denyPatchNodes},
		{"own annotation removed", "node-a", "status", `{"metadata":{"annotations":{"hotplugd.io/absent":null}}}`, ""},
		// hotplugd prune's patch (nodepatch.PrunePatch), after the cases above set them.
		{"own condition and annotations removed", "node-a", "status",
			`{"metadata":{"annotations":{"hotplugd.io/capacity":null,"hotplugd.io/x":null}},"status":{"conditions":[{"type":"KubeletCapacityStale","$patch":"delete"}]}}`, ""},
		{"other node's condition", "node-b", "status", stale, denyOtherNode},
		{"other node's annotation", "node-b", "status", `{"metadata":{"annotations":{"hotplugd.io/x":"1"}}}`, denyOtherNode},
		{"own capacity", "node-a", "status", `{"status":{"capacity":{"cpu":"1"}}}`, denyCapacity},
		{"own allocatable", "node-a", "status", `{"status":{"allocatable":{"memory":"1Gi"}}}`, denyCapacity},
		{"own Ready condition", "node-a", "status", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X"}]}}`, denyCondition},
		{"new condition of another type", "node-a", "status", `{"status":{"conditions":[{"type":"DiskPressure","status":"False","reason":"X"}]}}`, denyCondition},
		{"own condition removed with another", "node-a", "status", `{"status":{"conditions":[{"type":"MemoryPressure","$patch":"delete"}]}}`, denyCondition},
		{"own addresses", "node-a", "status", `{"status":{"addresses":[{"type":"InternalIP","address":"192.0.2.99"}]}}`, denyStatus},
		{"own label", "node-a", "", `{"metadata":{"labels":{"hotplugd.io/l":"1"}}}`, denyPatchNodes},
		{"own label through status", "node-a", "status", `{"metadata":{"labels":{"hotplugd.io/l":"1"}}}`, denyMetadata},
		{"own finalizer", "node-a", "status", `{"metadata":{"finalizers":["example.com/f"]}}`, denyMetadata},
		{"foreign annotation", "node-a", "status", `{"metadata":{"annotations":{"example.com/x":"1"}}}`, denyAnnotation},
		{"foreign annotation changed", "node-a", "status", `{"metadata":{"annotations":{"example.com/owner":"hotplugd"}}}`, denyAnnotation},
		{"foreign annotation removed", "node-a", "status", `{"metadata":{"annotations":{"example.com/owner":null}}}`, denyAnnotation},
		{"own spec", "node-a", "", `{"spec":{"unschedulable":true}}`, denyPatchNodes},
		{"own taint", "node-a", "", `{"spec":{"taints":[{"key":"example.com/t","effect":"NoSchedule"}]}}`, denyPatchNodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := patchNode(sa, tc.node, tc.subresource, tc.patch, metav1.PatchOptions{})
			if tc.deny == "" {
				if err != nil {
					t.Errorf("patch of %s %q: %v", tc.node, tc.subresource, err)
				}
				return
			}
			checkForbidden(t, err, tc.deny)
		})
	}

	t.Run("what stuck", func(t *testing.T) {
		a, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Set by the allowed cases, then removed by the prune's patch.
		if _, ok := a.Annotations["hotplugd.io/x"]; ok || a.Annotations["hotplugd.io/y"] != "" || a.Annotations["example.com/owner"] != "someone-else" {
			t.Errorf("node-a annotations %v, want example.com/owner kept and hotplugd.io/x pruned", a.Annotations)
		}
		for _, c := range a.Status.Conditions {
			if c.Type == "KubeletCapacityStale" {
				t.Errorf("node-a still has %+v after the prune's patch", c)
			}
		}
		if got := a.Status.Capacity[v1.ResourceCPU]; got.String() != "2" {
			t.Errorf("node-a capacity cpu %s, want 2", got.String())
		}
		b, err := admin.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for key := range b.Annotations {
			if strings.HasPrefix(key, "hotplugd.io/") {
				t.Errorf("node-b has annotation %s", key)
			}
		}
		if len(b.Status.Conditions) != 2 {
			t.Errorf("node-b conditions %+v, want its two", b.Status.Conditions)
		}
	})

	t.Run("read nodes", func(t *testing.T) {
		if _, err := sa.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); err != nil {
			t.Errorf("get: %v", err)
		}
		l, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 2 {
			t.Errorf("list: %d nodes, %v", len(l.Items), err)
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		w, err := sa.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		defer w.Stop()
		select {
		case ev := <-w.ResultChan():
			if n, ok := ev.Object.(*v1.Node); ev.Type != watch.Added || !ok || n.Name != "node-a" {
				t.Errorf("first watch event %s %T, want ADDED node-a", ev.Type, ev.Object)
			}
		case <-wctx.Done():
			t.Error("no watch event within 10 s")
		}
	})

	t.Run("events", func(t *testing.T) {
		now := metav1.Now()
		ev, err := sa.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &v1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "node-a.", Namespace: metav1.NamespaceDefault},
			InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "node-a", UID: types.UID("node-a"), APIVersion: "v1"},
			Reason:         "CapacityDrift", Message: "cpu 2 -> 1", Type: v1.EventTypeWarning,
			Source:         v1.EventSource{Component: "hotplugd", Host: "node-a"},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		// As client-go's recorder folds a repeat into the count.
		if _, err := sa.CoreV1().Events(metav1.NamespaceDefault).Patch(ctx, ev.Name, types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("patch: %v", err)
		}
		if err := sa.CoreV1().Events(metav1.NamespaceDefault).Delete(ctx, ev.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("delete of an event: %v, want 403", err)
		}
	})

	t.Run("verbs RBAC does not grant", func(t *testing.T) {
		checkForbidden(t, sa.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{}), `cannot delete resource "nodes"`)
		a, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = sa.CoreV1().Nodes().Update(ctx, a, metav1.UpdateOptions{})
		checkForbidden(t, err, `cannot update resource "nodes"`)
		_, err = sa.CoreV1().Nodes().UpdateStatus(ctx, a, metav1.UpdateOptions{})
		checkForbidden(t, err, `cannot update resource "nodes/status"`)
		_, err = sa.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-c"}}, metav1.CreateOptions{})
		checkForbidden(t, err, `cannot create resource "nodes"`)
		_, err = sa.CoreV1().Pods(hotplugdNamespace).List(ctx, metav1.ListOptions{})
		checkForbidden(t, err, `cannot list resource "pods"`)
		_, err = sa.CoreV1().Secrets(hotplugdNamespace).List(ctx, metav1.ListOptions{})
		checkForbidden(t, err, `cannot list resource "secrets"`)
	})

	// A token of the service account that is not bound to a pod names no
	// node, so it changes no Node at all.
	t.Run("token without a node", func(t *testing.T) {
		tr, err := admin.CoreV1().ServiceAccounts(hotplugdNamespace).CreateToken(ctx, hotplugdAccount, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkForbidden(t, patchNode(clientFor(t, s, tr.Status.Token), "node-a", "status", stale, metav1.PatchOptions{}), denyNoNodeInAuth)
	})

	// The policy holds the service account hotplugd of any namespace (an
	// overlay's namespace: moves it): one in "ops", bound to the same
	// ClusterRole, may write its own Node and no other.
	t.Run("another namespace", func(t *testing.T) {
		const ns = "ops"
		for _, o := range []struct {
			create func() error
		}{
			{func() error {
				_, err := admin.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
					Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{})
				return err
			}},
			{func() error {
				_, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: hotplugdAccount}}, metav1.CreateOptions{})
				return err
			}},
			{func() error {
				_, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
					ObjectMeta: metav1.ObjectMeta{Name: "hotplugd-" + ns},
					RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "hotplugd"},
					Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: hotplugdAccount, Namespace: ns}},
				}, metav1.CreateOptions{})
				return err
			}},
		} {
			if err := o.create(); err != nil {
				t.Fatal(err)
			}
		}
		moved := ds.DeepCopy()
		moved.Namespace = ns
		other := clientFor(t, s, podToken(t, admin, moved, "node-a"))
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := patchNode(other, "node-a", "status", `{"metadata":{"annotations":{"hotplugd.io/ns":"ops"}}}`, metav1.PatchOptions{})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("hotplugd of namespace %s cannot write its own Node after 30 s: %v", ns, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		checkForbidden(t, patchNode(other, "node-b", "status", stale, metav1.PatchOptions{}), denyOtherNode)
		checkForbidden(t, patchNode(other, "node-a", "status", `{"status":{"capacity":{"cpu":"1"}}}`, metav1.PatchOptions{}), denyCapacity)
	})

	// The policy binds only the hotplugd service account.
	t.Run("others unaffected", func(t *testing.T) {
		if err := patchNode(admin, "node-b", "", `{"metadata":{"labels":{"example.com/l":"1"}}}`, metav1.PatchOptions{}); err != nil {
			t.Errorf("admin patch of node-b's labels: %v", err)
		}
	})
}

var _ rest.WarningHandler = (*warnings)(nil)
