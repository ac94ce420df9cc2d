package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/kubeapitest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/pkg/control"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The API server shared by the tests of this package that do not stop it.
var (
	sharedMu  sync.Mutex
	shared    *kubeapitest.Server
	sharedErr error
)

// sharedAPIServer starts the package's API server on first use; TestMain
// stops it. Tests skip, saying why, when the binaries are not built.
func sharedAPIServer(t testing.TB) *kubeapitest.Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		if _, err := kubeapitest.BinDir(); err != nil {
			t.Skipf("SKIPPED: no kube-apiserver: %v", err)
		}
		shared, sharedErr = kubeapitest.Start(kubeapitest.Options{})
		if sharedErr == nil {
			sharedErr = createBudgetNamespace(shared)
		}
	}
	if sharedErr != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", sharedErr)
	}
	return shared
}

func stopSharedAPIServer() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared != nil {
		shared.Stop()
	}
}

// ownAPIServer is a server of the test's own, for tests that stop it.
func ownAPIServer(t testing.TB) *kubeapitest.Server {
	t.Helper()
	if _, err := kubeapitest.BinDir(); err != nil {
		t.Skipf("SKIPPED: no kube-apiserver: %v", err)
	}
	s, err := kubeapitest.Start(kubeapitest.Options{})
	if err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(s.Stop)
	if err := createBudgetNamespace(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// budgetNamespace gives node a restart budget of its own: a namespace for the
// budget's Leases, so that tests that run at once do not wait for each
// other's hold (the budget across nodes is test/fleet's and
// TestIntegrationRestartBudget's), while each remedy still takes and gives
// back a hold, as with the default --restart-budget=1.
func budgetNamespace(t testing.TB, c kubernetes.Interface, node string) string {
	t.Helper()
	ns := "budget-" + node
	if _, err := c.CoreV1().Namespaces().Create(context.Background(),
		&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	return ns
}

// createBudgetNamespace makes the namespace of the restart budget's Leases
// (hotplugd run --restart-budget, 1 by default, in hotplugd-system): the
// remedy restarts nothing without it.
func createBudgetNamespace(s *kubeapitest.Server) error {
	_, err := s.Client().CoreV1().Namespaces().Create(context.Background(),
		&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "hotplugd-system"}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating namespace hotplugd-system: %w", err)
	}
	return nil
}

// kubeletConfig writes a KubeletConfiguration with reservations, so that
// allocatable differs from capacity, and healthz off (no kubelet runs here).
func kubeletConfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	cfg := `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 0
systemReserved:
  memory: 200Mi
kubeReserved:
  cpu: 100m
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// machineStatus is what a kubelet with configuration cfgPath, started now,
// reports: capacity and allocatable, from this machine.
func machineStatus(t testing.TB, cfgPath string) (capacity, allocatable v1.ResourceList) {
	t.Helper()
	capacity, allocatable, err := predictStatus(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return capacity, allocatable
}

func predictStatus(cfgPath string) (capacity, allocatable v1.ResourceList, err error) {
	snap, err := topology.NewFS("/sys", "/proc").CapacitySnapshot()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := kubeletconfig.Load(cfgPath)
	if err != nil {
		return nil, nil, err
	}
	alloc, err := snap.Allocatable(cfg)
	return snap.Capacity(), alloc, err
}

var nodeSeq int

// createNode registers a Node with the given status resources, as a kubelet
// does (plus pods, which hotplugd must leave alone).
func createNode(t testing.TB, c kubernetes.Interface, prefix string, capacity, allocatable v1.ResourceList) string {
	t.Helper()
	return createNodeOf(t, c, prefix, "v1.36.3", capacity, allocatable)
}

// createNodeOf registers a Node as a kubelet of the given version does:
// status.nodeInfo.kubeletVersion is how hotplugd learns the version of a
// kubelet it does not see as a process (--kubelet-config).
func createNodeOf(t testing.TB, c kubernetes.Interface, prefix, kubeletVersion string, capacity, allocatable v1.ResourceList) string {
	t.Helper()
	nodeSeq++
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), nodeSeq)
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": kubeletVersion}}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	setStatus(t, c, n.Name, capacity, allocatable)
	t.Cleanup(func() { c.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// setStatus puts capacity and allocatable on the Node's status, as a
// (re)started kubelet does.
func setStatus(t testing.TB, c kubernetes.Interface, node string, capacity, allocatable v1.ResourceList) {
	t.Helper()
	if err := patchStatus(c, node, capacity, allocatable); err != nil {
		t.Fatal(err)
	}
}

func patchStatus(c kubernetes.Interface, node string, capacity, allocatable v1.ResourceList) error {
	capacity, allocatable = capacity.DeepCopy(), allocatable.DeepCopy()
	capacity["pods"], allocatable["pods"] = mustQuantity("110"), mustQuantity("110")
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"capacity": capacity, "allocatable": allocatable}})
	_, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status")
	return err
}

func withCPU(l v1.ResourceList, cpu string) v1.ResourceList {
	l = l.DeepCopy()
	l[v1.ResourceCPU] = mustQuantity(cpu)
	return l
}

func kubeconfigFor(t testing.TB, s *kubeapitest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := s.WriteKubeconfig(path, s.AdminToken); err != nil {
		t.Fatal(err)
	}
	return path
}

// condition returns the Node's KubeletCapacityStale condition, nil when absent.
func condition(t testing.TB, c kubernetes.Interface, node string) (*v1.NodeCondition, *v1.Node) {
	t.Helper()
	n, err := c.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == nodepatch.ConditionType {
			return &n.Status.Conditions[i], n
		}
	}
	return nil, n
}

// waitCondition polls (every 20 ms) until the condition has status, and
// returns it with when it was first seen so.
func waitCondition(t testing.TB, c kubernetes.Interface, node string, status v1.ConditionStatus, timeout time.Duration) (*v1.NodeCondition, *v1.Node, time.Time) {
	t.Helper()
	return waitConditionReason(t, c, node, status, "", timeout)
}

// waitConditionReason is waitCondition for a status and reason ("": any).
func waitConditionReason(t testing.TB, c kubernetes.Interface, node string, status v1.ConditionStatus, reason string, timeout time.Duration) (*v1.NodeCondition, *v1.Node, time.Time) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		cond, n := condition(t, c, node)
		if cond != nil && cond.Status == status && (reason == "" || cond.Reason == reason) {
			return cond, n, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("condition %s of node %s not %s within %v: %+v", nodepatch.ConditionType, node, status, timeout, cond)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// events returns the Events on the Node with reason, oldest first.
func events(t testing.TB, c kubernetes.Interface, node, reason string) []v1.Event {
	t.Helper()
	list, err := c.CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitEvents waits until there are n Events with reason on the Node.
func waitEvents(t testing.TB, c kubernetes.Interface, node, reason string, n int, timeout time.Duration) []v1.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ev := events(t, c, node, reason)
		if len(ev) >= n || time.Now().After(deadline) {
			if len(ev) != n {
				t.Fatalf("%d %s events on %s, want %d: %+v", len(ev), reason, node, n, ev)
			}
			return ev
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIntegrationNodeReport: a Node registered with stale capacity gets the
// Event, the condition True and the annotations within 2 s of the daemon's
// first reconcile; patched to match (as a restarted kubelet does), the
// condition is False within 2 s; a daemon restart keeps the transition time
// and writes nothing.
func TestIntegrationNodeReport(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	// The kubelet started when the machine had 64 CPUs.
	node := createNode(t, c, "stale", withCPU(capacity, "64"), withCPU(allocatable, "63900m"))
	args := []string{"--node-name", node, "--kubeconfig", kubeconfigFor(t, srv), "--kubelet-config", cfg,
		"--kubelet-root-dir", t.TempDir(), "--resync", "0"}

	d := startClusterDaemon(t, args...)
	first := d.WaitFor(10*time.Second, func(e logEntry) bool { return e.Msg == "topology" }).Time
	cond, n, seen := waitCondition(t, c, node, v1.ConditionTrue, 10*time.Second)
	t.Logf("condition True %v after the first reconcile", seen.Sub(first).Round(time.Millisecond))
	if seen.Sub(first) > 2*time.Second {
		t.Errorf("condition True %v after the first reconcile, want within 2s", seen.Sub(first))
	}
	wantDrift := fmt.Sprintf("capacity cpu 64 -> %s, allocatable cpu 63900m -> %s", q(capacity, "cpu"), q(allocatable, "cpu"))
	if cond.Reason != nodepatch.ReasonCapacityDrift || !strings.Contains(cond.Message, wantDrift) {
		t.Errorf("condition %+v, want reason %s and %q in the message", cond, nodepatch.ReasonCapacityDrift, wantDrift)
	}
	if got, want := n.Annotations[nodepatch.AnnotationCapacity], nodepatch.FormatResources(capacity); got != want {
		t.Errorf("annotation %s = %q, want %q", nodepatch.AnnotationCapacity, got, want)
	}
	if got, want := n.Annotations[nodepatch.AnnotationAllocatable], nodepatch.FormatResources(allocatable); got != want {
		t.Errorf("annotation %s = %q, want %q", nodepatch.AnnotationAllocatable, got, want)
	}
	if ts, err := time.Parse(time.RFC3339, n.Annotations[nodepatch.AnnotationLastChange]); err != nil || time.Since(ts) > time.Minute {
		t.Errorf("annotation %s = %q (%v)", nodepatch.AnnotationLastChange, n.Annotations[nodepatch.AnnotationLastChange], err)
	}
	ev := waitEvents(t, c, node, nodepatch.ReasonCapacityDrift, 1, 2*time.Second)
	if ev[0].Type != v1.EventTypeWarning || !strings.Contains(ev[0].Message, wantDrift) || ev[0].Source.Component != "hotplugd" {
		t.Errorf("event %s %q from %s", ev[0].Type, ev[0].Message, ev[0].Source.Component)
	}
	if n.Status.Capacity.Pods().String() != "110" {
		t.Errorf("pods capacity touched: %v", n.Status.Capacity)
	}

	// A daemon restart while the drift lasts: same transition time, no
	// second Event, nothing written.
	trueSince := cond.LastTransitionTime
	d.Stop()
	d = startClusterDaemon(t, args...)
	time.Sleep(2 * time.Second)
	if cond, _ := condition(t, c, node); cond.Status != v1.ConditionTrue || !cond.LastTransitionTime.Equal(&trueSince) {
		t.Errorf("after a daemon restart: %+v, want True since %v", cond, trueSince)
	}
	if w := d.Metric(`hotplugd_node_writes_total{what="status"}`) + d.Metric(`hotplugd_node_writes_total{what="event"}`); w != 0 {
		t.Errorf("the restarted daemon wrote %v times, want 0", w)
	}
	waitEvents(t, c, node, nodepatch.ReasonCapacityDrift, 1, 0)

	// The kubelet restarted and reports this machine: False within 2 s.
	patched := time.Now()
	setStatus(t, c, node, capacity, allocatable)
	cond, _, seen = waitCondition(t, c, node, v1.ConditionFalse, 5*time.Second)
	t.Logf("condition False %v after the Node matched", seen.Sub(patched).Round(time.Millisecond))
	if seen.Sub(patched) > 2*time.Second {
		t.Errorf("condition False %v after the Node matched, want within 2s", seen.Sub(patched))
	}
	if cond.Reason != nodepatch.ReasonCapacityCurrent || cond.LastTransitionTime.Equal(&trueSince) {
		t.Errorf("condition %+v", cond)
	}

	// Restarted again: the False transition time is kept too.
	falseSince := cond.LastTransitionTime
	d.Stop()
	d = startClusterDaemon(t, args...)
	time.Sleep(2 * time.Second)
	if cond, _ := condition(t, c, node); cond.Status != v1.ConditionFalse || !cond.LastTransitionTime.Equal(&falseSince) {
		t.Errorf("after a daemon restart: %+v, want False since %v", cond, falseSince)
	}
	if w := d.Metric(`hotplugd_node_writes_total{what="status"}`); w != 0 {
		t.Errorf("the restarted daemon wrote the status %v times, want 0", w)
	}
}

// TestIntegrationHeartbeatAndPrune: against the real API server, a current
// Node's condition gets its lastHeartbeatTime written again at every
// --heartbeat-interval (status and transition time unchanged, one status
// write each); after hotplugd stops, `hotplugd prune` removes its condition
// and every hotplugd.io/ annotation and nothing else, and a second prune
// finds nothing.
func TestIntegrationHeartbeatAndPrune(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	node := createNode(t, c, "heartbeat", capacity, allocatable)
	if _, err := c.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/owner":"someone"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := kubeconfigFor(t, srv)
	stateDir := t.TempDir()
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kubeconfig, "--kubelet-config", cfg,
		"--kubelet-root-dir", t.TempDir(), "--resync", "0", "--heartbeat-interval", "1s", "--state-dir", stateDir)
	first, _, _ := waitCondition(t, c, node, v1.ConditionFalse, 10*time.Second)
	// Three heartbeats, each a second or more after the last.
	last := first.LastHeartbeatTime
	for range 3 {
		deadline := time.Now().Add(5 * time.Second)
		for {
			cond, _ := condition(t, c, node)
			if cond.LastHeartbeatTime.After(last.Time) {
				if cond.Status != v1.ConditionFalse || cond.Reason != first.Reason || !cond.LastTransitionTime.Equal(&first.LastTransitionTime) {
					t.Fatalf("a heartbeat changed the condition: %+v, was %+v", cond, first)
				}
				if got := cond.LastHeartbeatTime.Sub(last.Time); got < time.Second {
					t.Errorf("heartbeat %v after the last, want at least the interval (1s)", got)
				}
				last = cond.LastHeartbeatTime
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat after %v within 5 s (interval 1s)", last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if w := d.Metric(`hotplugd_node_writes_total{what="status"}`); w < 4 {
		t.Errorf("%v status writes, want the first and three heartbeats", w)
	}
	if got := d.Metric("hotplugd_heartbeat_interval_seconds"); got != 1 {
		t.Errorf("hotplugd_heartbeat_interval_seconds = %v, want 1", got)
	}
	if got := d.Metric("hotplugd_condition_heartbeat_timestamp_seconds"); got <= float64(first.LastHeartbeatTime.Unix()) {
		t.Errorf("hotplugd_condition_heartbeat_timestamp_seconds = %v, want a heartbeat after the first (%d)", got, first.LastHeartbeatTime.Unix())
	}

	// hotplugd status: the daemon's last decision, from its socket.
	out, err := exec.Command(binary, "status", "--state-dir", stateDir, "-o", "json").Output()
	if err != nil {
		t.Fatalf("hotplugd status -o json: %v", err)
	}
	var st control.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("hotplugd status -o json: %v\n%s", err, out)
	}
	if st.Mode != "report" || st.Machine == nil || st.Machine.Capacity != nodepatch.FormatResources(capacity) ||
		st.Machine.Allocatable != nodepatch.FormatResources(allocatable) || st.Node == nil || st.Node.Condition == nil ||
		st.Node.Condition.Status != v1.ConditionFalse || st.Drift != "" || st.Next.Action != "none" || st.Kubelet == nil || st.Kubelet.Version != "v1.36.3" {
		t.Errorf("hotplugd status -o json:\n%s", out)
	}
	text, err := exec.Command(binary, "status", "--state-dir", stateDir).Output()
	if err != nil || !regexp.MustCompile(`(?m)^Drift +none: the kubelet reports this machine$`).Match(text) ||
		!strings.Contains(string(text), "capacity "+nodepatch.FormatResources(capacity)) {
		t.Errorf("hotplugd status: %v\n%s", err, text)
	}
	d.Stop()
	if out, err := exec.Command(binary, "status", "--state-dir", stateDir).CombinedOutput(); err == nil || !strings.Contains(string(out), "no hotplugd runs with this --state-dir") {
		t.Errorf("hotplugd status after the daemon stopped: %v\n%s", err, out)
	}

	prune := func() string {
		t.Helper()
		out, err := exec.Command(binary, "prune", "--node-name", node, "--kubeconfig", kubeconfig).CombinedOutput()
		if err != nil {
			t.Fatalf("hotplugd prune: %v\n%s", err, out)
		}
		return string(out)
	}
	pruned := prune()
	if !strings.Contains(pruned, "removed condition KubeletCapacityStale (False, CapacityCurrent); annotations hotplugd.io/") {
		t.Errorf("hotplugd prune said %q", pruned)
	}
	cond, n := condition(t, c, node)
	if cond != nil {
		t.Errorf("after the prune the Node still has %+v", cond)
	}
	for k := range n.Annotations {
		if strings.HasPrefix(k, nodepatch.AnnotationPrefix) {
			t.Errorf("after the prune the Node still has the annotation %s", k)
		}
	}
	if n.Annotations["example.com/owner"] != "someone" || !n.Status.Capacity.Cpu().Equal(*capacity.Cpu()) {
		t.Errorf("the prune changed what is not hotplugd's: annotations %v, capacity %v", n.Annotations, n.Status.Capacity)
	}
	if out := prune(); !strings.Contains(out, "carries nothing of hotplugd's") {
		t.Errorf("a second prune said %q", out)
	}
}

// TestIntegrationUnknownKubelet: a Node whose kubelet is a release hotplugd
// does not know (a 1.38 pre-release) gets the capacity drift reported, with
// the reason it is capacity only in the condition's message and no
// allocatable prediction, and --remedy=restart-kubelet restarts nothing.
func TestIntegrationUnknownKubelet(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	node := createNodeOf(t, c, "unknown", "v1.38.0-alpha.0", withCPU(capacity, "64"), withCPU(allocatable, "63900m"))
	calls := filepath.Join(t.TempDir(), "calls")
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kubeconfigFor(t, srv), "--kubelet-config", cfg,
		"--kubelet-root-dir", t.TempDir(), "--resync", "0", "--remedy", "restart-kubelet", "--settle", "100ms",
		"--kubelet-restart-command", "echo restart >> "+shellQuote(calls), "--restart-budget-namespace", budgetNamespace(t, c, node))
	d.WaitFor(10*time.Second, func(e logEntry) bool {
		return e.Msg == "kubelet found, with limits" && strings.Contains(e.RawLine, "is not a release hotplugd knows")
	})
	cond, n, _ := waitCondition(t, c, node, v1.ConditionTrue, 10*time.Second)
	wantWhy := "capacity only, no remedy: kubelet v1.38.0-alpha.0 is not a release hotplugd knows (it knows 1.34, 1.35, 1.36, 1.37)"
	if !strings.Contains(cond.Message, fmt.Sprintf("capacity cpu 64 -> %s", q(capacity, "cpu"))) || !strings.HasSuffix(cond.Message, wantWhy) {
		t.Errorf("condition message %q, want the capacity drift and %q", cond.Message, wantWhy)
	}
	if a, ok := n.Annotations[nodepatch.AnnotationAllocatable]; ok {
		t.Errorf("allocatable predicted for an unknown kubelet: %q", a)
	}
	time.Sleep(time.Second) // well past --settle
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("the kubelet of an unknown release was restarted: %s", b)
	}
	if r := d.Metric(`hotplugd_kubelet_restarts_total`); r != 0 {
		t.Errorf("hotplugd_kubelet_restarts_total = %v", r)
	}
}

// TestIntegrationMemoryNoise: a memory difference below --min-memory-delta
// is logged, not reported.
func TestIntegrationMemoryNoise(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	mem := capacity.Memory().DeepCopy()
	mem.Sub(mustQuantity("64Mi"))
	stale := capacity.DeepCopy()
	stale[v1.ResourceMemory] = mem
	node := createNode(t, c, "noise", stale, allocatable)
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kubeconfigFor(t, srv), "--kubelet-config", cfg)
	d.WaitFor(5*time.Second, func(e logEntry) bool { return strings.Contains(e.Msg, "less than --min-memory-delta") })
	cond, _, _ := waitCondition(t, c, node, v1.ConditionFalse, 5*time.Second)
	if cond.Reason != nodepatch.ReasonCapacityCurrent {
		t.Errorf("condition %+v", cond)
	}
	if ev := events(t, c, node, nodepatch.ReasonCapacityDrift); len(ev) != 0 {
		t.Errorf("events for noise: %+v", ev)
	}
}

func q(l v1.ResourceList, name v1.ResourceName) string {
	v := l[name]
	return v.String()
}

// The fake kubelet: the test binary, started by the restart command that
// stands for the kubelet's supervisor (hotplugd's --kubelet-restart-command).
const fakeKubeletEnv = "HOTPLUGD_FAKE_KUBELET"

// fakeKubelet is a kubelet start as far as the Node is concerned: it
// appends "start <unix nanos>" to $FAKE_LOG and, unless $FAKE_MODE's file
// says "broken", reports this machine's capacity and allocatable on the
// Node, as a restarted kubelet does.
func fakeKubelet(string) int {
	log, err := os.OpenFile(os.Getenv("FAKE_LOG"), os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer log.Close()
	fmt.Fprintf(log, "start %d\n", time.Now().UnixNano())
	if mode, _ := os.ReadFile(os.Getenv("FAKE_MODE")); strings.TrimSpace(string(mode)) == "broken" {
		return 0
	}
	capacity, allocatable, err := predictStatus(os.Getenv("FAKE_KUBELET_CONFIG"))
	if err == nil {
		var cfg, cerr = clientcmd.BuildConfigFromFlags("", os.Getenv("FAKE_KUBECONFIG"))
		err = cerr
		if err == nil {
			c, cerr := kubernetes.NewForConfig(cfg)
			err = cerr
			if err == nil {
				err = patchStatus(c, os.Getenv("FAKE_NODE"), capacity, allocatable)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake kubelet:", err)
		return 1
	}
	return 0
}

// fakeKubeletRig is the fake kubelet's supervisor as hotplugd sees it: one
// restart command (a script) that stops the kubelet, runs `hotplugd
// preflight` on its state files (whose failure never stops the start, as
// systemd's ExecStartPre=- in the drop-in), then starts it; and what it did.
type fakeKubeletRig struct {
	t         testing.TB
	dir       string
	log, mode string
	// restart is hotplugd's --kubelet-restart-command.
	restart string
}

// fakeKubeletVersion is the release the fake kubelet and preflight claim.
const fakeKubeletVersion = "v1.36.3"

// newFakeKubelet makes the restart command for a kubelet with
// configuration cfg and root directory root, reporting on node.
func newFakeKubelet(t testing.TB, kubeconfig, node, cfg, root string) *fakeKubeletRig {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r := &fakeKubeletRig{t: t, dir: dir, log: filepath.Join(dir, "calls"), mode: filepath.Join(dir, "mode")}
	// Each line of the log: what, unix nanos, and for preflight its exit
	// status and the hash of cpu_manager_state before and after it.
	script := fmt.Sprintf(`#!/bin/sh
log=%[1]s
state=%[2]s/cpu_manager_state
sum() { sha256sum < "$state" 2>/dev/null | cut -c1-64; }
echo "stop $(date +%%s%%N)" >> "$log"
before=$(sum)
status=0
%[3]s preflight --kubelet-config %[4]s --kubelet-root-dir %[2]s --kubelet-version %[5]s -o json >> %[6]s/preflight.json 2>> %[6]s/preflight.err || status=$?
echo "preflight $(date +%%s%%N) $status $before $(sum)" >> "$log"
GORACE=%[12]s %[7]s=1 FAKE_LOG="$log" FAKE_MODE=%[8]s FAKE_KUBECONFIG=%[9]s FAKE_NODE=%[10]s FAKE_KUBELET_CONFIG=%[4]s exec %[11]s
`, shellQuote(r.log), shellQuote(root), shellQuote(binary), shellQuote(cfg), fakeKubeletVersion, shellQuote(dir),
		fakeKubeletEnv, shellQuote(r.mode), shellQuote(kubeconfig), shellQuote(node), shellQuote(self), shellQuote(crashHelperGorace()))
	r.restart = filepath.Join(dir, "restart.sh")
	if err := os.WriteFile(r.restart, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *fakeKubeletRig) setBroken(broken bool) {
	mode := "ok"
	if broken {
		mode = "broken"
	}
	if err := os.WriteFile(r.mode, []byte(mode), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// call is one step of a restart: stop, preflight or start.
type call struct {
	what string
	at   time.Time
	// preflight: its exit status, and the hash of cpu_manager_state
	// before and after it.
	status        string
	before, after string
}

func (r *fakeKubeletRig) calls() []call {
	b, _ := os.ReadFile(r.log)
	var out []call
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		c := call{what: f[0], at: time.Unix(0, ns)}
		if c.what == "preflight" && len(f) == 5 {
			c.status, c.before, c.after = f[2], f[3], f[4]
		}
		out = append(out, c)
	}
	return out
}

func (r *fakeKubeletRig) sequence() string {
	var parts []string
	for _, c := range r.calls() {
		parts = append(parts, c.what)
	}
	return strings.Join(parts, ",")
}

// preflightReports are the JSON reports of every preflight the restart
// command ran, in order.
func (r *fakeKubeletRig) preflightReports() []preflight.Report {
	r.t.Helper()
	f, err := os.Open(filepath.Join(r.dir, "preflight.json"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []preflight.Report
	dec := json.NewDecoder(f)
	for {
		var rep preflight.Report
		if err := dec.Decode(&rep); err != nil {
			if err != io.EOF {
				r.t.Fatalf("preflight's report: %v", err)
			}
			return out
		}
		out = append(out, rep)
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// matchingNode registers a Node that reports this machine as a kubelet
// with kubeletConfig does, and returns the client, that configuration, the
// Node's name and a kubeconfig for hotplugd. The tests that use it take cpu1
// offline: it skips unless cpu1 is online.
func matchingNode(t testing.TB, srv *kubeapitest.Server, prefix string) (c kubernetes.Interface, cfg, node, kubeconfig string) {
	t.Helper()
	c = srv.Client()
	cfg = kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	if capacity.Cpu().Value() < 2 {
		t.Skip("SKIPPED: needs cpu1 online to start with")
	}
	return c, cfg, createNode(t, c, prefix, capacity, allocatable), kubeconfigFor(t, srv)
}

// TestIntegrationRemedy: hotplugd with --remedy=restart-kubelet and a
// restart command for a fake kubelet with the static CPU manager, on this
// machine's cpu1: exactly one restart per settled change and none while a
// burst is arriving; cpu_manager_state is repaired by hotplugd preflight
// inside that restart (between the kubelet's stop and its start) and never
// by the daemon, which finds the file as the kubelet left it when the
// restart begins and leaves it as preflight wrote it. A restart after which
// the Node still shows the old capacity is reported as failed with nothing
// rolled back (no second restart, preflight's file stays), and not tried
// again for the same drift.
func TestIntegrationRemedy(t *testing.T) {
	m := machinetest.Acquire(t)
	srv := sharedAPIServer(t)
	c, cfg, node, kc := matchingNode(t, srv, "remedy")
	cfg = staticCPUConfig(t, cfg)
	root := t.TempDir()
	state := filepath.Join(root, preflight.CPUManagerState)
	original := writeCPUState(t, state)
	k := newFakeKubelet(t, kc, node, cfg, root)
	const settle, interval = time.Second, 8 * time.Second
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kc, "--kubelet-config", cfg, "--kubelet-root-dir", root,
		"--kubelet-version", fakeKubeletVersion,
		"--remedy", "restart-kubelet", "--settle", settle.String(), "--remedy-interval", interval.String(), "--remedy-timeout", "2s",
		"--kubelet-restart-command", k.restart, "--restart-budget-namespace", budgetNamespace(t, c, node))
	waitCondition(t, c, node, v1.ConditionFalse, 5*time.Second)

	// 1. cpu1 goes offline in the middle of a 3 s burst of memory uevents.
	files := daemontest.MemoryBlocks(t)
	burstStart := time.Now()
	burstDone := make(chan time.Time)
	go func() {
		var last time.Time
		for time.Since(burstStart) < 3*time.Second {
			for _, f := range files[:min(len(files), 8)] {
				os.WriteFile(f, []byte("online"), 0)
			}
			last = time.Now()                 // the burst's last event was sent before this
			time.Sleep(10 * time.Millisecond) // well inside the 500 ms quiet window
		}
		burstDone <- last
	}()
	time.Sleep(time.Second)
	m.SetCPUOnline(t, 1, false)
	burstEnd := <-burstDone
	d.WaitFor(15*time.Second, func(e logEntry) bool { return e.Msg == "remedy done" && e.Str("outcome") == "remediated" })
	calls := k.calls()
	if k.sequence() != "stop,preflight,start" {
		t.Fatalf("kubelet calls %q, want one restart (stop,preflight,start)", k.sequence())
	}
	// The change (cpu1 offline) is complete, so the restart waits only
	// for the burst to be quiet, not for the settle time.
	if calls[0].at.Before(burstEnd.Add(quiet)) {
		t.Errorf("the kubelet was stopped %v after the burst's last event, want at least the quiet window %v", calls[0].at.Sub(burstEnd), quiet)
	}
	t.Logf("the burst's last event, then %v later the kubelet was stopped", calls[0].at.Sub(burstEnd).Round(time.Millisecond))
	repaired := checkRepairedInRestart(t, k, calls[1], 1, state, original)
	if d := cpuStateVerdict(t, state, cfg); d != "" {
		t.Errorf("after the restart, cpu_manager_state does not verify for the machine with cpu1 offline: %s", d)
	}
	waitCondition(t, c, node, v1.ConditionFalse, 5*time.Second)
	ev := waitEvents(t, c, node, nodepatch.ReasonRemediated, 1, 5*time.Second)
	if !strings.Contains(ev[0].Message, "hotplugd preflight repaired "+preflight.CPUManagerState) {
		t.Errorf("Remediated event %q does not say preflight repaired %s in the kubelet's start", ev[0].Message, preflight.CPUManagerState)
	}
	if ev := events(t, c, node, nodepatch.ReasonCapacityDrift); len(ev) != 1 {
		t.Errorf("%d CapacityDrift events, want 1", len(ev))
	}
	if got := sha256Of(t, state); got != repaired {
		t.Errorf("cpu_manager_state changed after preflight's repair (hash %s, preflight wrote %s): hotplugd wrote it", got, repaired)
	}

	// 2. cpu1 back, but the restarted kubelet keeps reporting 1 CPU: the
	// remedy fails and is reported; nothing is rolled back (one restart,
	// preflight's repair stays).
	k.setBroken(true)
	m.SetCPUOnline(t, 1, true)
	failed := d.WaitFor(interval+15*time.Second, func(e logEntry) bool { return e.Msg == "remedy failed" })
	if got := k.sequence(); got != "stop,preflight,start,stop,preflight,start" {
		t.Errorf("kubelet calls %q, want one more restart and no rollback", got)
	}
	calls = k.calls()
	if len(calls) == 6 {
		repaired = checkRepairedInRestart(t, k, calls[4], 2, state, repaired)
	}
	if d := cpuStateVerdict(t, state, cfg); d != "" {
		t.Errorf("after the failed remedy, cpu_manager_state does not verify for the machine with cpu1 online (rolled back?): %s", d)
	}
	cond, _, _ := waitConditionReason(t, c, node, v1.ConditionTrue, nodepatch.ReasonRemediationFailed, 5*time.Second)
	if !strings.Contains(cond.Message, "left to its supervisor") || strings.Contains(cond.Message, "rolled back") {
		t.Errorf("condition %+v, want RemediationFailed, the kubelet left to its supervisor, nothing rolled back", cond)
	}
	waitEvents(t, c, node, nodepatch.ReasonRemediationFailed, 1, 5*time.Second)

	// 3. One attempt per (prediction, configuration): with a kubelet that
	// would now work, the same drift is still not tried again, whatever the
	// rate limit allows.
	k.setBroken(false)
	time.Sleep(interval + 2*time.Second)
	if got := k.sequence(); got != "stop,preflight,start,stop,preflight,start" {
		t.Errorf("kubelet calls %q after the interval, want no new attempt for the same drift", got)
	}
	d.WaitFor(5*time.Second, func(e logEntry) bool {
		return e.Msg == "remedy plan" && strings.Contains(e.Str("plan"), "not repeated until one of them changes") && e.Time.After(failed.Time)
	})
	if got := sha256Of(t, state); got != repaired {
		t.Errorf("cpu_manager_state changed after preflight's last repair: hotplugd wrote it")
	}
	// 4. cpu1 offline again: the machine is what the Node says.
	m.SetCPUOnline(t, 1, false)
	waitCondition(t, c, node, v1.ConditionFalse, 10*time.Second)
	if r := d.Metric(`hotplugd_kubelet_restarts_total`); r != 2 {
		t.Errorf("hotplugd_kubelet_restarts_total = %v, want 2", r)
	}
}

// checkRepairedInRestart checks the n-th restart's preflight (call pre):
// it found cpu_manager_state as it was before the restart (hash of was:
// hotplugd did not write it), exited 0 and repaired it, with the old file
// as its backup. It returns the hash of the file preflight wrote.
func checkRepairedInRestart(t *testing.T, k *fakeKubeletRig, pre call, n int, state, was string) string {
	t.Helper()
	if pre.status != "0" {
		t.Errorf("restart %d: preflight exited %s; its stderr:\n%s", n, pre.status, readFileString(filepath.Join(k.dir, "preflight.err")))
	}
	if pre.before != was {
		t.Errorf("restart %d: cpu_manager_state at the kubelet's stop (hash %s) is not the file as it was before the remedy (%s): the daemon wrote it", n, pre.before, was)
	}
	if pre.after == pre.before {
		t.Errorf("restart %d: preflight left cpu_manager_state as it was: no repair in the kubelet's start", n)
	}
	reps := k.preflightReports()
	if len(reps) != n {
		t.Fatalf("%d preflight reports after restart %d, want %d", len(reps), n, n)
	}
	var res *preflight.Result
	for i := range reps[n-1].Results {
		if reps[n-1].Results[i].File == preflight.CPUManagerState {
			res = &reps[n-1].Results[i]
		}
	}
	if res == nil || res.Verdict != preflight.Repaired || res.Backup == "" {
		t.Fatalf("restart %d: preflight's report %+v, want %s repaired with a backup", n, reps[n-1], preflight.CPUManagerState)
	}
	if got := sha256Of(t, res.Backup); got != was {
		t.Errorf("restart %d: preflight's backup %s is not the file as it was (hash %s, want %s)", n, res.Backup, got, was)
	}
	// The only backups are preflight's: the daemon made none.
	backups, _ := filepath.Glob(state + ".hotplugd-backup-*")
	if len(backups) != n {
		t.Errorf("restart %d: backups %v, want the %d preflight made", n, backups, n)
	}
	return pre.after
}

// staticCPUConfig is the configuration at path with the static CPU manager
// (its CPU reservation, kubeReserved's 100m, takes cpu0), in a new file.
func staticCPUConfig(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "kubelet-config-static.yaml")
	if err := os.WriteFile(out, append(b, "cpuManagerPolicy: static\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// writeCPUState writes the cpu_manager_state a static-policy kubelet
// writes at its start on this machine with no pod pinned, and returns its
// hash.
func writeCPUState(t testing.TB, path string) string {
	t.Helper()
	snap, err := topology.NewFS("/sys", "/proc").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&cpumgr.State{Format: cpumgr.FormatV2, PolicyName: cpumgr.PolicyStatic, DefaultCPUSet: cpumgr.KubeletCPUs(snap)}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return sha256Hex(b)
}

// cpuStateVerdict is the kubelet's start-up verdict on the
// cpu_manager_state at path for this machine as it is now ("": it starts).
func cpuStateVerdict(t testing.TB, path, cfgPath string) string {
	t.Helper()
	snap, err := topology.NewFS("/sys", "/proc").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeletconfig.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := kubeletversion.Lookup(kubeletversion.MustParse(fakeKubeletVersion))
	if err != nil {
		t.Fatal(err)
	}
	ccfg, err := cpumgr.NewConfig(cfg, snap, path, rel)
	if err != nil {
		return "configuration: " + err.Error()
	}
	s, err := cpumgr.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if err := cpumgr.Validate(s, snap, ccfg); err != nil {
		return err.Error()
	}
	return ""
}

func sha256Of(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256Hex(b)
}

func readFileString(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// TestIntegrationAPIServerOutage: the API server is away for 60 s while
// cpu1 goes offline; the daemon keeps running and the Node shows the drift
// within 5 s of the server's return.
func TestIntegrationAPIServerOutage(t *testing.T) {
	m := machinetest.Acquire(t)
	srv := ownAPIServer(t)
	c, cfg, node, kc := matchingNode(t, srv, "outage")
	capacity, _ := machineStatus(t, cfg)
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kc, "--kubelet-config", cfg)
	waitCondition(t, c, node, v1.ConditionFalse, 5*time.Second)

	if err := srv.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	m.SetCPUOnline(t, 1, false)
	d.WaitFor(5*time.Second, isChange("cpu", capacity.Cpu().String(), "1"))
	for i := 0; i < 60; i++ {
		time.Sleep(time.Second)
		if code := d.Healthz(); code != 200 {
			t.Fatalf("healthz %d during the outage", code)
		}
	}
	if err := srv.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	_, _, seen := waitCondition(t, c, node, v1.ConditionTrue, 30*time.Second)
	t.Logf("condition True %v after the API server came back", seen.Sub(back).Round(time.Millisecond))
	if seen.Sub(back) > 5*time.Second {
		t.Errorf("converged %v after the API server came back, want within 5s", seen.Sub(back))
	}
	if d.Metric("hotplugd_node_write_errors_total") == 0 {
		t.Error("no failed write counted during the outage")
	}
}

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// TestIntegrationDryRun: --dry-run logs the patch it would make and writes
// nothing.
func TestIntegrationDryRun(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	node := createNode(t, c, "dryrun", withCPU(capacity, "64"), allocatable)
	calls := filepath.Join(t.TempDir(), "calls")
	d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kubeconfigFor(t, srv), "--kubelet-config", cfg, "--dry-run",
		"--remedy", "restart-kubelet", "--settle", "0s", "--kubelet-restart-command", "echo restart >> "+shellQuote(calls))
	d.WaitFor(5*time.Second, func(e logEntry) bool { return e.Msg == "dry run: would patch the node" })
	d.WaitFor(5*time.Second, func(e logEntry) bool { return e.Msg == "dry run: would restart the kubelet" })
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("a dry run ran the restart command: %s", b)
	}
	if r := d.Metric(`hotplugd_kubelet_restarts_total`); r != 0 {
		t.Errorf("hotplugd_kubelet_restarts_total = %v in a dry run", r)
	}
	if cond, n := condition(t, c, node); cond != nil || n.Annotations[nodepatch.AnnotationCapacity] != "" {
		t.Errorf("dry run wrote the node: %+v %v", cond, n.Annotations)
	}
	if ev := events(t, c, node, nodepatch.ReasonCapacityDrift); len(ev) != 0 {
		t.Errorf("dry run sent events: %+v", ev)
	}
	if w := d.Metric(`hotplugd_api_requests_total{verb="patch",code="200"}`); w != 0 {
		t.Errorf("%v patches in a dry run", w)
	}
}
