//go:build e2e

package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientcmdv1 "k8s.io/client-go/tools/clientcmd/api/v1"
	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/kubeapitest"
)

// nodeName is the guest's host name (test/e2e/node/image/etc/hostname),
// the name its kubelet and hotplugd give the Node.
const nodeName = "hotplugd-node"

// cluster is the API server on the host, started once on first use and
// stopped by cleanup.
var cluster struct {
	mu  sync.Mutex
	api *kubeapitest.Server
	err error
}

// api returns the running API server, starting it on first use.
func api(t *testing.T) *kubeapitest.Server {
	t.Helper()
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	if cluster.api == nil && cluster.err == nil {
		start := time.Now()
		// The serving certificate also names the guest's address of the
		// API server: the DaemonSet's pod verifies it by that address (its
		// in-cluster configuration sets no server name).
		host, _, _ := net.SplitHostPort(apiServerAddr)
		cluster.api, cluster.err = kubeapitest.Start(kubeapitest.Options{NodeAuthorization: true, ServingIPs: []net.IP{net.ParseIP(host)}})
		if cluster.err == nil {
			t.Logf("API server %s up in %v", cluster.api.URL, time.Since(start).Round(time.Millisecond))
		}
	}
	if cluster.err != nil {
		t.Fatalf("API server: %v", cluster.err)
	}
	return cluster.api
}

// stopCluster stops the API server for good: a test still running after
// cleanup (go test's -timeout near) gets an error from api, not a new
// server that nothing would stop.
func stopCluster() {
	cluster.mu.Lock()
	defer cluster.mu.Unlock()
	if cluster.api != nil {
		cluster.api.Stop()
		cluster.api = nil
	}
	cluster.err = errors.New("stopped: the run is ending")
}

// clusterPort is the API server's port on the host's 127.0.0.1.
func clusterPort(t *testing.T) int {
	t.Helper()
	u, err := url.Parse(api(t).URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kubeletClientPEM is where kubeadm's kubelet keeps its client certificate
// and key (after its TLS bootstrap), which kubelet.conf names.
const kubeletClientPEM = "/var/lib/kubelet/pki/kubelet-client-current.pem"

// guestKubeconfig is /etc/kubernetes/kubelet.conf of the guest as kubeadm
// join leaves it: the API server (through the guest's forward; its
// certificate is checked for the name it has, localhost) and the node's
// client certificate, system:node:<name> in system:nodes, which the
// returned PEM holds (for kubeletClientPEM). The API server runs the Node
// authorizer: this identity may write this Node only, and hotplugd uses
// it as docs/install.md says.
func guestKubeconfig(t *testing.T) (kubeconfig, clientPEM []byte) {
	t.Helper()
	s := api(t)
	ca, err := os.ReadFile(s.CACertFile)
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := s.ClientCert("system:node:"+nodeName, "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	const name = "default-cluster"
	cfg := clientcmdv1.Config{
		Kind: "Config", APIVersion: "v1",
		Clusters: []clientcmdv1.NamedCluster{{Name: name, Cluster: clientcmdv1.Cluster{
			Server: "https://" + apiServerAddr, CertificateAuthorityData: ca, TLSServerName: "localhost",
		}}},
		AuthInfos: []clientcmdv1.NamedAuthInfo{{Name: "default-auth", AuthInfo: clientcmdv1.AuthInfo{
			ClientCertificate: kubeletClientPEM, ClientKey: kubeletClientPEM,
		}}},
		Contexts:       []clientcmdv1.NamedContext{{Name: "default-context", Context: clientcmdv1.Context{Cluster: name, AuthInfo: "default-auth"}}},
		CurrentContext: "default-context",
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, append(cert, key...)
}

// kubeletConfig is /var/lib/kubelet/config.yaml, as kubeadm would write it
// for a node with the static CPU manager and half a CPU reserved for the
// system, which the static policy rounds up to CPU 0 for its exclusive
// pool (the lowest CPU first). The half left in allocatable is room for
// the DaemonSet's pod (10m) beside the pinned pod's whole CPU: with
// reservedSystemCPUs "0" allocatable would be 1 CPU, and the scheduler
// would preempt the pinned pod for the system-node-critical DaemonSet.
// The kubelet's API (10250, forwarded to the host) answers without
// authentication, for the summary API. A crashed container is restarted
// within 2 s (crashLoopBackOff, KubeletCrashLoopBackOffMax, beta and on
// since 1.35) instead of after a back-off that doubles up to 5 minutes: the
// fault trials kill the DaemonSet's pod's process dozens of times.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: systemd
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
staticPodPath: /etc/kubernetes/manifests
cpuManagerPolicy: static
systemReserved:
  cpu: 500m
nodeStatusUpdateFrequency: 2s
nodeStatusReportFrequency: 2s
crashLoopBackOff:
  maxContainerRestartPeriod: 2s
`

// kubeadmFlags is /var/lib/kubelet/kubeadm-flags.env, kubeadm's per-node
// flags.
const kubeadmFlags = `KUBELET_KUBEADM_ARGS="--node-ip=10.0.2.15"
`

// getNode reads the Node; nil when it does not exist (yet).
func getNode(t *testing.T) *v1.Node {
	t.Helper()
	n, err := api(t).Client().CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waitNode polls the Node every 100 ms until ok accepts it and returns the
// time since from; it fails the test after timeout, with what the Node
// showed last and why.
func waitNode(t *testing.T, from time.Time, timeout time.Duration, what string, ok func(*v1.Node) bool) time.Duration {
	t.Helper()
	var last *v1.Node
	if waitFor(timeout, 100*time.Millisecond, func() bool {
		last = getNode(t)
		return last != nil && ok(last)
	}) {
		return time.Since(from)
	}
	t.Fatalf("the Node did not show %s within %v; last capacity %v; its last Events:\n%s", what, timeout, capacityOf(last), lastNodeEvents(t, 6))
	return 0
}

// lastNodeEvents are the Node's last n Events, a line each (for failure
// messages: hotplugd says there why it restarted nothing).
func lastNodeEvents(t *testing.T, n int) string {
	t.Helper()
	list, err := api(t).Client().CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName,
	})
	if err != nil {
		return err.Error()
	}
	evs := list.Items
	slices.SortFunc(evs, func(a, b v1.Event) int { return a.LastTimestamp.Compare(b.LastTimestamp.Time) })
	if len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "%s %s %s x%d: %s\n", e.LastTimestamp.UTC().Format(time.RFC3339), e.Type, e.Reason, max(e.Count, 1), e.Message)
	}
	return b.String()
}

// holdsFor checks that the Node keeps satisfying ok for d (polling every
// 500 ms); false with the Node that did not.
func holdsFor(t *testing.T, d time.Duration, ok func(*v1.Node) bool) (*v1.Node, bool) {
	t.Helper()
	var bad *v1.Node
	waitFor(d, 500*time.Millisecond, func() bool {
		if n := getNode(t); n != nil && !ok(n) {
			bad = n
			return true
		}
		return false
	})
	return bad, bad == nil
}

func capacityOf(n *v1.Node) string {
	if n == nil {
		return "(no Node)"
	}
	return fmt.Sprintf("capacity %s, allocatable %s", resources(n.Status.Capacity), resources(n.Status.Allocatable))
}

func resources(l v1.ResourceList) string {
	return fmt.Sprintf("cpu=%s memory=%s hugepages-2Mi=%s", l.Cpu(), l.Memory(), qty(l, "hugepages-2Mi"))
}

func qty(l v1.ResourceList, name v1.ResourceName) *resource.Quantity {
	q, ok := l[name]
	if !ok {
		return resource.NewQuantity(0, resource.BinarySI)
	}
	return &q
}

// pinnedPod is a Guaranteed pod with one exclusive CPU, bound to the node
// (no scheduler runs), with hostNetwork (the node runs no CNI plugin).
func pinnedPod(image string) *v1.Pod {
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("64Mi")}
	grace := int64(5)
	no := false
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: "default"},
		Spec: v1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			Containers: []v1.Container{{
				Name: "work", Image: image, ImagePullPolicy: v1.PullNever,
				Resources: v1.ResourceRequirements{Requests: res, Limits: res},
			}},
		},
	}
}

// forgetNode removes what an earlier test of this run left in the API
// server for the node: its pinned pod (at once: no kubelet of that node
// runs any more) and its Node, so that a new node VM joins as a new node.
func forgetNode(t *testing.T) {
	t.Helper()
	c := api(t).Client()
	ctx := context.Background()
	now := int64(0)
	if err := c.CoreV1().Pods("default").Delete(ctx, "pinned", metav1.DeleteOptions{GracePeriodSeconds: &now}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if err := c.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if !waitFor(time.Minute, 200*time.Millisecond, func() bool {
		_, perr := c.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{})
		return apierrors.IsNotFound(perr) && getNode(t) == nil
	}) {
		t.Fatal("the pinned pod or the Node of an earlier test is still there a minute after its deletion")
	}
}
