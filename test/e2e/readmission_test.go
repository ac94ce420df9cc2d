//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// readmitLabel marks the pods of TestReadmissionAfterShrink.
const readmitLabel = "e2e-readmission"

// readmitPods is how many pods each case runs.
const readmitPods = 3

// shrinkCase is one way the kubelet's allocatable shrinks under running
// pods that fit it before.
type shrinkCase struct {
	name     string
	resource v1.ResourceName
	// reason is the kubelet's admission failure for resource.
	reason string
	// requests are each pod's requests, chosen from the Node before so
	// that the pods' sum fits allocatable before and not after; it skips
	// t when the Node does not allow that.
	requests func(t *testing.T, n *v1.Node) v1.ResourceList
	// shrink changes the machine (restored when t ends); it returns what
	// changed, and the capacity and allocatable that change (the restarted
	// kubelet reports them).
	shrink func(t *testing.T, m *machinetest.Machine, n *v1.Node) (change string, capacity, allocatable v1.ResourceList)
}

// readmitShrinks are the cases: cpu1 offline (allocatable cpu 2 -> 1),
// and 1 GiB of 2 MiB hugepages reserved (allocatable memory 1Gi lower).
var readmitShrinks = []shrinkCase{{
	name: "cpu1 offline", resource: v1.ResourceCPU, reason: "OutOfcpu",
	requests: func(t *testing.T, n *v1.Node) v1.ResourceList {
		if got := quantity(n.Status.Allocatable, v1.ResourceCPU); got != "2" {
			t.Skipf("SKIPPED: needs allocatable cpu 2 to start with, the kubelet reports %s", got)
		}
		// 3 x 600m = 1800m: fits 2, not 1.
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("600m"), v1.ResourceMemory: resource.MustParse("16Mi")}
	},
	shrink: func(t *testing.T, m *machinetest.Machine, _ *v1.Node) (string, v1.ResourceList, v1.ResourceList) {
		m.SetCPUOnline(t, 1, false)
		one := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}
		return "cpu1 offline", one, one
	},
}, {
	name: "hugepages", resource: v1.ResourceMemory, reason: "OutOfmemory",
	requests: func(t *testing.T, n *v1.Node) v1.ResourceList {
		// 3 x (allocatable - 256Mi) / 3: fits with 256Mi to spare, not
		// once 1Gi went to hugepages.
		per := n.Status.Allocatable.Memory().Value() - 256<<20
		per = per / readmitPods &^ (1<<20 - 1) // whole Mi
		if per < 256<<20 {
			t.Skipf("SKIPPED: allocatable memory %s is too small", n.Status.Allocatable.Memory())
		}
		return v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m"), v1.ResourceMemory: *resource.NewQuantity(per, resource.BinarySI)}
	},
	shrink: func(t *testing.T, m *machinetest.Machine, n *v1.Node) (string, v1.ResourceList, v1.ResourceList) {
		if got := quantity(n.Status.Capacity, hugepages2Mi); got != "0" {
			t.Skipf("SKIPPED: hugepages-2Mi %s reserved on this machine already", got)
		}
		m.SetHugePages(t, node0Hugepages2Mi, 512)
		mem := n.Status.Allocatable.Memory().DeepCopy()
		mem.Sub(resource.MustParse("1Gi"))
		hp := resource.MustParse("1Gi")
		return "512 x 2Mi hugepages (1Gi)", v1.ResourceList{hugepages2Mi: hp},
			v1.ResourceList{v1.ResourceMemory: mem, hugepages2Mi: hp}
	},
}}

// TestReadmissionAfterShrink answers issue 19's question with the real
// kubelet: what does a kubelet restart do to running pods whose requests
// no longer fit the allocatable the restarted kubelet computes?
//
// For each shrink, three pods (created a second apart: the kubelet re-admits
// in creation order) whose requests fit allocatable before and not after;
// the machine shrinks; the kubelet restarts. It records per pod the phases
// the API showed, the container, its restart count, whether containerd
// still runs it and the kubelet's Events on it, and logs a table.
//
// The restarted kubelet re-admits every pod the API binds to it against the
// Node its informer holds (lifecycle/predicate.go, GetCachedNode): that is
// the old kubelet's Node, with the old allocatable, unless the new
// kubelet's first status update got there first. Two subtests per shrink:
//
//   - "restart script": the restart as hotplugd's remedy asks for it (stop,
//     hotplugd preflight, start): the race as it falls; either every pod is
//     kept, or the kubelet rejects exactly as below;
//   - "Node current at re-admission": the same restart with the Node's
//     status patched to the new capacity and allocatable while the kubelet
//     is down (what its first status update writes): the pods that still fit,
//     oldest first, are kept; the others are rejected with OutOfcpu or
//     OutOfmemory and their containers stopped (wantRejected).
func TestReadmissionAfterShrink(t *testing.T) {
	s := setup(t)
	m := acquireMachine(t)
	img, err := workloadImage()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.api.StartControllers(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.api.StopControllers)
	for _, sc := range readmitShrinks {
		t.Run(sc.name, func(t *testing.T) {
			t.Run("restart script", func(t *testing.T) { testReadmission(t, s, m, img, sc, false) })
			t.Run("Node current at re-admission", func(t *testing.T) { testReadmission(t, s, m, img, sc, true) })
			t.Run("hotplugd", func(t *testing.T) { testReadmissionGuard(t, s, m, img, sc) })
		})
	}
}

// testReadmissionGuard is the same shrink under the same pods with
// hotplugd's remedy on: it reads the requests from the kubelet's
// allocated_pods_state and does not restart the kubelet, and its NeedsDrain
// Event names the pods; every pod keeps running.
func testReadmissionGuard(t *testing.T, s *suite, m *machinetest.Machine, img image, sc shrinkCase) {
	k := startKubeletWith(t, s, kubeletSpec{})
	c := s.api.Client()
	ctx := context.Background()
	before := getNode(t, s)
	req := sc.requests(t, before)
	var names []string
	t.Cleanup(func() { deleteReadmitPods(t, s) }) // before the kubelet stops
	for i := range readmitPods {
		name := fmt.Sprintf("readmit-%d", i+1)
		if _, err := c.CoreV1().Pods("default").Create(ctx, readmitPod(img, name, req), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	pods := waitReadmitPodsReady(t, s, k, names, 90*time.Second)
	d := startHotplugd(t, s, k)
	mark, t0 := d.Mark(), time.Now()
	change, _, _ := sc.shrink(t, m, before)
	e, ok := d.WaitForFrom(mark, time.Minute, func(e daemontest.Entry) bool {
		return e.Msg == "remedy done" || e.Msg == "remedy failed"
	})
	if !ok {
		t.Fatalf("no remedy attempt within 1 min of %s; log:\n%s", change, d.Dump())
	}
	if got := e.Str("outcome"); got != "needs_person" {
		t.Fatalf("remedy outcome %s, want needs_person (a restart would reject pods): %s", got, e.RawLine)
	}
	took := time.Since(t0)
	// The Event is sent after the log line (client-go's recorder is
	// asynchronous): read until it is there, at most 10 s.
	var drain *v1.Event
	for end := time.Now().Add(10 * time.Second); drain == nil && time.Now().Before(end); time.Sleep(pollEvery) {
		for _, ev := range nodeEvents(t, s, nodepatch.ReasonNeedsDrain) {
			if ev.LastTimestamp.Time.After(t0.Add(-time.Second)) && strings.Contains(ev.Message, "the restarted kubelet would allow") {
				drain = &ev
			}
		}
	}
	if drain == nil {
		t.Fatalf("no NeedsDrain Event about the re-admission; hotplugd's log:\n%s", d.Dump())
	}
	for _, name := range names {
		if !strings.Contains(drain.Message, "default/"+name) {
			t.Errorf("the NeedsDrain Event does not name default/%s: %s", name, drain.Message)
		}
	}
	if n := k.startsSince(t0); n != 0 {
		t.Errorf("the kubelet was started %d times, want none", n)
	}
	for _, p := range pods {
		now, err := c.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if now.Status.Phase != v1.PodRunning || now.Status.ContainerStatuses[0].ContainerID != p.Status.ContainerStatuses[0].ContainerID {
			t.Errorf("%s: %s, container %s, want the same container running", p.Name, now.Status.Phase, now.Status.ContainerStatuses[0].ContainerID)
		}
	}
	t.Logf("%s under %d pods requesting %s: no restart; NeedsDrain %s after the change: %s", change, readmitPods, requestsString(req), seconds(took), drain.Message)
	results.add(result{scenario: "9 re-admission", side: "hotplugd", change: fmt.Sprintf("%s under %d pods requesting %s %s each", change, readmitPods, sc.resource, req.Name(sc.resource, resource.DecimalSI).String()),
		correct: "-", restarts: k.startsSince(t0), writes: -1, note: "no restart; NeedsDrain naming " + strings.Join(names, ", ") + " after " + seconds(took)})
}

// readmitOutcome is what became of one pod through the restart.
type readmitOutcome struct {
	name     string
	uid      types.UID
	requests string
	// before: Running and Ready, its container and restart count.
	containerBefore string
	restartsBefore  int32
	// phases are the phases the API showed after the restart began, with
	// when each was first seen ("Running", "Succeeded +5.28 s"); last is
	// the last one seen.
	phases []string
	last   v1.PodPhase
	// after, at the end of the watch.
	phase          v1.PodPhase
	reason         string
	message        string
	containerAfter string
	restartsAfter  int32
	// running is whether containerd still runs its container (before's).
	running bool
	// notReady is whether its Ready condition was seen other than True
	// during the watch.
	notReady bool
	// events are the reasons of the Events on it after the restart.
	events []string
}

// outcome is the pod's outcome in a few words, for the table and the
// assertions: "kept" (Running, same container, same restart count, its
// container running), "rejected <the kubelet's Event>, container stopped,
// <phase>" (and the status's reason, when it has one), or what else was
// seen.
func (o readmitOutcome) outcome() string {
	if o.phase == v1.PodRunning && o.containerAfter == o.containerBefore && o.restartsAfter == o.restartsBefore && o.running {
		return "kept"
	}
	var rejected []string
	for _, e := range o.events {
		if strings.HasPrefix(e, "OutOf") {
			rejected = append(rejected, e)
		}
	}
	if len(rejected) > 0 && !o.running && (o.phase == v1.PodSucceeded || o.phase == v1.PodFailed) {
		// Failed or Succeeded: the kubelet's status manager has been seen
		// to write both for one rejected pod within a second (Failed with
		// reason OutOfcpu, then Succeeded once its container stopped with
		// exit 0, then Failed again), so the last one seen is a race, not
		// the kubelet's verdict; the table lists every phase seen.
		return fmt.Sprintf("rejected %s, container stopped, terminal", strings.Join(rejected, " "))
	}
	return fmt.Sprintf("%s %s (container %s -> %s, restarts %d -> %d, running %v, events %v)", o.phase, o.reason,
		shortID(o.containerBefore), shortID(o.containerAfter), o.restartsBefore, o.restartsAfter, o.running, o.events)
}

func testReadmission(t *testing.T, s *suite, m *machinetest.Machine, img image, sc shrinkCase, nodeCurrent bool) {
	// -v=2: the kubelet logs its pod additions (SyncLoop ADD), whose time
	// the table gives.
	k := startKubeletWith(t, s, kubeletSpec{Flags: []string{"--v=2"}})
	c := s.api.Client()
	ctx := context.Background()
	before := getNode(t, s)
	req := sc.requests(t, before)
	allocBefore := before.Status.Allocatable[sc.resource]

	// The pods, a second apart: the kubelet sorts what it admits by
	// creation time, which has one-second resolution.
	var names []string
	t.Cleanup(func() { deleteReadmitPods(t, s) }) // before the kubelet stops
	for i := range readmitPods {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond)
		}
		name := fmt.Sprintf("readmit-%d", i+1)
		if _, err := c.CoreV1().Pods("default").Create(ctx, readmitPod(img, name, req), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	pods := waitReadmitPodsReady(t, s, k, names, 90*time.Second)
	outcomes := make([]readmitOutcome, len(pods))
	for i, p := range pods {
		outcomes[i] = readmitOutcome{name: p.Name, uid: p.UID, requests: requestsString(req), phases: []string{"Running"}, last: v1.PodRunning,
			containerBefore: p.Status.ContainerStatuses[0].ContainerID, restartsBefore: p.Status.ContainerStatuses[0].RestartCount}
	}
	sum := req[sc.resource].DeepCopy()
	sum.Mul(readmitPods)

	change, capAfter, allocAfterList := sc.shrink(t, m, before)
	allocAfter := allocAfterList[sc.resource]
	if sum.Cmp(allocBefore) > 0 || sum.Cmp(allocAfter) <= 0 {
		t.Fatalf("the pods' %s requests %s do not fit %s and exceed %s", sc.resource, sum.String(), allocBefore.String(), allocAfter.String())
	}
	// The running kubelet does not see it (its capacity is cached).
	if n := getNode(t, s); !sameQuantity(n.Status.Allocatable, sc.resource, allocBefore) {
		t.Fatalf("the kubelet changed allocatable %s before its restart: %v", sc.resource, n.Status.Allocatable)
	}

	// The Events so far (their times have a resolution of a second).
	eventsBefore := make([]map[string]int32, len(outcomes))
	for i, o := range outcomes {
		eventsBefore[i] = podEventCounts(t, s, o.uid)
	}
	offset, t0 := k.logSize(), time.Now()
	how := "through the restart script"
	if !nodeCurrent {
		if err := k.run(k.RestartScript); err != nil {
			t.Fatal(err)
		}
	} else {
		// The restart script's steps, with the Node's status patched
		// while no kubelet runs.
		how = "stopped, Node status patched to the new capacity and allocatable, supervised start"
		k.Stop(t)
		patchNodeResources(t, s, capAfter, allocAfterList)
		if err := k.run(k.SupervisedStartScript); err != nil {
			t.Fatal(err)
		}
	}
	restarted := time.Since(t0)
	// Watch the pods and the Node for 30 s after the restart (the kubelet
	// re-admits within a few seconds; a rejected pod's containers are then
	// stopped by its housekeeping, every 2 s).
	var nodeShrunk time.Duration
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if nodeShrunk == 0 {
			if n := getNode(t, s); n != nil && sameQuantity(n.Status.Allocatable, sc.resource, allocAfter) {
				nodeShrunk = time.Since(t0)
			}
		}
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + readmitLabel})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range list.Items {
			i := slices.Index(names, p.Name)
			if i < 0 {
				continue
			}
			o := &outcomes[i]
			if p.Status.Phase != o.last {
				o.last = p.Status.Phase
				o.phases = append(o.phases, fmt.Sprintf("%s +%s", p.Status.Phase, seconds(time.Since(t0))))
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == v1.PodReady && cond.Status != v1.ConditionTrue {
					o.notReady = true
				}
			}
		}
	}
	if _, alive := k.pid(); !alive || !k.healthy() {
		t.Fatalf("the restarted kubelet is not running; its log:\n%s", tail([]byte(k.logSince(offset)), 4000))
	}
	if nodeShrunk == 0 {
		t.Fatalf("the restarted kubelet never reported allocatable %s %s; Node: %v", sc.resource, allocAfter.String(), getNode(t, s).Status.Allocatable)
	}
	if run := k.onePreflight(t, offset); run.exit != 0 {
		t.Errorf("preflight in the kubelet's start exited %d:\n%s", run.exit, run.report)
	}
	tasks := runningTasks(t, s)
	for i := range outcomes {
		o := &outcomes[i]
		p, err := c.CoreV1().Pods("default").Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		o.phase, o.reason, o.message = p.Status.Phase, p.Status.Reason, p.Status.Message
		if len(p.Status.ContainerStatuses) == 1 {
			o.containerAfter, o.restartsAfter = p.Status.ContainerStatuses[0].ContainerID, p.Status.ContainerStatuses[0].RestartCount
		}
		o.running = slices.Contains(tasks, strings.TrimPrefix(o.containerBefore, "containerd://"))
		o.events = newEvents(t, s, o.uid, eventsBefore[i])
	}
	kubeletLog := k.logSince(offset)
	addAt := lineTime(kubeletLog, `"SyncLoop ADD" source="api"`, t0)

	// The table.
	var b strings.Builder
	fmt.Fprintf(&b, "%s, kubelet restarted %s (%s: %s)\n", change, how, seconds(restarted), timeline(k, t0))
	fmt.Fprintf(&b, "allocatable %s: before %s, after %s; the pods' requests %s in all; the Node shows the new allocatable %s after the restart began, the kubelet's SyncLoop ADD of the pods %s\n",
		sc.resource, allocBefore.String(), allocAfter.String(), sum.String(), "+"+seconds(nodeShrunk), addAt)
	fmt.Fprintln(&b, "| pod | requests | phases seen | container | restarts | container running | Ready False seen | pod events after the restart | outcome |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|")
	var got []string
	for _, o := range outcomes {
		container := shortID(o.containerBefore)
		if o.containerAfter != o.containerBefore {
			container += " -> " + shortID(o.containerAfter)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d -> %d | %v | %v | %s | %s |\n", o.name, o.requests, strings.Join(o.phases, ", "), container,
			o.restartsBefore, o.restartsAfter, o.running, o.notReady, strings.Join(o.events, " "), o.outcome())
		got = append(got, o.outcome())
	}
	for _, o := range outcomes {
		if o.reason != "" || o.message != "" {
			fmt.Fprintf(&b, "%s status: reason %q, message %q\n", o.name, o.reason, o.message)
		}
	}
	if lines := grepLines(kubeletLog, "Pod admission denied"); lines != "" {
		fmt.Fprintf(&b, "the kubelet's log:\n%s\n", lines)
	}
	t.Logf("re-admission after the allocatable shrank:\n%s", b.String())

	rejected, kept := wantRejected(sc), keptAll()
	switch {
	case slices.Equal(got, rejected):
		// The kubelet judged the pods against the new allocatable: its log
		// says so.
		if !strings.Contains(kubeletLog, "capacity: "+strconv.FormatInt(allocAfter.Value(), 10)) && !strings.Contains(kubeletLog, "capacity: "+strconv.FormatInt(allocAfter.MilliValue(), 10)) {
			t.Errorf("pods rejected, but the kubelet's log names no capacity %s", allocAfter.String())
		}
	case slices.Equal(got, kept) && !nodeCurrent:
		t.Logf("every pod kept: the kubelet re-admitted them (%s) before its informer had its own Node status with the new allocatable (seen in the API %s)", addAt, "+"+seconds(nodeShrunk))
	default:
		want := fmt.Sprintf("%q", rejected)
		if !nodeCurrent {
			want += fmt.Sprintf(" or %q", kept)
		}
		t.Errorf("outcomes %q, want %s: the kubelet's re-admission after a restart changed", got, want)
	}
	for _, o := range outcomes {
		if o.outcome() == "kept" && o.notReady {
			t.Errorf("%s was kept but its Ready condition was seen not True through the restart", o.name)
		}
	}
	side := "kubelet alone, restart script"
	if nodeCurrent {
		side = "kubelet alone, Node current at re-admission"
	}
	results.add(result{scenario: "9 re-admission", side: side,
		change:  fmt.Sprintf("%s under %d pods requesting %s %s each, kubelet restarted", change, readmitPods, sc.resource, req.Name(sc.resource, resource.DecimalSI).String()),
		correct: "-", restarts: k.startsSince(t0), writes: -1,
		note: fmt.Sprintf("allocatable %s %s -> %s, requests %s; Node shows it +%s, SyncLoop ADD %s; %s", sc.resource, allocBefore.String(), allocAfter.String(), sum.String(),
			seconds(nodeShrunk), addAt, strings.Join(got, "; "))})
}

// wantRejected is what the kubelet (v1.37.2, as v1.36.3 did) does to the pods, oldest
// first, when it re-admits them against the new allocatable: those that
// still fit are kept (same container, never not Ready); the others get the
// Event OutOfcpu or OutOfmemory and their containers are stopped (Killing)
// a few seconds later. The API never shows them Failed, and their status
// has no reason: the workload exits 0 on SIGTERM, so they end Succeeded.
func wantRejected(sc shrinkCase) []string {
	kept, rejected := "kept", "rejected "+sc.reason+", container stopped, terminal"
	if sc.resource == v1.ResourceCPU {
		// 1000m: the first (600m) fits; the second would make 1200m; the
		// third too (rejected pods count for nothing).
		return []string{kept, rejected, rejected}
	}
	// The first two fit the new allocatable, the third does not.
	return []string{kept, kept, rejected}
}

// keptAll is every pod kept.
func keptAll() []string { return slices.Repeat([]string{"kept"}, readmitPods) }

// patchNodeResources sets the Node's capacity and allocatable of the
// resources in capacity and allocatable, as the restarted kubelet's first
// status update does.
func patchNodeResources(t *testing.T, s *suite, capacity, allocatable v1.ResourceList) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": capacity, "allocatable": allocatable}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.api.Client().CoreV1().Nodes().Patch(context.Background(), nodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
}

// readmitPod is a pod on nodeName (no scheduler involved) that requests req
// and runs the workload image.
func readmitPod(img image, name string, req v1.ResourceList) *v1.Pod {
	grace := int64(5)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": readmitLabel}},
		Spec: v1.PodSpec{
			NodeName: nodeName,
			// The e2e runtime runs no CNI plugin (containerd_test.go).
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "work", Image: img.Ref(), ImagePullPolicy: v1.PullNever,
				Resources: v1.ResourceRequirements{Requests: req},
			}},
		},
	}
}

// waitReadmitPodsReady waits for the pods to be Running and Ready, and
// returns them in the order of names.
func waitReadmitPodsReady(t *testing.T, s *suite, k *kubelet, names []string, timeout time.Duration) []v1.Pod {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var pods []v1.Pod
		for _, name := range names {
			p, err := s.api.Client().CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, *p)
		}
		ready := true
		for i := range pods {
			if pods[i].Status.Phase != v1.PodRunning || len(pods[i].Status.ContainerStatuses) != 1 || !pods[i].Status.ContainerStatuses[0].Ready {
				ready = false
			}
		}
		if ready {
			return pods
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pods are not Running and Ready after %v: %v\nevents:\n%s\nend of the kubelet's log:\n%s", timeout,
				podPhases(pods), namespaceEvents(t, s, "default"), k.logTail(3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func podPhases(pods []v1.Pod) string {
	var parts []string
	for _, p := range pods {
		parts = append(parts, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, p.Status.Reason))
	}
	return strings.Join(parts, ", ")
}

// deleteReadmitPods deletes the test's pods and waits until they and
// their containers are gone.
func deleteReadmitPods(t *testing.T, s *suite) {
	t.Helper()
	deletePods(t, s, "default", readmitLabel, 60*time.Second)
}

// deletePods deletes the pods of namespace labelled app=label and waits
// (up to timeout) until they, and then every container, are gone.
func deletePods(t *testing.T, s *suite, namespace, label string, timeout time.Duration) {
	t.Helper()
	c := s.api.Client()
	ctx := context.Background()
	sel := metav1.ListOptions{LabelSelector: "app=" + label}
	if err := c.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		list, err := c.CoreV1().Pods(namespace).List(ctx, sel)
		if err == nil && len(list.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the pods app=%s of %s are not gone %v after their deletion: %v", label, namespace, timeout, err)
			break
		}
	}
	if err := s.containerd.waitNoTasks(30 * time.Second); err != nil {
		t.Error(err)
	}
}

// runningTasks are the IDs of containerd's running tasks (containers).
func runningTasks(t *testing.T, s *suite) []string {
	t.Helper()
	out, err := s.containerd.ctr("tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[2] == "RUNNING" {
			ids = append(ids, f[0])
		}
	}
	return ids
}

// podEventCounts counts the Events on the pod with uid by reason.
func podEventCounts(t *testing.T, s *suite, uid types.UID) map[string]int32 {
	t.Helper()
	list, err := s.api.Client().CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.uid=" + string(uid),
	})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int32{}
	for _, e := range list.Items {
		out[e.Reason] += max(e.Count, 1)
	}
	return out
}

// newEvents are the reasons of the Events on the pod with uid that came
// after before (podEventCounts), sorted.
func newEvents(t *testing.T, s *suite, uid types.UID, before map[string]int32) []string {
	t.Helper()
	var out []string
	for r, n := range podEventCounts(t, s, uid) {
		for range n - before[r] {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// requestsString reads "cpu 600m, memory 16Mi".
func requestsString(req v1.ResourceList) string {
	var parts []string
	for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
		if q, ok := req[r]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", r, q.String()))
		}
	}
	return strings.Join(parts, ", ")
}

// lineTime is the time of the first klog line of log containing s,
// relative to t0 ("+1.23 s"), or "not logged".
func lineTime(log, s string, t0 time.Time) string {
	at, ok := klogTime(lineWith(log, s), t0)
	if !ok {
		return "not logged"
	}
	return fmt.Sprintf("+%.2f s", at.Sub(t0).Seconds())
}

// grepLines are the lines of log containing any of words.
func grepLines(log string, words ...string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
