//go:build e2e

package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/hotplugd/hotplugd/internal/testimage"
)

// probedName is the Service, its pod's name and app label (scenario 11).
const probedName = "probed"

// probedImageName is the probed server's image (test/e2e/node/probed).
const probedImageName = "hotplugd.test/probed:e2e"

// probedPort is where the probed pod's server listens: the node's port
// (the pod is hostNetwork), probed by the kubelet at the pod's IP.
const probedPort = 18080

// probedPeriod is the readiness probe's period: a kubelet that reset
// readiness at its start would leave the pod not ready for up to one
// period after its first probe (kubelet 1.34's behaviour).
const probedPeriod = time.Second

// afterCurrent is how long the EndpointSlices are still watched after the
// remedy is verified (the Node current, the journal's outcome written):
// the restarted kubelet's status manager has synced the pod by then and
// several probes have run (a kubelet that resets readiness writes the
// reset at its first pod sync, before it reports its Node).
const afterCurrent = 5 * probedPeriod

// readinessThroughRemedy is scenario 11: a pod with a readiness probe
// behind a (headless) Service, its endpoint in the EndpointSlice the host's
// controller manager keeps; a drift (2Mi hugepages set) is remedied by
// hotplugd's unit with one kubelet restart, and the EndpointSlices of the
// Service are watched, from before the drift until afterCurrent after the
// Node is current, for any change of the pod's endpoint: kubelet 1.36
// keeps readiness through a restart (ChangeContainerStatusOnKubeletRestart
// off), so the endpoint must never turn not ready, nor leave the slice.
// The controllers run only for this scenario (their node lifecycle
// controller would taint the Node while the VM is off between boots).
func readinessThroughRemedy(t *testing.T, v *vm, img testimage.Image) {
	s := api(t)
	t0 := time.Now()
	if err := s.StartControllers(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.StopControllers)
	c := s.Client()
	ctx := context.Background()
	pod := probedPod(img.Ref())
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: probedName, Namespace: "default"},
		Spec: v1.ServiceSpec{
			ClusterIP: v1.ClusterIPNone,
			Selector:  map[string]string{"app": probedName},
			Ports:     []v1.ServicePort{{Name: "http", Port: probedPort, TargetPort: intstr.FromInt32(probedPort)}},
		},
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := c.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Deleted before the controllers stop (cleanups run in reverse).
	t.Cleanup(func() { removeProbed(t, c) })

	w := watchSlices(t, c, string(created.UID))
	defer w.stop()
	if !w.waitReady(readyTimeout) {
		p, _ := c.CoreV1().Pods("default").Get(ctx, probedName, metav1.GetOptions{})
		t.Fatalf("the probed pod's endpoint is not ready in its Service's EndpointSlice %v after its creation (%s); pod: %+v\nkubelet:\n%s",
			readyTimeout, w.summary(), p.Status, v.journal("kubelet", 30))
	}
	t.Logf("controllers, Service and pod -> endpoint ready: %v", time.Since(t0).Round(time.Millisecond))

	// The drift, remedied by hotplugd's unit, once the kubelet's grace is
	// over (the remedy, not the grace, is measured).
	v.pastKubeletGrace()
	was := qty(getNode(t).Status.Capacity, "hugepages-2Mi").Value() >> 21
	j0 := v.remedyJournal()
	w.mark()
	cur := v.mark()
	t1 := time.Now()
	got := v.setHugepages(int(was) + 8)
	d := waitNode(t, t1, stepTimeout, "the 2Mi hugepages", hugepagesAre(int64(got)<<21))
	var j remedyJournal
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool {
		j = v.remedyJournal()
		return j.Underway == nil && j.Seq > j0.Seq
	}) {
		t.Errorf("hotplugd's remedy did not end within %v: journal %+v", stepTimeout, j)
	}
	verified := time.Since(t1)
	time.Sleep(afterCurrent)
	seen, bad, breaks := w.end()
	watched := time.Since(t1)
	restarts := v.starts(cur)
	outcomes := v.remedyJournal().outcomesSince(j0.Seq)
	down := v.kubeletDown(cur)

	if restarts != 1 || strings.Join(outcomes, ",") != "remediated" {
		t.Errorf("%d kubelet restarts and journal outcomes %q since the drift, want one restart, remediated:\n%s", restarts, outcomes, v.journal("hotplugd", 30))
	}
	for _, b := range bad {
		t.Errorf("the probed pod's endpoint through the remedy: %s", b)
	}
	// The control: the same watch sees the endpoint leave when the pod is
	// deleted (a watch that had stopped delivering would pass the above
	// with no event).
	t2 := time.Now()
	if err := c.CoreV1().Pods("default").Delete(ctx, probedName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	left := "never"
	if w.waitLeft(time.Minute) {
		left = seconds(time.Since(t2))
	} else {
		t.Errorf("the watch did not see the pod's endpoint turn not ready or leave within a minute of the pod's deletion (%s): it was not watching", w.summary())
	}
	w.stop()
	t.Logf("drift -> Node current %v, remedy verified %v, watched %v after the drift: %d EndpointSlice event(s), %d with the pod's endpoint not ready or gone, %d watch re-established; kubelet down %s; control: the pod's deletion seen by the watch after %s",
		d.Round(time.Millisecond), verified.Round(time.Millisecond), watched.Round(time.Millisecond), seen, len(bad), breaks, down, left)
	addResult(result{scenario: "11 readiness through a remedy", side: "hotplugd", change: fmt.Sprintf("%d x 2Mi hugepages set under a Service's ready pod", got),
		correct: seconds(d), restarts: restarts, writes: -1,
		note: fmt.Sprintf("EndpointSlices watched %v from the drift (until %v after the remedy's end): %d event(s), the pod's endpoint not ready or gone in %d (none changed it: ready throughout); kubelet down %s; journal %q; control: the pod's deletion seen by the same watch after %s",
			watched.Round(time.Millisecond), afterCurrent, seen, len(bad), down, outcomes, left)})
	// The hugepages stay: the node is powered off next (boot 2 starts
	// with none), and taking them back would cost another remedy.
}

// probedPod is the Service's pod: the probed server, hostNetwork (the node
// runs no CNI plugin), a readiness probe every probedPeriod, bound to the
// node, Burstable with a small request (room beside the pinned pod).
func probedPod(image string) *v1.Pod {
	grace := int64(5)
	no := false
	req := v1.ResourceList{v1.ResourceCPU: resource.MustParse("10m"), v1.ResourceMemory: resource.MustParse("16Mi")}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: probedName, Namespace: "default", Labels: map[string]string{"app": probedName}},
		Spec: v1.PodSpec{
			NodeName:                      nodeName,
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			Containers: []v1.Container{{
				Name: "server", Image: image, ImagePullPolicy: v1.PullNever,
				Args:      []string{fmt.Sprintf("--addr=:%d", probedPort)},
				Ports:     []v1.ContainerPort{{Name: "http", ContainerPort: probedPort}},
				Resources: v1.ResourceRequirements{Requests: req},
				ReadinessProbe: &v1.Probe{
					ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(probedPort)}},
					PeriodSeconds: int32(probedPeriod / time.Second), TimeoutSeconds: 1, FailureThreshold: 3,
				},
			}},
		},
	}
}

// removeProbed deletes the Service and the pod and waits for the pod to be
// gone.
func removeProbed(t *testing.T, c kubernetes.Interface) {
	ctx := context.Background()
	if err := c.CoreV1().Services("default").Delete(ctx, probedName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	if err := c.CoreV1().Pods("default").Delete(ctx, probedName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
	if !waitFor(time.Minute, 500*time.Millisecond, func() bool {
		_, err := c.CoreV1().Pods("default").Get(ctx, probedName, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}) {
		t.Errorf("the pod %s is not gone a minute after its deletion", probedName)
	}
}

// sliceWatch follows the Service's EndpointSlices with a watch (every
// change, none sampled) and judges the pod's endpoint in each.
type sliceWatch struct {
	t      *testing.T
	c      kubernetes.Interface
	podUID string
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// slices are the Service's slices as last seen, by name.
	slices map[string]*discoveryv1.EndpointSlice
	// ready: the pod's endpoint is in a slice, ready.
	ready   bool
	readyCh chan struct{}
	// From mark to end: events seen, and each one in which the pod's
	// endpoint was not ready or in no slice.
	marked bool
	seen   int
	bad    []string
	breaks int
	// After end: closed at the first event with the pod's endpoint not
	// ready or gone (the control).
	ended  bool
	left   bool
	leftCh chan struct{}
}

// watchSlices lists the Service's EndpointSlices and watches them from the
// list's resource version on, re-watching from the last version seen if
// the API server ends the watch, until stop.
func watchSlices(t *testing.T, c kubernetes.Interface, podUID string) *sliceWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &sliceWatch{t: t, c: c, podUID: podUID, cancel: cancel, done: make(chan struct{}),
		slices: map[string]*discoveryv1.EndpointSlice{}, readyCh: make(chan struct{}), leftCh: make(chan struct{})}
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + probedName}
	list, err := c.DiscoveryV1().EndpointSlices("default").List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	for i := range list.Items {
		w.slices[list.Items[i].Name] = &list.Items[i]
	}
	w.judge("list")
	rv := list.ResourceVersion
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			o := sel
			o.ResourceVersion = rv
			o.AllowWatchBookmarks = true
			wi, err := c.DiscoveryV1().EndpointSlices("default").Watch(ctx, o)
			if err != nil {
				if ctx.Err() == nil {
					w.fail("the watch could not be (re-)established: " + err.Error())
				}
				return
			}
			for ev := range wi.ResultChan() {
				if ev.Type == watchapi.Error {
					wi.Stop()
					if ctx.Err() == nil {
						w.fail(fmt.Sprintf("the watch ended with an error: %v", apierrors.FromObject(ev.Object)))
					}
					return
				}
				s, ok := ev.Object.(*discoveryv1.EndpointSlice)
				if !ok {
					continue
				}
				rv = s.ResourceVersion
				if ev.Type == watchapi.Bookmark {
					continue
				}
				w.mu.Lock()
				if ev.Type == watchapi.Deleted {
					delete(w.slices, s.Name)
				} else {
					w.slices[s.Name] = s
				}
				w.mu.Unlock()
				w.judge(string(ev.Type) + " " + s.Name + " rv " + s.ResourceVersion)
			}
			wi.Stop()
			if ctx.Err() == nil {
				w.mu.Lock()
				w.breaks++
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// judge looks at the pod's endpoint in the slices as they are after an
// event.
func (w *sliceWatch) judge(what string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	state := "in no slice"
	ready := false
	for _, s := range w.slices {
		for _, e := range s.Endpoints {
			if e.TargetRef == nil || string(e.TargetRef.UID) != w.podUID {
				continue
			}
			switch r := e.Conditions.Ready; {
			case r == nil:
				state = "ready unknown (nil) in " + s.Name
			case *r:
				state, ready = "ready in "+s.Name, true
			default:
				state = fmt.Sprintf("ready false (serving %v, terminating %v) in %s", deref(e.Conditions.Serving), deref(e.Conditions.Terminating), s.Name)
			}
		}
	}
	if ready && !w.ready && !w.ended {
		close(w.readyCh)
	}
	w.ready = ready
	if w.ended {
		if !ready && !w.left {
			w.left = true
			close(w.leftCh)
		}
		return
	}
	if !w.marked {
		return
	}
	w.seen++
	if !ready {
		w.bad = append(w.bad, fmt.Sprintf("%s at %s: %s", what, time.Now().UTC().Format("15:04:05.000"), state))
	}
}

func deref(b *bool) string {
	if b == nil {
		return "nil"
	}
	return fmt.Sprint(*b)
}

// fail records a watch that cannot go on: the run watched less than it
// says.
func (w *sliceWatch) fail(why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.marked && !w.ended {
		w.bad = append(w.bad, why)
	}
}

// waitReady waits for the pod's endpoint to be ready in a slice (through
// the watch).
func (w *sliceWatch) waitReady(timeout time.Duration) bool {
	select {
	case <-w.readyCh:
		return true
	case <-time.After(timeout):
		return false
	}
}

// mark starts the judging: from now on every event counts, and one with
// the pod's endpoint not ready or gone is a failure. The endpoint must be
// ready now.
func (w *sliceWatch) mark() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.marked = true
	if !w.ready {
		w.bad = append(w.bad, "not ready at the start of the watched time")
	}
}

// end ends the judged time and returns what the watch saw in it: events,
// the failures, how often the watch had to be re-established. The watch
// goes on, for waitLeft.
func (w *sliceWatch) end() (seen int, bad []string, breaks int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	return w.seen, w.bad, w.breaks
}

// waitLeft waits (after end) for an event with the pod's endpoint not
// ready or gone.
func (w *sliceWatch) waitLeft(timeout time.Duration) bool {
	select {
	case <-w.leftCh:
		return true
	case <-time.After(timeout):
		return false
	}
}

// stop ends the watch and waits for its goroutine.
func (w *sliceWatch) stop() {
	w.cancel()
	<-w.done
}

// summary says where the pod's endpoint is, for a failure message.
func (w *sliceWatch) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var parts []string
	for _, s := range w.slices {
		parts = append(parts, fmt.Sprintf("%s: %d endpoint(s)", s.Name, len(s.Endpoints)))
	}
	if len(parts) == 0 {
		return "no EndpointSlice"
	}
	return strings.Join(parts, ", ")
}

// kubeletDown is the time from systemd's stop of the kubelet to its next
// start (both since mark), from the journal's entries of the kubelet's
// unit; "?" when they are not both there.
func (v *vm) kubeletDown(mark string) string {
	v.t.Helper()
	out := v.exec("journalctl", "-u", "kubelet", "--since", mark, "-o", "short-unix", "--no-pager",
		"--grep", "^(Stopping|Started) ").Stdout
	var stop, start float64
	for line := range strings.Lines(out) {
		var ts float64
		var rest string
		if _, err := fmt.Sscanf(line, "%f", &ts); err != nil {
			continue
		}
		_, rest, _ = strings.Cut(line, ": ")
		switch {
		case strings.HasPrefix(rest, "Stopping ") && stop == 0:
			stop = ts
		case strings.HasPrefix(rest, "Started ") && stop != 0 && start == 0:
			start = ts
		}
	}
	if stop == 0 || start == 0 {
		return "?"
	}
	return seconds(time.Duration((start - stop) * float64(time.Second)))
}
