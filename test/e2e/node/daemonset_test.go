//go:build e2e

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/testimage"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// daemonSetRemedy is scenario 6: hotplugd as the DaemonSet, with the
// opt-in restart-kubelet component, on this systemd node before hotplugd's
// unit is installed (its binary and the kubelet's preflight drop-in are, by
// the node's provisioning: the pod restarts a kubelet with a static CPU
// manager only when its start runs hotplugd preflight). The DaemonSet goes
// through the real kustomize (a test overlay: the image `make image` built,
// imported into the guest's containerd, and the API server's address
// through the guest's forward) and the host's controller manager and
// scheduler; the pod runs as the base says: every capability dropped but
// NET_ADMIN, the runtime's seccomp profile, a read-only root file system,
// the host's /run/dbus mounted, and the component's /usr/bin (the kubelet's
// binary, for its change time). A DIMM is hot-added under the pinned pod:
// the pod asks the host's systemd over D-Bus for one restart of
// kubelet.service, and the pinned pod and the DaemonSet's own pod come
// through it unchanged. The DaemonSet and the controllers are removed
// afterwards (their node lifecycle controller would taint the Node while
// the VM is off between the later boots).
func daemonSetRemedy(t *testing.T, v *vm, img testimage.Image) {
	before := v.waitPinnedRunning()
	v.importImages(img)
	c := api(t).Client()
	t0 := time.Now()
	pod := deployDaemonSet(t, v, img)
	readyIn := time.Since(t0)
	addResult(result{scenario: "6 DaemonSet remedy", side: "hotplugd pod", change: "kustomize build (restart-kubelet component) + apply",
		correct: "pod Ready " + seconds(readyIn), writes: -1,
		note: fmt.Sprintf("controller made %s, scheduler placed it on %s; image %s imported into the guest's containerd", pod.Name, pod.Spec.NodeName, img.Digest[:19])})

	// The pod finds the Node current, with its own token.
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool {
		n := getNode(t)
		return n != nil && staleStatus(n) == v1.ConditionFalse
	}) {
		t.Fatalf("the pod did not find the Node current: %s; its log:\n%s", staleStatus(getNode(t)), v.podLog(pod, 30))
	}
	v.pastKubeletGrace()
	dsBefore := containerOf(pod)

	mt0 := v.memTotal()
	w0 := v.hotplugdMetric("hotplugd_node_writes_total")
	cur := v.mark()
	if err := v.qmp.PlugDIMM("dimm-ds", gib); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	d := waitNode(t, t1, stepTimeout, "the DIMM", memoryIs(mt0+gib))
	restarts := v.starts(cur)
	if restarts != 1 {
		t.Errorf("%d kubelet restarts, want 1; the pod's log:\n%s", restarts, v.podLog(pod, 30))
	}
	// Who restarted it: the pod, over D-Bus.
	log := v.podLog(pod, 200)
	via, ok := logField(log, askedRestart, "via")
	if !ok {
		t.Errorf("the pod's log has no %q:\n%s", askedRestart, log)
	}
	if via != "systemd unit kubelet.service" {
		t.Errorf("the pod restarted the kubelet via %q, want the systemd unit kubelet.service (over D-Bus)", via)
	}
	// The pod's confinement let it work: nothing denied.
	denied := regexp.MustCompile(`(?i)operation not permitted|permission denied|read-only file system|access denied|bad system call`)
	if m := denied.FindAllString(log, -1); len(m) > 0 {
		t.Errorf("the pod's log has denials: %q", m)
	}
	// The pod's verification ends when its informer has the Node this test
	// has just read.
	var remediated float64
	if !waitFor(30*time.Second, 200*time.Millisecond, func() bool {
		remediated = v.hotplugdMetric(`hotplugd_remedies_total{outcome="remediated"}`)
		return remediated == 1
	}) {
		t.Errorf("the pod's hotplugd_remedies_total{outcome=\"remediated\"} %v, want 1; its log:\n%s", remediated, v.podLog(pod, 200))
	}
	stops := v.exec("journalctl", "-u", "kubelet", "--since", cur, "-o", "cat", "--no-pager", "--grep", "^Stopping kubelet").Stdout
	if strings.TrimSpace(stops) == "" {
		t.Errorf("systemd's journal has no kubelet stop since the DIMM")
	}

	// Both pods came through it.
	after := v.waitPinnedRunning()
	checkPinned(t, before, after)
	p, err := c.CoreV1().Pods(deploytest.Namespace).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dsAfter := containerOf(p)
	if dsAfter != dsBefore || p.UID != pod.UID {
		t.Errorf("the DaemonSet's pod changed through the restart it made: before %s, after %s", dsBefore, dsAfter)
	}
	if ev := podEvents(t, "default", "pinned", t1); ev != "" {
		t.Errorf("the pinned pod has Events since the DIMM: %s", ev)
	}
	addResult(result{scenario: "6 DaemonSet remedy", side: "hotplugd pod", change: "1 GiB DIMM (QMP device_add)", correct: seconds(d),
		restarts: restarts, writes: v.hotplugdMetric("hotplugd_node_writes_total") - w0,
		note: fmt.Sprintf("restarted by the pod: %s over D-Bus (remediated %v); pinned before: %s; after: %s; the DaemonSet's pod: %s, then %s",
			via, remediated, before, after, dsBefore, dsAfter)})

	// CPU 1 offline under the pinned pod: a state file that cannot be
	// rebuilt without dropping the pod's CPU, so no restart, and a
	// NeedsDrain Event that names the pod from the kubelet's pod log
	// directory (the DaemonSet's /var/log/pods mount).
	v.pastKubeletGrace()
	state := v.cat("/var/lib/kubelet/cpu_manager_state")
	drains := len(nodeEvents(t, nodepatch.ReasonNeedsDrain))
	cur = v.mark()
	t1 = time.Now()
	v.sh("echo 0 > /sys/devices/system/cpu/cpu1/online")
	defer v.sh("echo 1 > /sys/devices/system/cpu/cpu1/online")
	var msg string
	if !waitFor(stepTimeout, 100*time.Millisecond, func() bool {
		if evs := nodeEvents(t, nodepatch.ReasonNeedsDrain); len(evs) > drains {
			msg = evs[len(evs)-1].Message
		}
		return msg != ""
	}) {
		t.Fatalf("no NeedsDrain Event after CPU 1 went offline; the pod's log:\n%s", v.podLog(pod, 30))
	}
	took := time.Since(t1)
	if !strings.Contains(msg, "default/pinned") {
		t.Errorf("the NeedsDrain Event does not name the pod default/pinned: %s", msg)
	}
	// Nothing happens after it: watched for as long as a remedy takes.
	time.Sleep(10 * time.Second)
	restarts = v.starts(cur)
	if restarts != 0 {
		t.Errorf("%d kubelet restarts after CPU 1 went offline, want none", restarts)
	}
	if got := v.cat("/var/lib/kubelet/cpu_manager_state"); got != state {
		t.Errorf("cpu_manager_state changed:\n%s\n->\n%s", state, got)
	}
	v.sh("echo 1 > /sys/devices/system/cpu/cpu1/online")
	after = v.waitPinnedRunning()
	checkPinned(t, before, after)
	addResult(result{scenario: "6 DaemonSet remedy", side: "hotplugd pod", change: "CPU 1 offline under the pinned pod (then online again)",
		correct: "NeedsDrain Event " + seconds(took) + " (no restart, by design)", restarts: restarts, writes: -1,
		note: fmt.Sprintf("state file byte for byte unchanged; pinned after: %s; event: %s", after, msg)})

	// A flag staged in /etc/default/kubelet, which the pod reads through
	// the component's mount of /etc/default: withheld, as from the unit
	// (scenario 7).
	stagedChanges[0].check(t, v, 1, "6 DaemonSet remedy", "hotplugd pod")
}

// deployDaemonSet starts the controllers, applies deploy/kubernetes with
// the restart-kubelet component through the test overlay (with extraArgs
// added to the container's arguments, which win over the environment's
// HOTPLUGD_<FLAG>) and waits
// for the pod to be Ready. The DaemonSet, then the controllers, are removed
// when t ends.
func deployDaemonSet(t *testing.T, v *vm, img testimage.Image, extraArgs ...string) *v1.Pod {
	t.Helper()
	s := api(t)
	if err := s.StartControllers(); err != nil {
		t.Fatal(err)
	}
	// The controllers go after the DaemonSet's pods (cleanups run in reverse).
	t.Cleanup(s.StopControllers)
	host, port, _ := net.SplitHostPort(apiServerAddr)
	objs := deploytest.Build(t, repoRoot, tempDir(t, "hotplugd-node-overlay-"), deploytest.Overlay{
		Image: img, APIHost: host, APIPort: port, Components: []string{"restart-kubelet"},
	})
	if r, _ := deploytest.DaemonSetEnv(objs, "HOTPLUGD_REMEDY"); r != "restart-kubelet" {
		t.Fatalf("the restart-kubelet component did not set HOTPLUGD_REMEDY=restart-kubelet: %q", r)
	}
	if len(extraArgs) > 0 {
		setDaemonSetArgs(t, objs, append(deploytest.DaemonSetArgs(objs), extraArgs...))
	}
	t0 := time.Now()
	remove := deploytest.Apply(t, s.RestConfig(), objs)
	var containerID string
	t.Cleanup(func() { removeDaemonSet(t, v, remove, containerID) })
	pod := waitDaemonPod(t, v, t0)
	containerID = strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	return pod
}

// setDaemonSetArgs replaces the arguments of the DaemonSet's container in
// kustomize's output.
func setDaemonSetArgs(t *testing.T, objs []*unstructured.Unstructured, args []string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		cs, _, err := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		if err != nil || len(cs) == 0 {
			t.Fatalf("the DaemonSet has no containers: %v", err)
		}
		list := make([]any, len(args))
		for i, a := range args {
			list[i] = a
		}
		cs[0].(map[string]any)["args"] = list
		if err := unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers"); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatal("no DaemonSet in kustomize's output")
}

// askedRestart is the message hotplugd logs when it asks the kubelet's
// supervisor for the restart (pkg/remedy).
const askedRestart = "asking the kubelet's supervisor to restart it"

// nodeEvents are the Node's Events with the reason.
func nodeEvents(t *testing.T, reason string) []v1.Event {
	t.Helper()
	list, err := api(t).Client().CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitDaemonPod waits for the DaemonSet's pod to be Ready on the node.
func waitDaemonPod(t *testing.T, v *vm, t0 time.Time) *v1.Pod {
	t.Helper()
	c := api(t).Client()
	var pods []v1.Pod
	if waitFor(readyTimeout, 200*time.Millisecond, func() bool {
		pods = deploytest.Pods(t, c)
		return len(pods) == 1 && deploytest.PodReady(&pods[0])
	}) {
		if pods[0].Spec.NodeName != nodeName {
			t.Fatalf("the DaemonSet's pod is on %q, want %s", pods[0].Spec.NodeName, nodeName)
		}
		return &pods[0]
	}
	t.Fatalf("no Ready pod of the DaemonSet %v after the apply; pods:\n%s\nevents:\n%s\nkubelet:\n%s",
		readyTimeout, deploytest.Describe(pods), podEvents(t, deploytest.Namespace, "", t0), v.journal("kubelet", 40))
	return nil
}

// removeDaemonSet deletes what the apply made and waits for the pod and the
// namespace to be gone, while the controllers still run; the pod's
// container (containerID, when known) must have stopped.
func removeDaemonSet(t *testing.T, v *vm, remove func(), containerID string) {
	remove()
	c := api(t).Client()
	if !waitFor(2*time.Minute, 500*time.Millisecond, func() bool {
		_, err := c.CoreV1().Namespaces().Get(context.Background(), deploytest.Namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("namespace %s not gone 2 min after its deletion; pods:\n%s", deploytest.Namespace, deploytest.Describe(deploytest.Pods(t, c)))
	}
	if containerID == "" {
		return
	}
	if !waitFor(30*time.Second, time.Second, func() bool {
		return !strings.Contains(v.exec("ctr", "-n", "k8s.io", "tasks", "ls").Stdout, containerID)
	}) {
		t.Errorf("the DaemonSet's container %s still runs 30 s after its pod is gone", containerID)
	}
}

// staleStatus is the Node's KubeletCapacityStale status; "" without one.
func staleStatus(n *v1.Node) v1.ConditionStatus {
	if n == nil {
		return ""
	}
	for _, c := range n.Status.Conditions {
		if c.Type == nodepatch.ConditionType {
			return c.Status
		}
	}
	return ""
}

// containerOf describes a pod's one container: ID, restarts, state.
func containerOf(p *v1.Pod) string {
	if len(p.Status.ContainerStatuses) == 0 {
		return "no container"
	}
	cs := p.Status.ContainerStatuses[0]
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	if len(id) > 12 {
		id = id[:12]
	}
	return fmt.Sprintf("container %s, restarts %d, running %v", id, cs.RestartCount, cs.State.Running != nil)
}

// podEvents lists the Events of a namespace (of one object, when name is
// not "") since since, a line each.
func podEvents(t *testing.T, ns, name string, since time.Time) string {
	t.Helper()
	opts := metav1.ListOptions{}
	if name != "" {
		opts.FieldSelector = "involvedObject.name=" + name
	}
	list, err := api(t).Client().CoreV1().Events(ns).List(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range list.Items {
		last := e.LastTimestamp.Time
		if last.IsZero() {
			last = e.EventTime.Time
		}
		if last.Before(since.Truncate(time.Second)) {
			continue
		}
		fmt.Fprintf(&b, "%s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// podLog is the last n lines of the pod's container log in the guest, in
// the kubelet's pod log directory.
func (v *vm) podLog(p *v1.Pod, n int) string {
	v.t.Helper()
	dir := filepath.Join("/var/log/pods", p.Namespace+"_"+p.Name+"_"+string(p.UID), p.Spec.Containers[0].Name)
	return v.exec("/bin/sh", "-c", "tail -n "+strconv.Itoa(n)+" "+dir+"/*.log").Stdout
}

// logField is field of the first entry whose message is msg in a pod's
// log as the kubelet writes it (CRI: time, stream, tag, then the line),
// each line of which the DaemonSet's hotplugd writes as a JSON object
// (HOTPLUGD_LOG_FORMAT=json).
func logField(log, msg, field string) (string, bool) {
	for line := range strings.Lines(log) {
		_, entry, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		var fields map[string]any
		if json.Unmarshal([]byte("{"+strings.TrimSpace(entry)), &fields) != nil || fields["msg"] != msg {
			continue
		}
		return fmt.Sprint(fields[field]), true
	}
	return "", false
}

// pastKubeletGrace waits until the guest's kubelet has run for longer than
// hotplugd's --kubelet-grace (20 s), which a kubelet that has just started
// gets to report its Node first: a change after it measures hotplugd's
// reaction, not the grace.
func (v *vm) pastKubeletGrace() {
	v.t.Helper()
	v.pastGrace(20 * time.Second)
}

// pastGrace waits until the guest's kubelet has run for 2 s longer than
// grace.
func (v *vm) pastGrace(grace time.Duration) {
	v.t.Helper()
	time.Sleep(grace + 2*time.Second - v.kubeletUptime())
}

// kubeletUptime is how long the guest's kubelet has been running.
func (v *vm) kubeletUptime() time.Duration {
	v.t.Helper()
	out := v.sh(`echo "$(systemctl show -p ExecMainStartTimestampMonotonic --value kubelet) $(cut -d' ' -f1 /proc/uptime)"`)
	var startUS int64
	var up float64
	if _, err := fmt.Sscan(out, &startUS, &up); err != nil {
		v.t.Fatalf("the kubelet's start time: %q: %v", out, err)
	}
	return time.Duration(up*float64(time.Second)) - time.Duration(startUS)*time.Microsecond
}
