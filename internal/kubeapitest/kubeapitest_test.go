package kubeapitest

import (
	"bytes"
	"context"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
)

// startServer starts a Server for one test, or skips the test when the
// binaries are not built.
func startServer(t *testing.T, o Options) *Server {
	t.Helper()
	bin, err := BinDir()
	if err != nil {
		t.Skip(err)
	}
	o.BinDir = bin
	start := time.Now()
	s, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Logf("etcd and kube-apiserver ready in %v", time.Since(start).Round(time.Millisecond))
	return s
}

func createNode(t *testing.T, c kubernetes.Interface, name string) *v1.Node {
	t.Helper()
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Status: v1.NodeStatus{
			Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")},
			Conditions: []v1.NodeCondition{{
				Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
			}},
		},
	}
	got, err := c.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// conditionTypes are the types of n's conditions, sorted: a strategic-merge
// patch puts a new condition first.
func conditionTypes(n *v1.Node) []v1.NodeConditionType {
	var types []v1.NodeConditionType
	for _, c := range n.Status.Conditions {
		types = append(types, c.Type)
	}
	slices.Sort(types)
	return types
}

// staleConditionPatch is the strategic-merge patch hotplugd sends to
// nodes/status: conditions merge by type.
const staleConditionPatch = `{"status":{"conditions":[{"type":"KubeletCapacityStale","status":"True","reason":"CapacityDrift","message":"cpu 2 -> 1","lastHeartbeatTime":"2026-01-01T00:00:00Z","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`

func TestServer(t *testing.T) {
	s := startServer(t, Options{})
	ctx := context.Background()
	c := s.Client()

	// Created with its status, as a kubelet registers a Node.
	createNode(t, c, "node-a")
	n, err := c.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, []byte(staleConditionPatch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]v1.NodeConditionType{"KubeletCapacityStale", v1.NodeReady}, conditionTypes(n)); diff != "" {
		t.Errorf("conditions after the status patch (-want +got):\n%s", diff)
	}
	if got := n.Status.Capacity[v1.ResourceCPU]; got.String() != "2" {
		t.Errorf("capacity cpu = %s after the status patch, want 2", got.String())
	}

	ev := &v1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "node-a.", Namespace: metav1.NamespaceDefault},
		InvolvedObject: v1.ObjectReference{Kind: "Node", Name: "node-a", UID: n.UID, APIVersion: "v1"},
		Reason:         "CapacityDrift",
		Message:        "cpu 2 -> 1",
		Type:           v1.EventTypeWarning,
		Source:         v1.EventSource{Component: "hotplugd", Host: "node-a"},
		FirstTimestamp: metav1.Now(),
		LastTimestamp:  metav1.Now(),
		Count:          1,
	}
	if _, err := c.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The kubeconfig reaches the same server.
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(kc, s.AdminToken); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	kcClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kcClient.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); err != nil {
		t.Fatalf("client from the kubeconfig: %v", err)
	}

	// An outage: the client fails, then works again on the same URL with
	// the same token, and etcd kept the objects.
	start := time.Now()
	if err := s.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver stopped in %v", time.Since(start).Round(time.Millisecond))
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, err := c.CoreV1().Nodes().Get(short, "node-a", metav1.GetOptions{}); err == nil {
		t.Fatal("Get succeeded while kube-apiserver was stopped")
	}
	if err := s.StopAPIServer(); err == nil {
		t.Error("StopAPIServer of a stopped server: no error")
	}
	start = time.Now()
	if err := s.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver restarted and ready in %v", time.Since(start).Round(time.Millisecond))
	if err := s.StartAPIServer(); err == nil {
		t.Error("StartAPIServer of a running server: no error")
	}
	n, err = c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get after the restart: %v", err)
	}
	if diff := cmp.Diff([]v1.NodeConditionType{"KubeletCapacityStale", v1.NodeReady}, conditionTypes(n)); diff != "" {
		t.Errorf("conditions after the restart (-want +got):\n%s", diff)
	}
	evs, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs.Items) != 1 || evs.Items[0].Reason != "CapacityDrift" {
		t.Errorf("events of node-a after the restart: %+v, want the one CapacityDrift", evs.Items)
	}

	// Without Options.Log, each server logs to a file in Dir, a restart
	// appending to it.
	b, err := os.ReadFile(filepath.Join(s.Dir, "kube-apiserver.log"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "==== kubeapitest: kube-apiserver "); got != 2 {
		t.Errorf("kube-apiserver.log has %d starts, want 2", got)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "etcd.log")); err != nil {
		t.Error(err)
	}
	s.Stop()
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("Dir after Stop: %v, want it removed", err)
	}
}

// TestStatusPatchAnnotations records what the real API server does with
// metadata in a strategic-merge patch of nodes/status: it keeps metadata
// changes (annotations and labels alike) and drops spec changes, while a
// patch of nodes drops status changes. So one patch of nodes/status can
// write hotplugd's condition and annotations together.
//
// The server logs to Options.Log here, which the test checks too.
func TestStatusPatchAnnotations(t *testing.T) {
	var log bytes.Buffer
	s := startServer(t, Options{Log: &log})
	ctx := context.Background()
	c := s.Client()
	createNode(t, c, "node-a")

	patch := `{"metadata":{"annotations":{"hotplugd.io/x":"1"},"labels":{"hotplugd.io/l":"1"}},"spec":{"unschedulable":true},` + staleConditionPatch[1:]
	if _, err := c.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	n, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Annotations["hotplugd.io/x"]; got != "1" {
		t.Errorf("annotation hotplugd.io/x = %q after a nodes/status patch, want it persisted", got)
	}
	if got := n.Labels["hotplugd.io/l"]; got != "1" {
		t.Errorf("label hotplugd.io/l = %q after a nodes/status patch, want it persisted", got)
	}
	if n.Spec.Unschedulable {
		t.Error("spec.unschedulable persisted through nodes/status, want it reset")
	}
	if diff := cmp.Diff([]v1.NodeConditionType{"KubeletCapacityStale", v1.NodeReady}, conditionTypes(n)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}

	// And the main resource ignores status.
	n, err = c.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType,
		[]byte(`{"metadata":{"annotations":{"hotplugd.io/y":"2"}},"status":{"capacity":{"cpu":"64"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.Capacity[v1.ResourceCPU]; got.String() != "2" || n.Annotations["hotplugd.io/y"] != "2" {
		t.Errorf("after a nodes patch: cpu %s (want 2, status ignored), annotation hotplugd.io/y %q (want 2)", got.String(), n.Annotations["hotplugd.io/y"])
	}

	s.Stop() // the output is complete once the processes are gone
	dir, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(dir, "kube-apiserver"), "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	if !strings.Contains(log.String(), "Version: "+version) {
		t.Errorf("Options.Log lacks kube-apiserver's version line (Version: %s); it has %d bytes", version, log.Len())
	}
}

func TestBinDirEnv(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvBinDir, dir)
	if _, err := BinDir(); err == nil {
		t.Fatalf("BinDir with an empty $%s: no error", EnvBinDir)
	}
	fakeBinaries(t, dir)
	got, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if got != dir {
		t.Errorf("BinDir() = %q, want $%s = %q", got, EnvBinDir, dir)
	}
}

func TestBinDirNotBuilt(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	t.Setenv("HOTPLUGD_KUBEBIN_CACHE", t.TempDir())
	_, err := BinDir()
	if err == nil || !strings.Contains(err.Error(), "hack/kubebin.sh") {
		t.Errorf("BinDir() with nothing built: error %v, want one naming hack/kubebin.sh", err)
	}
}

// TestBinDirIsTheScripts checks that BinDir looks where hack/kubebin.sh
// builds to: under each cache setting, with fake programs in the
// directory the script prints, BinDir returns it and the script (with a
// `go` that fails first in PATH, so it cannot start a build) finds them.
func TestBinDirIsTheScripts(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	goVersion, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []struct{ name, value string }{
		{"HOTPLUGD_KUBEBIN_CACHE", t.TempDir()},
		{"XDG_CACHE_HOME", t.TempDir()},
		{"HOME", t.TempDir()},
	} {
		t.Run(env.name, func(t *testing.T) {
			t.Setenv(EnvBinDir, "")
			for _, name := range []string{"HOTPLUGD_KUBEBIN_CACHE", "XDG_CACHE_HOME"} {
				t.Setenv(name, "")
			}
			t.Setenv(env.name, env.value)
			if _, err := BinDir(); err == nil {
				t.Fatal("BinDir with nothing built: no error")
			}
			want, err := cacheDir(root)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(want, env.value+string(filepath.Separator)) {
				t.Fatalf("the script's directory %q is not under $%s = %q", want, env.name, env.value)
			}
			if err := os.MkdirAll(want, 0o755); err != nil {
				t.Fatal(err)
			}
			fakeBinaries(t, want)
			got, err := BinDir()
			if err != nil || got != want {
				t.Fatalf("BinDir() = %q, %v; want %q", got, err, want)
			}
			stub := t.TempDir()
			script := "#!/bin/sh\n[ \"$1 $2\" = \"env GOVERSION\" ] && { echo " + strings.TrimSpace(string(goVersion)) + "; exit 0; }\nexit 1\n"
			if err := os.WriteFile(filepath.Join(stub, "go"), []byte(script), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", filepath.Join(root, "hack", "kubebin.sh"))
			cmd.Env = append(os.Environ(), "PATH="+stub+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("hack/kubebin.sh with the programs in place: %v", err)
			}
			if got := strings.TrimSpace(string(out)); got != want {
				t.Errorf("hack/kubebin.sh printed %q, BinDir %q", got, want)
			}
		})
	}
}

func fakeBinaries(t *testing.T, dir string) {
	t.Helper()
	for _, name := range binaries {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStartFailure: a server that exits at once makes Start fail with its
// output, and leave nothing behind.
func TestStartFailure(t *testing.T) {
	bin := t.TempDir()
	fakeBinaries(t, bin)
	if err := os.WriteFile(filepath.Join(bin, "etcd"), []byte("#!/bin/sh\necho 'etcd: cannot start' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	_, err := Start(Options{BinDir: bin})
	if err == nil || !strings.Contains(err.Error(), "etcd exited") || !strings.Contains(err.Error(), "etcd: cannot start") {
		t.Errorf("Start: error %v, want etcd's exit and output", err)
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 0 {
		t.Errorf("Start left %v in $TMPDIR", left)
	}
}

// TestControllers: with StartControllers, a Pod is scheduled onto a Node by
// kube-scheduler, and kube-controller-manager publishes the API server's CA
// in every namespace (what a Pod's service account volume mounts).
func TestControllers(t *testing.T) {
	s := startServer(t, Options{})
	if err := s.StartControllers(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := s.Client()
	createNode(t, c, "node-a")
	// Room for a pod (the scheduler reads allocatable). The node lifecycle
	// controller may change the Node meanwhile (its taints): a conflict is
	// retried on the Node as it is now.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return err
		}
		n.Status.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("10")}
		_, err = c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"},
		Spec: v1.PodSpec{
			Containers:  []v1.Container{{Name: "c", Image: "example.invalid/c"}},
			Tolerations: []v1.Toleration{{Operator: v1.TolerationOpExists}},
		},
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var node, ca string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && (node == "" || ca == ""); time.Sleep(100 * time.Millisecond) {
		if p, err := c.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{}); err == nil {
			node = p.Spec.NodeName
		}
		if cm, err := c.CoreV1().ConfigMaps("default").Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err == nil {
			ca = cm.Data["ca.crt"]
		}
	}
	if node != "node-a" {
		t.Errorf("pod scheduled to %q, want node-a", node)
	}
	want, _ := os.ReadFile(s.CACertFile)
	if ca != string(want) {
		t.Errorf("kube-root-ca.crt in default is %q, want the serving certificate", ca)
	}
	s.StopControllers()
	s.StopControllers() // twice: no-op
}

// TestNodeAuthorization: with the Node authorizer, a client certificate of
// system:node:node-a patches node-a's status and is refused node-b's; a
// certificate of another CA is not a user at all.
func TestNodeAuthorization(t *testing.T) {
	s := startServer(t, Options{NodeAuthorization: true})
	ctx := context.Background()
	createNode(t, s.Client(), "node-a")
	createNode(t, s.Client(), "node-b")
	cert, key, err := s.ClientCert("system:node:node-a", "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.TokenConfig("")
	cfg.CertData, cfg.KeyData = cert, key
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, "node-a", types.StrategicMergePatchType, []byte(staleConditionPatch), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node-a patching its own status: %v", err)
	}
	_, err = c.CoreV1().Nodes().Patch(ctx, "node-b", types.StrategicMergePatchType, []byte(staleConditionPatch), metav1.PatchOptions{}, "status")
	if !apierrors.IsForbidden(err) {
		t.Errorf("node-a patching node-b's status: %v, want Forbidden", err)
	}
	// A certificate the server's client CA did not sign.
	other, otherKey, err := newCert(&x509.Certificate{Subject: pkix.Name{CommonName: "system:node:node-a", Organization: []string{"system:nodes"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.CertData, cfg.KeyData = other, otherKey
	c, err = kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}); !apierrors.IsUnauthorized(err) {
		t.Errorf("a certificate of another CA: %v, want Unauthorized", err)
	}
}

// TestServingCertNamesServingIPs: a client that reaches the server at an
// address of Options.ServingIPs (a pod's in-cluster configuration through
// a forward) verifies it; another address does not.
func TestServingCertNamesServingIPs(t *testing.T) {
	certPEM, _, err := selfSignedCert([]net.IP{net.IPv4(10, 0, 2, 100)})
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"127.0.0.1", "localhost", "10.0.2.100"} {
		if err := cert.VerifyHostname(h); err != nil {
			t.Errorf("the serving certificate does not name %s: %v", h, err)
		}
	}
	if err := cert.VerifyHostname("10.0.2.101"); err == nil {
		t.Error("the serving certificate names 10.0.2.101, which no option gave")
	}
}
