//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/utils/ptr"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/hacktool"
	"github.com/hotplugd/hotplugd/pkg/control"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// podExec runs command in the pod's container through the API server's
// pods/exec, as `kubectl exec` does (WebSocket, falling back to SPDY), and
// returns its output. The API server reaches the test's kubelet by the
// Node's host name (kubeapitest.Options.KubeletHosts).
func podExec(t *testing.T, cfg *rest.Config, c kubernetes.Interface, p *v1.Pod, command ...string) (stdout, stderr string, err error) {
	t.Helper()
	req := c.CoreV1().RESTClient().Post().Resource("pods").Namespace(p.Namespace).Name(p.Name).SubResource("exec").
		VersionedParams(&v1.PodExecOptions{Container: p.Spec.Containers[0].Name, Command: command, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return "", "", err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return "", "", err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool { return true })
	if err != nil {
		return "", "", err
	}
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &o, Stderr: &e})
	return o.String(), e.String(), err
}

// hotplugdLeftovers is what of hotplugd's the Node still carries: the
// condition and annotations under hotplugd.io/.
func hotplugdLeftovers(n *v1.Node) []string {
	var left []string
	if c := staleCondition(n); c != nil {
		left = append(left, "condition "+string(c.Type))
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, nodepatch.AnnotationPrefix) {
			left = append(left, "annotation "+k)
		}
	}
	return left
}

// statusThroughExec asks the pod's hotplugd for its status with `hotplugd
// status -o json` through pods/exec, and checks that it found the node's
// kubelet and compared the Node.
func statusThroughExec(t *testing.T, s *suite, k *kubelet, p *v1.Pod) {
	t.Helper()
	out, errOut, err := podExec(t, s.api.RestConfig(), s.api.Client(), p, "/hotplugd", "status", "-o", "json")
	if err != nil {
		t.Fatalf("kubectl exec %s -- /hotplugd status -o json: %v\nstderr: %s\nthe kubelet's log:\n%s", p.Name, err, errOut, k.logTail(2000))
	}
	var st control.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("hotplugd status -o json: %v\n%s", err, out)
	}
	if st.Mode != "report" || st.Machine == nil || st.Kubelet == nil || st.Kubelet.RootDir != k.RootDir || st.Node == nil || st.Node.Condition == nil {
		t.Errorf("hotplugd status: mode %q, machine %+v, kubelet %+v, node %+v; want report, the kubelet in %s and the Node with its condition:\n%s",
			st.Mode, st.Machine, st.Kubelet, st.Node, k.RootDir, out)
	}
	text, _, err := podExec(t, s.api.RestConfig(), s.api.Client(), p, "/hotplugd", "status")
	if err != nil || !strings.Contains(text, "Next ") {
		t.Errorf("kubectl exec %s -- /hotplugd status: %v\n%s", p.Name, err, text)
	}
	t.Logf("kubectl exec %s -- /hotplugd status:\n%s", p.Name, text)
}

// uninstallDaemonSet is docs/install.md's uninstall of a DaemonSet: the
// DaemonSet deleted in the foreground (its pods go first, each pruning its
// Node at SIGTERM), then the rest by removeRest. The Node then carries
// nothing of hotplugd's.
func uninstallDaemonSet(t *testing.T, s *suite, removeRest func()) {
	t.Helper()
	ctx := context.Background()
	c := s.api.Client()
	err := c.AppsV1().DaemonSets(dsNamespace).Delete(ctx, dsName, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)})
	if err != nil {
		t.Fatal(err)
	}
	// --wait: until the DaemonSet, held by its foreground finalizer until
	// its pods are gone, is gone.
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := c.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && len(daemonPods(t, s)) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the DaemonSet or its pods are still there 90 s after a foreground deletion (%v):\n%s", err, deploytest.Describe(daemonPods(t, s)))
		}
	}
	removeRest()
	n, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if left := hotplugdLeftovers(n); len(left) > 0 {
		t.Errorf("after the uninstall the Node still carries %q", left)
	}
}

// TestOperatorWalkthrough follows docs/install.md as an operator would on a
// one-node cluster (a kubelet on containerd in kubeadm's layout): the
// DaemonSet installed with kustomize, `hotplugd status` through `kubectl
// exec`, the uninstall (the Node left with nothing of hotplugd's); the
// same with the Helm chart; and the kubelet restarted afterwards comes up
// and reports its Node. The systemd install and its uninstall are
// test/e2e/node's (a systemd node).
func TestOperatorWalkthrough(t *testing.T) {
	s := setup(t)
	acquireMachine(t)
	img, err := hotplugdImage()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := workloadImage(); err != nil {
		t.Fatal(err)
	}
	helm, err := hacktool.Path("helm")
	if err != nil {
		t.Skipf("SKIPPED: helm cannot be built here: %v", err)
	}
	if err := s.api.StartControllers(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.api.StopControllers)
	k := startKubeletWith(t, s, kubeletSpec{KubeadmLayout: true})
	c := s.api.Client()
	ctx := context.Background()
	apiPort := strings.TrimPrefix(s.api.URL, "https://127.0.0.1:")
	// Past --kubelet-grace, so that the pods find the Node current at once.
	time.Sleep(time.Until(k.Started.Add(21 * time.Second)))

	t.Run("kustomize", func(t *testing.T) {
		objs := deploytest.Build(t, repoRoot, filepath.Join(s.dir, "walkthrough-overlay"),
			deploytest.Overlay{Image: img, APIHost: "127.0.0.1", APIPort: apiPort})
		t0 := time.Now()
		removeRest := deploytest.Apply(t, s.api.RestConfig(), objs)
		removed := false
		t.Cleanup(func() {
			if !removed {
				removeRest()
			}
		})
		pod, took := waitDaemonPod(t, s, k, t0, img.Ref(), "", 2*time.Minute)
		if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
			t.Fatalf("the pod did not find the Node current: %+v; its log:\n%s", staleCondition(n), podLog(t, k, pod))
		}
		statusThroughExec(t, s, k, pod)
		uninstallDaemonSet(t, s, removeRest)
		removed = true
		results.add(result{scenario: "9 walkthrough", side: "pod", change: "kubectl apply -k, exec hotplugd status, uninstall", correct: "pod Ready " + seconds(took), writes: -1,
			note: "status through pods/exec; DaemonSet deleted in the foreground, then the rest: the Node carries nothing of hotplugd's"})
	})

	t.Run("helm", func(t *testing.T) {
		kubeconfig := filepath.Join(s.dir, "walkthrough-kubeconfig")
		if err := s.api.WriteKubeconfig(kubeconfig, s.api.AdminToken); err != nil {
			t.Fatal(err)
		}
		helmRun := func(args ...string) {
			t.Helper()
			cmd := exec.Command(helm, append(args, "--kubeconfig", kubeconfig)...)
			// Helm's caches and configuration under the test's directory.
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(s.dir, "helm", "cache"),
				"HELM_CONFIG_HOME="+filepath.Join(s.dir, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(s.dir, "helm", "data"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		// The namespace, labelled, as docs/install.md creates it, once the
		// kustomize uninstall's is gone (a namespace takes a moment to end).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			_, err := c.CoreV1().Namespaces().Get(ctx, dsNamespace, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s still there 60 s after its deletion: %v", dsNamespace, err)
			}
		}
		ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dsNamespace, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CoreV1().Namespaces().Delete(ctx, dsNamespace, metav1.DeleteOptions{}) })
		t0 := time.Now()
		helmRun("install", "hotplugd", filepath.Join(repoRoot, "deploy", "helm", "hotplugd"), "--namespace", dsNamespace,
			"--set", "image.repository="+img.Name, "--set", "image.digest="+img.Digest,
			// As the kustomize test overlay: no kube-proxy routes the
			// kubernetes Service here.
			"--set-json", fmt.Sprintf(`extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":"127.0.0.1"},{"name":"KUBERNETES_SERVICE_PORT","value":%q}]`, apiPort))
		uninstalled := false
		t.Cleanup(func() {
			if !uninstalled {
				helmRun("uninstall", "hotplugd", "--namespace", dsNamespace, "--wait")
			}
		})
		pod, took := waitDaemonPod(t, s, k, t0, img.Ref(), "", 2*time.Minute)
		if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
			t.Fatalf("the pod did not find the Node current: %+v; its log:\n%s", staleCondition(n), podLog(t, k, pod))
		}
		statusThroughExec(t, s, k, pod)
		uninstallDaemonSet(t, s, func() { helmRun("uninstall", "hotplugd", "--namespace", dsNamespace, "--wait") })
		uninstalled = true
		results.add(result{scenario: "9 walkthrough", side: "pod", change: "helm install, exec hotplugd status, uninstall", correct: "pod Ready " + seconds(took), writes: -1,
			note: "the chart with the test's image and API address; the Node carries nothing of hotplugd's after helm uninstall"})
	})

	t.Run("kubelet restarts after the uninstall", func(t *testing.T) {
		t1 := time.Now()
		k.Stop(t)
		k.Start(t)
		k.waitReady(t, 60*time.Second)
		if _, n, ok := waitNode(t, s, t1, 60*time.Second, func(n *v1.Node) bool {
			for _, c := range n.Status.Conditions {
				if c.Type == v1.NodeReady && c.Status == v1.ConditionTrue && c.LastHeartbeatTime.After(t1) {
					return true
				}
			}
			return false
		}); !ok {
			t.Fatalf("the kubelet's Node is not Ready after its restart: %+v", n.Status.Conditions)
		} else if left := hotplugdLeftovers(n); len(left) > 0 {
			t.Errorf("after the kubelet's restart the Node carries %q", left)
		}
	})
}
