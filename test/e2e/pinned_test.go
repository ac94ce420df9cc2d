//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// pinnedPod is the Guaranteed pod of TestPinnedPod: one exclusive CPU
// (the static CPU manager gives it cpu1, cpu0 being reserved).
func pinnedPod(img image) *v1.Pod {
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("64Mi")}
	grace := int64(5)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned", Namespace: "default"},
		Spec: v1.PodSpec{
			// The e2e runtime runs no CNI plugin (containerd_test.go).
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{
				Name: "work", Image: img.Ref(), ImagePullPolicy: v1.PullNever,
				Resources: v1.ResourceRequirements{Requests: res, Limits: res},
			}},
		},
	}
}

// podState is what must not change for a pinned pod through hotplugd's
// actions.
type podState struct {
	UID         types.UID
	Phase       v1.PodPhase
	ContainerID string
	Restarts    int32
	// CPUSet is its container's cgroup cpuset.cpus.
	CPUSet string
}

func (p podState) String() string {
	return fmt.Sprintf("container %s, restarts %d, cpuset %q", shortID(p.ContainerID), p.Restarts, p.CPUSet)
}

func shortID(id string) string {
	id = strings.TrimPrefix(id, "containerd://")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// readPodState reads the pod and its container's cpuset (cgroup v1 with
// the cgroupfs driver: kubepods/pod<uid>/<container id>; v2:
// kubepods/pod<uid>/<container id> under the unified hierarchy).
func readPodState(t *testing.T, s *suite, name string) podState {
	t.Helper()
	p, err := s.api.Client().CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := podState{UID: p.UID, Phase: p.Status.Phase}
	if len(p.Status.ContainerStatuses) == 1 {
		cs := p.Status.ContainerStatuses[0]
		st.ContainerID, st.Restarts = cs.ContainerID, cs.RestartCount
	}
	id := strings.TrimPrefix(st.ContainerID, "containerd://")
	for _, root := range []string{"/sys/fs/cgroup/cpuset", "/sys/fs/cgroup"} {
		b, err := os.ReadFile(filepath.Join(root, "kubepods", "pod"+string(p.UID), id, "cpuset.cpus"))
		if err == nil {
			st.CPUSet = strings.TrimSpace(string(b))
			break
		}
		st.CPUSet = "unreadable: " + err.Error()
	}
	return st
}

// podEvents are the reasons of the Events on the pod.
func podEvents(t *testing.T, s *suite, name string) []string {
	t.Helper()
	list, err := s.api.Client().CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Pod,involvedObject.name=" + name,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		out = append(out, e.Reason)
	}
	return out
}

// nodeEvents are the Events on the Node with reason.
func nodeEvents(t *testing.T, s *suite, reason string) []v1.Event {
	t.Helper()
	list, err := s.api.Client().CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName + ",reason=" + reason,
	})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// checkUntouched fails for every difference between before and after, and
// for any admission error or eviction of the pod.
func checkUntouched(t *testing.T, s *suite, before, after podState, cpuset bool) {
	t.Helper()
	if after.UID != before.UID {
		t.Errorf("the pod was replaced: UID %s -> %s", before.UID, after.UID)
	}
	if after.Phase != v1.PodRunning {
		t.Errorf("the pod is %s, want Running", after.Phase)
	}
	if after.ContainerID != before.ContainerID {
		t.Errorf("container %s -> %s: it was restarted", before.ContainerID, after.ContainerID)
	}
	if after.Restarts != before.Restarts {
		t.Errorf("restartCount %d -> %d", before.Restarts, after.Restarts)
	}
	if cpuset && after.CPUSet != before.CPUSet {
		t.Errorf("its cgroup's cpuset %q -> %q", before.CPUSet, after.CPUSet)
	}
	for _, r := range podEvents(t, s, "pinned") {
		if r == "UnexpectedAdmissionError" || r == "Evicted" || r == "Preempting" || r == "Killing" {
			t.Errorf("the pod has an Event %s", r)
		}
	}
}

// TestPinnedPod runs a Guaranteed pod pinned to cpu1 by the static CPU
// manager through hotplugd's actions: a hugepage change, which hotplugd
// remedies by asking the kubelet's supervisor for one restart (hotplugd
// preflight in its start finds cpu_manager_state valid and keeps the pod's
// assignment), leaves the pod running in the same container on the same
// CPU; cpu1 offline, which would drop the pod's assignment, makes hotplugd
// stop at a NeedsDrain Event naming the pod: no restart asked, and the
// kubelet, its state file and the pod left alone.
func TestPinnedPod(t *testing.T) {
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
	k := startStaticKubelet(t, s)
	c := s.api.Client()
	ctx := context.Background()

	t0 := time.Now()
	if _, err := c.CoreV1().Pods("default").Create(ctx, pinnedPod(img), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Gone, and its containers with it, before the kubelet stops
		// (cleanups run in reverse).
		if err := c.CoreV1().Pods("default").Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Error(err)
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, err := c.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the pinned pod is not gone 60 s after its deletion")
				break
			}
		}
		if err := s.containerd.waitNoTasks(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	var before podState
	for deadline := t0.Add(90 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p, err := c.CoreV1().Pods("default").Get(ctx, "pinned", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if deploytest.PodReady(p) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pinned pod is not Ready after 90 s: %s\nevents:\n%s\nend of the kubelet's log:\n%s",
				deploytest.Describe([]v1.Pod{*p}), namespaceEvents(t, s, "default"), k.logTail(3000))
		}
	}
	before = readPodState(t, s, "pinned")
	t.Logf("pinned pod Ready in %v: %s", time.Since(t0).Round(time.Millisecond), before)
	if before.CPUSet != "1" {
		t.Fatalf("the pinned pod's cpuset is %q, want 1 (static CPU manager, cpu0 reserved)", before.CPUSet)
	}
	if !strings.Contains(readFile(t, filepath.Join(k.RootDir, "cpu_manager_state")), string(before.UID)) {
		t.Fatalf("cpu_manager_state has no assignment of pod %s", before.UID)
	}

	d := startHotplugd(t, s, k, "--remedy-interval", "1s")

	t.Run("hugepage remedy", func(t *testing.T) {
		writes0, offset := hotplugdWrites(t, d), k.logSize()
		mark, t1 := d.Mark(), time.Now()
		m.SetHugePages(t, node0Hugepages2Mi, 16)
		want := resource.MustParse("32Mi")
		took, n, ok := waitNode(t, s, t1, time.Minute, func(n *v1.Node) bool {
			return sameQuantity(n.Status.Capacity, hugepages2Mi, want)
		})
		if !ok {
			t.Fatalf("the Node does not show 32Mi of 2Mi hugepages 1 min after the change: %v; hotplugd's log:\n%s", n.Status.Capacity, d.Dump())
		}
		restart := remedyDone(t, d, mark, 30*time.Second)
		if why := k.oneSupervisedRestart(t1); why != "" {
			t.Error(why)
		}
		// preflight in the kubelet's start judged the pod's assignment
		// valid and left it; the kubelet kept it.
		run := checkStartPreflight(t, k, offset)
		if !strings.Contains(run.report, preflight.CPUManagerState+": "+string(preflight.Valid)+" ") {
			t.Errorf("preflight in the kubelet's start did not find cpu_manager_state valid:\n%s", run.report)
		}
		if !strings.Contains(readFile(t, filepath.Join(k.RootDir, preflight.CPUManagerState)), string(before.UID)) {
			t.Errorf("cpu_manager_state lost the assignment of pod %s", before.UID)
		}
		// The kubelet re-admits its pods and reconciles their CPUs after
		// its start: give it its reconcile period before judging.
		time.Sleep(12 * time.Second)
		after := readPodState(t, s, "pinned")
		checkUntouched(t, s, before, after, true)
		results.add(result{scenario: "8 pinned pod", side: "hotplugd", change: "16 x 2Mi hugepages, Guaranteed pod pinned to cpu1",
			correct: seconds(took), restarts: k.startsSince(t1), writes: settleWrites(t, d) - writes0,
			note: fmt.Sprintf("kubelet %s (remedy %.2f s); before: %s; after: %s", timeline(k, t1), restart.Seconds(), before, after)})
	})

	t.Run("cpu1 offline", func(t *testing.T) {
		state := filepath.Join(k.RootDir, "cpu_manager_state")
		stateBefore := readFile(t, state)
		podBefore := readPodState(t, s, "pinned")
		drains := len(nodeEvents(t, s, nodepatch.ReasonNeedsDrain))
		writes0, mark := hotplugdWrites(t, d), d.Mark()
		t1 := time.Now()
		m.SetCPUOnline(t, 1, false)
		var msg string
		for deadline := t1.Add(time.Minute); msg == ""; time.Sleep(100 * time.Millisecond) {
			if evs := nodeEvents(t, s, nodepatch.ReasonNeedsDrain); len(evs) > drains {
				msg = evs[len(evs)-1].Message
			}
			if time.Now().After(deadline) {
				t.Fatalf("no NeedsDrain Event 1 min after cpu1 went offline; hotplugd's log:\n%s", d.Dump())
			}
		}
		took := time.Since(t1)
		if !strings.Contains(msg, "default/pinned") {
			t.Errorf("the NeedsDrain Event does not name the pod default/pinned: %s", msg)
		}
		// Nothing happens after it: watched for as long as a remedy takes.
		time.Sleep(10 * time.Second)
		if calls := k.callsSince(t1); len(calls) != 0 {
			t.Errorf("the kubelet's scripts ran (%s), want no restart, stop or start", timeline(k, t1))
		}
		for _, e := range d.Since(mark) {
			if e.Msg == restartAsked {
				t.Errorf("the daemon asked for a restart: %s", e.RawLine)
			}
		}
		if got := readFile(t, state); got != stateBefore {
			t.Errorf("cpu_manager_state changed:\n%s\n->\n%s", stateBefore, got)
		}
		if _, alive := k.pid(); !alive {
			t.Errorf("the kubelet is not running")
		}
		after := readPodState(t, s, "pinned")
		// cgroup v1 empties the cpuset of an offline CPU's only user: the
		// kernel's doing, not hotplugd's; the pod itself is untouched.
		checkUntouched(t, s, podBefore, after, false)
		results.add(result{scenario: "8 pinned pod", side: "hotplugd", change: "cpu1 offline under the pinned pod",
			correct: "NeedsDrain Event " + seconds(took) + " (no restart asked, by design)", restarts: k.startsSince(t1), writes: settleWrites(t, d) - writes0,
			note: fmt.Sprintf("state file untouched; before: %s; after: %s; event: %s", podBefore, after, msg)})
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSpace(b))
}
