//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	watchapi "k8s.io/apimachinery/pkg/watch"

	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// This file is TestLatency's LOADED node: its pods, their readiness
// probes' targets, and the watch that judges them through each remedy.

// The LOADED node's pods: hostNetwork (the runtime has no CNI plugin),
// bound to the node by name (no scheduler), the pause image as their
// container but the pinned pod's, whose workload image prints its CPUs.
const (
	loadNamespace = "e2e-latency"
	loadLabel     = "e2e-latency"
	// loadProbePeriod is the readiness probes' period, as in the node
	// VM's scenario 11.
	loadProbePeriod = time.Second
)

// loadClass is one kind of pod of the load, and how many.
type loadClass struct {
	prefix string
	n      int
	pod    func(name string, port int) *v1.Pod
}

// podBaseline is what a remedy must not change of a pod.
type podBaseline struct {
	uid       types.UID
	container string
	restarts  int32
	started   time.Time
	// rv is the resource version the pod was recorded at: watch events
	// of it up to there (its creation, its start) are not judged.
	rv uint64
}

// podLoad is the LOADED node's pods, their readiness probes' targets and
// the watch of the pods.
type podLoad struct {
	s *suite
	k *kubelet
	// pods by name; probes by the name of the pod they serve.
	pods   map[string]podBaseline
	probes map[string]*probeTarget
	watch  *podWatch
}

// probeTarget is a loopback port one pod's readiness probe (TCP) connects
// to: the pods are pause containers that listen on nothing, and a port of
// the test's tells when the kubelet probed.
type probeTarget struct {
	l    net.Listener
	last atomic.Int64 // unix ns of the last connection
}

func newProbeTarget(t *testing.T) *probeTarget {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &probeTarget{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			p.last.Store(time.Now().UnixNano())
			c.Close()
		}
	}()
	return p
}

func (p *probeTarget) port() int { return p.l.Addr().(*net.TCPAddr).Port }

// loadPods starts the LOADED node's 50 pods and waits until every one is
// Running and Ready; they are deleted, and their containers gone, before
// the kubelet stops.
//
//   - 1 Guaranteed, cpu 1: pinned to cpu1 by the static CPU manager (cpu0
//     is reserved); for the hugepage incident only (unpin replaces it);
//   - 14 Guaranteed, cpu 10m, memory 16Mi: the shared pool;
//   - 12 Burstable, cpu 5m, memory 8Mi, a TCP readiness probe every second;
//   - 13 Burstable, cpu 5m, memory 8Mi, no probe;
//   - 10 BestEffort.
//
// Their requests fit allocatable after every change, so that hotplugd's
// re-admission check lets the restart go: cpu 1265m of 1500m with the
// pinned pod, 275m of the 500m left with cpu1 offline after it.
func loadPods(t *testing.T, s *suite, k *kubelet, workImg image) *podLoad {
	t.Helper()
	l := &podLoad{s: s, k: k, pods: map[string]podBaseline{}, probes: map[string]*probeTarget{}}
	c := s.api.Client()
	ctx := context.Background()
	// The namespace and its service account (no controller manager runs):
	// kept for the run, which starts its own API server.
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: loadNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: loadNamespace}}
	if _, err := c.CoreV1().ServiceAccounts(loadNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	classes := []loadClass{
		{"pinned", 1, func(name string, _ int) *v1.Pod { return l.guaranteed(name, "1", "32Mi", workImg.Ref()) }},
		{"guaranteed", 14, func(name string, _ int) *v1.Pod { return l.guaranteed(name, "10m", "16Mi", pauseImage) }},
		{"probed", 12, func(name string, port int) *v1.Pod { return l.burstable(name, port) }},
		{"burstable", 13, func(name string, _ int) *v1.Pod { return l.burstable(name, 0) }},
		{"besteffort", 10, func(name string, _ int) *v1.Pod { return l.pod(name, pauseImage, v1.ResourceRequirements{}) }},
	}
	// Deleted before the probes' ports close and the kubelet stops
	// (cleanups run in reverse).
	t.Cleanup(func() {
		for _, p := range l.probes {
			p.l.Close()
		}
	})
	t.Cleanup(func() { deleteLoad(t, s) })
	t0 := time.Now()
	var names []string
	for _, cl := range classes {
		for i := range cl.n {
			name := cl.prefix
			if cl.n > 1 {
				name = fmt.Sprintf("%s-%02d", cl.prefix, i+1)
			}
			port := 0
			if cl.prefix == "probed" {
				p := newProbeTarget(t)
				l.probes[name] = p
				port = p.port()
			}
			if _, err := c.CoreV1().Pods(loadNamespace).Create(ctx, cl.pod(name, port), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			names = append(names, name)
		}
	}
	l.waitReady(t, names, 3*time.Minute)
	t.Logf("%d pods Running and Ready %v after their creation", len(names), time.Since(t0).Round(time.Millisecond))
	if got := l.cpuSet(t, "pinned"); got != "1" {
		t.Fatalf("the pinned pod's cpuset is %q, want 1 (static CPU manager, cpu0 reserved)", got)
	}
	l.watch = watchPods(t, s)
	return l
}

// pod is a pod of the load with one container.
func (l *podLoad) pod(name, img string, res v1.ResourceRequirements) *v1.Pod {
	grace := int64(5)
	no := false
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: loadNamespace, Labels: map[string]string{"app": loadLabel}},
		Spec: v1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			Containers: []v1.Container{{
				Name: "work", Image: img, ImagePullPolicy: v1.PullNever, Resources: res,
			}},
		},
	}
}

// guaranteed is a Guaranteed pod: limits equal to requests.
func (l *podLoad) guaranteed(name, cpu, mem, img string) *v1.Pod {
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse(cpu), v1.ResourceMemory: resource.MustParse(mem)}
	return l.pod(name, img, v1.ResourceRequirements{Requests: res, Limits: res})
}

// burstable is a Burstable pod, with a readiness probe of port when it is
// not 0: TCP to the test's port on the loopback (the pod is hostNetwork,
// its IP the node's; the probe names the host).
func (l *podLoad) burstable(name string, port int) *v1.Pod {
	req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("5m"), v1.ResourceMemory: resource.MustParse("8Mi")}
	p := l.pod(name, pauseImage, v1.ResourceRequirements{Requests: req})
	if port != 0 {
		p.Spec.Containers[0].ReadinessProbe = &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Host: "127.0.0.1", Port: intstr.FromInt32(int32(port))}},
			PeriodSeconds: int32(loadProbePeriod / time.Second), TimeoutSeconds: 1, FailureThreshold: 3,
		}
	}
	return p
}

// waitReady waits for the pods to be Running and Ready and records them
// as the baseline.
func (l *podLoad) waitReady(t *testing.T, names []string, timeout time.Duration) {
	t.Helper()
	c := l.s.api.Client()
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		list, err := c.CoreV1().Pods(loadNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + loadLabel})
		if err != nil {
			t.Fatal(err)
		}
		var notReady []string
		byName := map[string]v1.Pod{}
		for _, p := range list.Items {
			byName[p.Name] = p
		}
		for _, name := range names {
			p, ok := byName[name]
			if !ok || !podUp(&p) {
				notReady = append(notReady, name)
			}
		}
		if len(notReady) == 0 {
			for _, name := range names {
				p := byName[name]
				cs := p.Status.ContainerStatuses[0]
				rv, err := strconv.ParseUint(p.ResourceVersion, 10, 64)
				if err != nil {
					t.Fatalf("pod %s: resource version %q: %v", name, p.ResourceVersion, err)
				}
				l.pods[name] = podBaseline{uid: p.UID, container: cs.ContainerID, restarts: cs.RestartCount, started: cs.State.Running.StartedAt.Time, rv: rv}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods not Running and Ready %v after their creation: %v\nevents:\n%s\nend of the kubelet's log:\n%s",
				len(notReady), timeout, notReady, namespaceEvents(t, l.s, loadNamespace), l.k.logTail(3000))
		}
	}
}

// podUp is whether p is Running and Ready with its one container running
// and ready.
func podUp(p *v1.Pod) bool {
	if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil || len(p.Status.ContainerStatuses) != 1 {
		return false
	}
	cs := p.Status.ContainerStatuses[0]
	if !cs.Ready || cs.State.Running == nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// waitProbeGrace waits until every container started more than 10 s
// before now (and a second more: the API's start times have a resolution
// of a second). A kubelet 1.35+ keeps a running container's readiness
// through its restart only for a container that started at least 10 s
// before the kubelet (prober kubeletRestartGracePeriod); one that started
// later gets the initial Failure until its probe passes, as at its start.
func (l *podLoad) waitProbeGrace(t *testing.T) {
	t.Helper()
	var newest time.Time
	for _, p := range l.pods {
		if p.started.After(newest) {
			newest = p.started
		}
	}
	if wait := time.Until(newest.Add(12 * time.Second)); wait > 0 {
		t.Logf("waiting %v: the newest container started %s", wait.Round(time.Millisecond), newest.UTC().Format(time.RFC3339))
		time.Sleep(wait)
	}
}

// checkWindow checks the pods through one remedy: it waits until every
// probed pod was probed by the kubelet started at started (its probe
// workers run: a readiness reset would have been written by then) and a
// probe period more, then judges every pod event the watch saw since tw
// and the pods as they are. It returns how long after the kubelet's start
// the probes had all run again, and how many pod events were seen.
func (l *podLoad) checkWindow(t *testing.T, k *kubelet, change string, tw, started time.Time) (time.Duration, int, map[string]int) {
	t.Helper()
	var probed time.Duration
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var last time.Time
		all := true
		for _, p := range l.probes {
			at := time.Unix(0, p.last.Load())
			if !at.After(started) {
				all = false
				break
			}
			if at.After(last) {
				last = at
			}
		}
		if all {
			probed = last.Sub(started)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not every probed pod was probed within 30 s of the kubelet's start; end of its log:\n%s", change, k.logTail(3000))
		}
	}
	time.Sleep(loadProbePeriod)
	events, changed, bad := l.watch.judge(l.pods)
	for _, b := range bad {
		t.Errorf("%s: %s", change, b)
	}
	if events > 0 {
		t.Logf("%s: %d pod updates, changing: %s", change, events, countsString(changed))
	}
	l.checkNow(t, change)
	if l.pinnedNow() {
		if !strings.Contains(readFile(t, filepath.Join(k.RootDir, preflight.CPUManagerState)), string(l.pods["pinned"].uid)) {
			t.Errorf("%s: cpu_manager_state lost the pinned pod's assignment", change)
		}
	}
	return probed, events, changed
}

// pinnedNow is whether the pinned pod is part of the load.
func (l *podLoad) pinnedNow() bool {
	_, ok := l.pods["pinned"]
	return ok
}

// checkNow lists the pods and fails for every one that is not as its
// baseline: same UID, same container, same restart count, Running, Ready.
func (l *podLoad) checkNow(t *testing.T, change string) {
	t.Helper()
	list, err := l.s.api.Client().CoreV1().Pods(loadNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + loadLabel})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for i := range list.Items {
		p := &list.Items[i]
		want, ok := l.pods[p.Name]
		if !ok {
			continue
		}
		seen[p.Name] = true
		if why := podChanged(p, want); why != "" {
			t.Errorf("%s: pod %s: %s", change, p.Name, why)
		}
	}
	for name := range l.pods {
		if !seen[name] {
			t.Errorf("%s: pod %s is gone", change, name)
		}
	}
}

// podChanged says how p differs from its baseline ("": it does not).
func podChanged(p *v1.Pod, want podBaseline) string {
	var why []string
	if p.UID != want.uid {
		why = append(why, fmt.Sprintf("replaced (UID %s -> %s)", want.uid, p.UID))
	}
	if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil {
		why = append(why, fmt.Sprintf("phase %s, deleting %v", p.Status.Phase, p.DeletionTimestamp != nil))
	}
	ready := "no Ready condition"
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			ready = string(c.Status)
			if c.Status != v1.ConditionTrue {
				why = append(why, fmt.Sprintf("Ready %s (%s: %s)", c.Status, c.Reason, c.Message))
			}
		}
	}
	if ready == "no Ready condition" {
		why = append(why, ready)
	}
	if len(p.Status.ContainerStatuses) != 1 {
		why = append(why, fmt.Sprintf("%d container statuses", len(p.Status.ContainerStatuses)))
	} else {
		cs := p.Status.ContainerStatuses[0]
		if cs.ContainerID != want.container {
			why = append(why, fmt.Sprintf("container %s -> %s", shortID(want.container), shortID(cs.ContainerID)))
		}
		if cs.RestartCount != want.restarts {
			why = append(why, fmt.Sprintf("restartCount %d -> %d", want.restarts, cs.RestartCount))
		}
		if !cs.Ready {
			why = append(why, "container not ready")
		}
		if cs.State.Running == nil {
			why = append(why, "container not running")
		}
	}
	return strings.Join(why, ", ")
}

// cpuSet is the cgroup cpuset of the pod's container (cgroup v1 with the
// cgroupfs driver: kubepods/pod<uid>/<container id>; v2: the same under the
// unified hierarchy). Guaranteed pods sit directly under kubepods.
func (l *podLoad) cpuSet(t *testing.T, name string) string {
	t.Helper()
	p, ok := l.pods[name]
	if !ok {
		t.Fatalf("no pod %s in the load", name)
	}
	id := strings.TrimPrefix(p.container, "containerd://")
	var errs []string
	for _, root := range []string{"/sys/fs/cgroup/cpuset", "/sys/fs/cgroup"} {
		b, err := os.ReadFile(filepath.Join(root, "kubepods", "pod"+string(p.uid), id, "cpuset.cpus"))
		if err == nil {
			return strings.TrimSpace(string(b))
		}
		errs = append(errs, err.Error())
	}
	return "unreadable: " + strings.Join(errs, "; ")
}

// checkPinned checks, after the hugepage incident, that the pinned pod
// still runs on cpu1 alone and its assignment is in cpu_manager_state.
func (l *podLoad) checkPinned(t *testing.T) {
	t.Helper()
	if got := l.cpuSet(t, "pinned"); got != "1" {
		t.Errorf("after the hugepage incident the pinned pod's cpuset is %q, want 1", got)
	}
}

// unpin replaces the pinned pod by one more Guaranteed pod of the shared
// pool: with cpu1 pinned, cpu1 offline is a NeedsDrain (TestPinnedPod),
// not a restart. It waits until the kubelet has dropped the assignment from
// cpu_manager_state and given cpu1 back to the shared pool (defaultCpuSet
// 0-1), which hotplugd would otherwise judge.
func (l *podLoad) unpin(t *testing.T) {
	t.Helper()
	c := l.s.api.Client()
	ctx := context.Background()
	pinned := l.pods["pinned"]
	delete(l.pods, "pinned")
	if err := c.CoreV1().Pods(loadNamespace).Delete(ctx, "pinned", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	const name = "guaranteed-15"
	if _, err := c.CoreV1().Pods(loadNamespace).Create(ctx, l.guaranteed(name, "10m", "16Mi", pauseImage), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	for deadline := t0.Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := c.CoreV1().Pods(loadNamespace).Get(ctx, "pinned", metav1.GetOptions{})
		state := readFile(t, filepath.Join(l.k.RootDir, preflight.CPUManagerState))
		// The kubelet deletes the assignment, then gives its CPU back to
		// the shared pool: two writes of the file.
		if apierrors.IsNotFound(err) && !strings.Contains(state, string(pinned.uid)) && defaultCPUSet(t, l.k) == "0-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pinned pod is not gone, or its assignment still in cpu_manager_state, 60 s after its deletion (get: %v):\n%s", err, state)
		}
	}
	l.waitReady(t, []string{name}, 60*time.Second)
	t.Logf("pinned pod replaced by %s in %v; cpu_manager_state: %s", name, time.Since(t0).Round(time.Millisecond), latencyStateFile(t, l.k))
}

// checkEnd checks the pods once more and that the kubelet sent no Event of
// a pod killed, evicted, rejected or given a new sandbox (the pinned pod's
// own Killing, from its deletion by unpin, excepted).
func (l *podLoad) checkEnd(t *testing.T) {
	t.Helper()
	_, _, bad := l.watch.judge(l.pods)
	for _, b := range bad {
		t.Errorf("after the last change: %s", b)
	}
	l.checkNow(t, "at the end")
	list, err := l.s.api.Client().CoreV1().Events(loadNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		switch {
		case e.InvolvedObject.Name == "pinned" && e.Reason == "Killing":
		case e.Reason == "Killing", e.Reason == "Evicted", e.Reason == "Preempting", e.Reason == "UnexpectedAdmissionError",
			e.Reason == "SandboxChanged", e.Reason == "BackOff", e.Reason == "Unhealthy", strings.HasPrefix(e.Reason, "OutOf"):
			t.Errorf("pod %s has an Event %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// deleteLoad deletes the load's pods and waits until they and their
// containers are gone.
func deleteLoad(t *testing.T, s *suite) {
	t.Helper()
	deletePods(t, s, loadNamespace, loadLabel, 90*time.Second)
}

// podWatch follows the load's pods with a watch (every change, none
// sampled), re-established from the last version seen if the API server
// ends it.
type podWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	seen []podSeen
	errs []podSeen // the watch failing, as an event with why
	// judged and judgedErrs are how many of seen and errs judge has
	// looked at.
	judged, judgedErrs int
}

// podSeen is one pod as one watch event showed it, and what it changed
// of the pod as last seen (JSON paths, list indices as []).
type podSeen struct {
	at      time.Time
	typ     watchapi.EventType
	pod     *v1.Pod
	changed []string
	fail    string
}

func watchPods(t *testing.T, s *suite) *podWatch {
	t.Helper()
	c := s.api.Client()
	ctx, cancel := context.WithCancel(context.Background())
	w := &podWatch{cancel: cancel, done: make(chan struct{})}
	sel := metav1.ListOptions{LabelSelector: "app=" + loadLabel}
	list, err := c.CoreV1().Pods(loadNamespace).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	rv := list.ResourceVersion
	last := map[string]*v1.Pod{}
	for i := range list.Items {
		last[list.Items[i].Name] = &list.Items[i]
	}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			o := sel
			o.ResourceVersion = rv
			o.AllowWatchBookmarks = true
			wi, err := c.CoreV1().Pods(loadNamespace).Watch(ctx, o)
			if err != nil {
				w.fail(ctx, "the pod watch could not be (re-)established: "+err.Error())
				return
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watchapi.Error {
					wi.Stop()
					w.fail(ctx, fmt.Sprintf("the pod watch ended with an error: %v", apierrors.FromObject(ev.Object)))
					return
				}
				p, ok := ev.Object.(*v1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type == watchapi.Bookmark {
					continue
				}
				seen := podSeen{at: time.Now(), typ: ev.Type, pod: p, changed: podDiff(last[p.Name], p)}
				last[p.Name] = p
				w.mu.Lock()
				w.seen = append(w.seen, seen)
				w.mu.Unlock()
			}
			wi.Stop()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

func (w *podWatch) fail(ctx context.Context, why string) {
	if ctx.Err() != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.errs = append(w.errs, podSeen{at: time.Now(), fail: why})
}

// judge returns how many events of the baseline's pods the watch saw since
// the last judge (since it started, the first time; a pod's from its
// baseline on), how often each field
// changed in them, and what was wrong in them: any pod deleted, replaced,
// not Running, not Ready, with another container or restart count; the
// watch failing, or no longer running. Every event is judged once, in the
// window of the change that follows it at the latest.
func (w *podWatch) judge(baseline map[string]podBaseline) (int, map[string]int, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var bad []string
	n := 0
	changed := map[string]int{}
	for _, e := range w.seen[w.judged:] {
		want, ok := baseline[e.pod.Name]
		if !ok {
			continue
		}
		// etcd's resource versions, compared as the API server's own
		// watch cache does.
		if rv, err := strconv.ParseUint(e.pod.ResourceVersion, 10, 64); err == nil && rv <= want.rv {
			continue
		}
		n++
		for _, c := range e.changed {
			changed[c]++
		}
		at := e.at.UTC().Format("15:04:05.000")
		if e.typ == watchapi.Deleted {
			bad = append(bad, fmt.Sprintf("pod %s deleted at %s", e.pod.Name, at))
			continue
		}
		if why := podChanged(e.pod, want); why != "" {
			bad = append(bad, fmt.Sprintf("pod %s at %s (%s): %s", e.pod.Name, at, e.typ, why))
		}
	}
	w.judged = len(w.seen)
	for _, e := range w.errs[w.judgedErrs:] {
		bad = append(bad, e.fail)
	}
	w.judgedErrs = len(w.errs)
	select {
	case <-w.done:
		bad = append(bad, "the pod watch is no longer running: the pods were not watched since")
	default:
	}
	return n, changed, bad
}

// latencyStateFile is cpu_manager_state's assignments, for a message.
func latencyStateFile(t *testing.T, k *kubelet) string {
	t.Helper()
	var st struct {
		DefaultCPUSet string          `json:"defaultCpuSet"`
		Entries       json.RawMessage `json:"entries"`
	}
	b := readFile(t, filepath.Join(k.RootDir, preflight.CPUManagerState))
	if err := json.Unmarshal([]byte(b), &st); err != nil {
		return b
	}
	return fmt.Sprintf("defaultCpuSet %s, entries %s", st.DefaultCPUSet, st.Entries)
}

// podDiff lists the JSON paths whose values differ between two versions
// of a pod (list indices as [], the resource version and managed fields
// left out); every path when there is no old one.
func podDiff(old, cur *v1.Pod) []string {
	flat := func(p *v1.Pod) map[string]string {
		out := map[string]string{}
		if p == nil {
			return out
		}
		c := p.DeepCopy()
		c.ResourceVersion, c.ManagedFields = "", nil
		b, err := json.Marshal(c)
		if err != nil {
			return out
		}
		var v any
		if json.Unmarshal(b, &v) == nil {
			flatten("", v, out)
		}
		return out
	}
	a, b := flat(old), flat(cur)
	set := map[string]string{}
	for k, v := range b {
		if w, ok := a[k]; !ok || w != v {
			set[listIndex.ReplaceAllString(k, "[]")] = fmt.Sprintf("%s -> %s", valueOr(w, ok), v)
		}
	}
	for k, w := range a {
		if _, ok := b[k]; !ok {
			set[listIndex.ReplaceAllString(k, "[]")] = w + " -> (none)"
		}
	}
	var out []string
	for k, v := range set {
		if old == nil {
			v = "new"
		}
		out = append(out, k+" ("+v+")")
	}
	slices.Sort(out)
	return out
}

func valueOr(v string, ok bool) string {
	if !ok {
		return "(none)"
	}
	return v
}

var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// flatten writes every leaf of a decoded JSON value as path -> value.
func flatten(prefix string, v any, out map[string]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			flatten(prefix+"."+k, e, out)
		}
	case []any:
		for i, e := range v {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), e, out)
		}
	default:
		b, _ := json.Marshal(v)
		out[strings.TrimPrefix(prefix, ".")] = string(b)
	}
}

// countsString reads "a x2, b x1", the most frequent first.
func countsString(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s x%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
