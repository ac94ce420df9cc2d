package allocated

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
)

// Requests are the pod's requests as the kubelet's admission counts them
// (resource.PodRequests), from what the file holds: the sum of every
// container's requests (the file does not say which are init containers;
// see the package's limits), each resource the pod-level requests name
// (cpu, memory, hugepages-*) replaced by the pod-level request. No pod
// overhead: the file has none. Where the file may hold regular init
// containers (InitContainersKept) this is the most the kubelet counts.
func (p Pod) Requests() v1.ResourceList {
	return p.requests(func(sum *resource.Quantity, q resource.Quantity) { sum.Add(q) })
}

// MinRequests are the least the kubelet counts for the pod from what the
// file holds. Without InitContainersKept they are Requests (the file holds
// the app containers and sidecars, all summed). With it, any container may
// be a regular init container, counted only at its largest, so the least
// is each resource's largest container request (pod-level requests, where
// the file has them, are exact).
func (p Pod) MinRequests() v1.ResourceList {
	if !p.InitContainersKept {
		return p.Requests()
	}
	return p.requests(func(m *resource.Quantity, q resource.Quantity) {
		if q.Cmp(*m) > 0 {
			*m = q.DeepCopy()
		}
	})
}

// requests folds the containers' requests with add, then applies the
// pod-level requests.
func (p Pod) requests(add func(acc *resource.Quantity, q resource.Quantity)) v1.ResourceList {
	reqs := v1.ResourceList{}
	for _, c := range p.Containers {
		for name, q := range c.Requests {
			acc := reqs[name]
			add(&acc, q)
			reqs[name] = acc
		}
	}
	if p.PodLevel != nil {
		for name, q := range p.PodLevel.Requests {
			if podLevelResource(name) {
				reqs[name] = q.DeepCopy()
			}
		}
	}
	return reqs
}

// podLevelResource is component-helpers' IsSupportedPodLevelResource, the
// same in 1.34 to 1.37.
func podLevelResource(name v1.ResourceName) bool {
	return name == v1.ResourceCPU || name == v1.ResourceMemory || strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// Short is one resource the pods request more of than the new allocatable
// holds.
type Short struct {
	Resource v1.ResourceName
	// Requested is the pods' total as the kubelet adds it up (each pod's
	// requests rounded up to a millicore or a unit; for "pods", their
	// number): the most the kubelet counts from the file.
	Requested resource.Quantity
	// Certain: the least the kubelet counts (MinRequests) is over
	// allocatable too, so its re-admission rejects a pod for sure (as far
	// as every entry is a running pod). Otherwise the pods may fit: their
	// total counts regular init containers the kubelet counts only at
	// their largest.
	Certain bool
	// Allocatable is the new allocatable (0 for a hugepage size it lacks).
	Allocatable resource.Quantity
	// Pods are the UIDs of the pods that request some of it, sorted: the
	// kubelet rejects one or more of them, but which depends on their
	// creation order, which the file does not hold.
	Pods []string
}

// Result is Shortfall's answer: a plain value to print and to assert.
type Result struct {
	// Short are the resources whose pods do not fit, cpu, memory,
	// ephemeral-storage, hugepages-* by size, then pods.
	Short []Short
	// Pods is the number of pods judged.
	Pods int
}

// Fits reports that every pod fits: the restarted kubelet admits them all,
// as far as the file tells (see the package's limits).
func (r Result) Fits() bool { return len(r.Short) == 0 }

// UIDs are the UIDs of every pod named in r, sorted, for podnames.Resolve.
func (r Result) UIDs() []string {
	var uids []string
	for _, s := range r.Short {
		uids = append(uids, s.Pods...)
	}
	slices.Sort(uids)
	return slices.Compact(uids)
}

// String is Describe(nil).
func (r Result) String() string { return r.Describe(nil) }

// Describe says, for people, which resources fall short and the pods to
// drain some of, each as "<namespace>/<name>" when names knows it, else as
// "uid <uid>":
//
//	cpu: pods request 1800m, the restarted kubelet would allow 1: it would reject at least one of default/a, default/b, default/c (it admits them oldest first, and allocated_pods_state does not say which is oldest): drain some of them
func (r Result) Describe(names kubeletstate.PodNames) string {
	if r.Fits() {
		return fmt.Sprintf("the %d pods in %s fit the new allocatable (pod overhead not counted)", r.Pods, FileName)
	}
	var b strings.Builder
	for i, s := range r.Short {
		if i > 0 {
			b.WriteString("; ")
		}
		pods := make([]string, len(s.Pods))
		for j, uid := range s.Pods {
			if n := names[uid]; n != "" {
				pods[j] = n
			} else {
				pods[j] = "uid " + uid
			}
		}
		what := "pods request " + s.Requested.String()
		if s.Resource == v1.ResourcePods {
			what = fmt.Sprintf("%s pods", s.Requested.String())
		}
		verdict := "it would reject at least one of"
		if !s.Certain {
			verdict = "it may reject one of"
		}
		fmt.Fprintf(&b, "%s: %s, the restarted kubelet would allow %s: %s %s (it admits them oldest first, and %s does not say which is oldest): drain some of them",
			s.Resource, what, s.Allocatable.String(), verdict, strings.Join(pods, ", "), FileName)
		if !s.Certain {
			b.WriteString(" (the total counts init containers in full, which the kubelet counts only at their largest)")
		}
	}
	return b.String()
}

// Shortfall says, resource by resource, whether pods (the running pods'
// entries) request more than allocatable, the allocatable a restarted
// kubelet would report, as its re-admission counts them: per pod the
// requests rounded up to whole millicores (cpu) or units (others), summed
// over the pods, against allocatable; the pod count against "pods". It
// judges cpu, memory, ephemeral-storage and pods when allocatable has
// them, and every hugepages-* size allocatable has or a pod requests (a
// size allocatable lacks is 0). Where it finds no shortfall the kubelet
// admits every pod, as far as Pod.Requests is at least what the kubelet
// counts; where it finds one that is Certain, the kubelet rejects at least
// one pod with requests of that resource, as far as every pod is running
// (see the package's limits).
func Shortfall(allocatable v1.ResourceList, pods []Pod) Result {
	judged := map[v1.ResourceName]bool{}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage} {
		if _, ok := allocatable[name]; ok {
			judged[name] = true
		}
	}
	for name := range allocatable {
		if hugepages(name) {
			judged[name] = true
		}
	}
	type total struct {
		sum, least int64 // as the kubelet adds them
		pods       []string
	}
	totals := map[v1.ResourceName]*total{}
	for _, p := range pods {
		least := p.MinRequests()
		for name, q := range p.Requests() {
			if hugepages(name) {
				judged[name] = true
			}
			if !judged[name] {
				continue
			}
			v := value(name, q)
			if v == 0 {
				continue // the kubelet does not check a resource a pod does not request
			}
			t := totals[name]
			if t == nil {
				t = &total{}
				totals[name] = t
			}
			t.sum += v
			t.least += value(name, least[name])
			t.pods = append(t.pods, p.UID)
		}
	}
	r := Result{Pods: len(pods)}
	for name := range judged {
		t := totals[name]
		if t == nil {
			continue
		}
		alloc := allocatable[name]
		if t.sum <= value(name, alloc) {
			continue
		}
		slices.Sort(t.pods)
		r.Short = append(r.Short, Short{Resource: name, Requested: quantity(name, t.sum), Certain: t.least > value(name, alloc), Allocatable: alloc.DeepCopy(), Pods: t.pods})
	}
	if alloc, ok := allocatable[v1.ResourcePods]; ok && int64(len(pods)) > alloc.Value() {
		uids := make([]string, len(pods))
		for i, p := range pods {
			uids[i] = p.UID
		}
		slices.Sort(uids)
		r.Short = append(r.Short, Short{Resource: v1.ResourcePods, Requested: *resource.NewQuantity(int64(len(pods)), resource.DecimalSI), Certain: true, Allocatable: alloc.DeepCopy(), Pods: uids})
	}
	slices.SortStableFunc(r.Short, func(a, b Short) int { return compareResources(a.Resource, b.Resource) })
	return r
}

// quantity is value's inverse: the kubelet's total as a quantity.
func quantity(name v1.ResourceName, v int64) resource.Quantity {
	if name == v1.ResourceCPU {
		return *resource.NewMilliQuantity(v, resource.DecimalSI)
	}
	return *resource.NewQuantity(v, resource.BinarySI)
}

// value is a quantity as the scheduler's framework.Resource holds it:
// millicores for cpu, whole units (rounded up) for the others.
func value(name v1.ResourceName, q resource.Quantity) int64 {
	if name == v1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

func hugepages(name v1.ResourceName) bool {
	return strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix)
}

// compareResources orders cpu, memory, ephemeral-storage, hugepages-* by
// name, pods.
func compareResources(a, b v1.ResourceName) int {
	rank := func(n v1.ResourceName) int {
		switch {
		case n == v1.ResourceCPU:
			return 0
		case n == v1.ResourceMemory:
			return 1
		case n == v1.ResourceEphemeralStorage:
			return 2
		case hugepages(n):
			return 3
		case n == v1.ResourcePods:
			return 5
		}
		return 4
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(string(a), string(b))
}

// KeepRunning splits pods into the entries of the pods in running (a
// restarted kubelet admits them again) and the UIDs of the others, sorted:
// entries the kubelet keeps for pods that no longer run (see the package's
// limits; podcgroups.Running tells which pods run).
func KeepRunning(pods []Pod, running map[string]bool) (kept []Pod, gone []string) {
	for _, p := range pods {
		if running[p.UID] {
			kept = append(kept, p)
		} else {
			gone = append(gone, p.UID)
		}
	}
	slices.Sort(gone)
	return kept, gone
}
