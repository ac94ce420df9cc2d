package kubeletcompat_test

import (
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	resourcehelper "k8s.io/component-helpers/resource"
	allocstate "k8s.io/kubernetes/pkg/kubelet/allocation/state"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"

	"github.com/hotplugd/hotplugd/pkg/allocated"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// The allocated pods checkpoint (pkg/allocated) against the kubelet's own
// allocation manager: files it writes are read back the same, files it
// refuses are the ones pkg/allocated calls corrupt, the requests counted
// from the file are component-helpers' PodRequests where the file holds
// what the kubelet counts (and on the documented side of it where it does
// not), and Shortfall agrees with the kubelet's re-admission of the running
// pods after a restart.

var updateAllocatedTestdata = flag.Bool("update-allocated-testdata", false, "rewrite pkg/allocated/testdata/kubelet-1.<minor>.allocated_pods_state with this release's kubelet")

// allocRelease is the release under test, as pkg/kubeletversion knows it.
func allocRelease(t *testing.T) *kubeletversion.Release {
	t.Helper()
	rel, err := kubeletversion.Lookup(kubeletversion.MustParse(oracle.KubeletVersion()))
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

// gateSpec returns the gate's spec in this release, and whether it exists.
func gateSpec(name string) (featuregate.FeatureSpec, bool) {
	s, ok := utilfeature.DefaultMutableFeatureGate.GetAll()[featuregate.Feature(name)]
	return s, ok
}

func gateOn(name string) bool {
	if _, ok := gateSpec(name); !ok {
		return false
	}
	return utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(name))
}

// allocVariant is a setting of the gates that change what the kubelet
// keeps in the checkpoint.
type allocVariant struct {
	name  string
	gates map[string]bool
}

// allocVariants are the defaults plus each setting this release allows
// that changes the file: the main gate off (1.34), init containers not
// kept (1.36), pod-level resources kept (1.35, alpha) or not (1.36+).
func allocVariants() []allocVariant {
	vs := []allocVariant{{name: "defaults"}}
	settable := func(name string, on bool) bool {
		s, ok := gateSpec(name)
		return ok && !s.LockToDefault && s.Default != on
	}
	if settable("InPlacePodVerticalScaling", false) {
		vs = append(vs, allocVariant{"InPlacePodVerticalScaling=false", map[string]bool{"InPlacePodVerticalScaling": false}})
	}
	if settable("InPlacePodVerticalScalingInitContainers", false) {
		vs = append(vs, allocVariant{"InPlacePodVerticalScalingInitContainers=false", map[string]bool{"InPlacePodVerticalScalingInitContainers": false}})
	}
	if settable("InPlacePodLevelResourcesVerticalScaling", true) {
		g := map[string]bool{"InPlacePodLevelResourcesVerticalScaling": true}
		if _, ok := gateSpec("NodeDeclaredFeatures"); ok {
			g["NodeDeclaredFeatures"] = true
		}
		vs = append(vs, allocVariant{"InPlacePodLevelResourcesVerticalScaling=true", g})
	}
	if settable("InPlacePodLevelResourcesVerticalScaling", false) {
		vs = append(vs, allocVariant{"InPlacePodLevelResourcesVerticalScaling=false", map[string]bool{"InPlacePodLevelResourcesVerticalScaling": false}})
	}
	return vs
}

const allocNode = "node-a"

// genPod is a generated pod and what it holds that the file may not.
type genPod struct {
	pod *v1.Pod
	// regularInit: it has an init container that is not a sidecar.
	regularInit bool
	// overhead: spec.overhead is set.
	overhead bool
	// podLevel: spec.resources has requests.
	podLevel bool
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

// genRequests is a random container's requests: cpu, memory, sometimes
// hugepages and ephemeral storage, sometimes none (best effort), sometimes
// values below a millicore or a byte to check the kubelet's rounding.
func genRequests(r *rand.Rand) v1.ResourceRequirements {
	if r.IntN(8) == 0 {
		return v1.ResourceRequirements{}
	}
	req := v1.ResourceList{}
	if r.IntN(6) > 0 {
		switch r.IntN(8) {
		case 0:
			req[v1.ResourceCPU] = *resource.NewScaledQuantity(int64(1+r.IntN(2000)), resource.Micro) // 1u..2m: rounds up
		case 1:
			req[v1.ResourceCPU] = *resource.NewQuantity(int64(1+r.IntN(2)), resource.DecimalSI)
		default:
			req[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(50*(1+r.IntN(20))), resource.DecimalSI)
		}
	}
	if r.IntN(6) > 0 {
		if r.IntN(10) == 0 {
			req[v1.ResourceMemory] = *resource.NewMilliQuantity(int64(1+r.IntN(5000)), resource.DecimalSI) // a fraction of a byte
		} else {
			req[v1.ResourceMemory] = *resource.NewQuantity(int64(1+r.IntN(512))<<20, resource.BinarySI)
		}
	}
	lim := v1.ResourceList{}
	if r.IntN(4) == 0 {
		q := *resource.NewQuantity(int64(1+r.IntN(16))<<21, resource.BinarySI)
		req["hugepages-2Mi"], lim["hugepages-2Mi"] = q, q
	}
	if r.IntN(20) == 0 {
		q := *resource.NewQuantity(1<<30, resource.BinarySI)
		req["hugepages-1Gi"], lim["hugepages-1Gi"] = q, q
	}
	if r.IntN(5) == 0 {
		req[v1.ResourceEphemeralStorage] = *resource.NewQuantity(int64(1+r.IntN(4))<<30, resource.BinarySI)
	}
	rr := v1.ResourceRequirements{Requests: req}
	if len(lim) > 0 {
		rr.Limits = lim
	}
	return rr
}

// genPods is a random node's pods: app containers, sidecars, init
// containers, pod-level requests, overhead, each in some pods.
func genPods(r *rand.Rand, set int, podLevelOK bool) []genPod {
	n := 1 + r.IntN(8)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var pods []genPod
	for i := range n {
		g := genPod{pod: &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name:              fmt.Sprintf("p%d", i),
				Namespace:         "default",
				UID:               types.UID(fmt.Sprintf("%04d-%02d-%08x", set, i, r.Uint32())),
				CreationTimestamp: metav1.NewTime(base.Add(time.Duration(r.IntN(1000)) * time.Second)),
			},
			Spec: v1.PodSpec{NodeName: allocNode},
		}}
		always := v1.ContainerRestartPolicyAlways
		if r.IntN(3) == 0 {
			for j := range 1 + r.IntN(3) {
				c := v1.Container{Name: fmt.Sprintf("init%d", j), Resources: genRequests(r)}
				if r.IntN(2) == 0 {
					c.RestartPolicy = &always
				} else {
					g.regularInit = true
				}
				g.pod.Spec.InitContainers = append(g.pod.Spec.InitContainers, c)
			}
		}
		for j := range 1 + r.IntN(3) {
			g.pod.Spec.Containers = append(g.pod.Spec.Containers, v1.Container{Name: fmt.Sprintf("c%d", j), Resources: genRequests(r)})
		}
		if podLevelOK && r.IntN(5) == 0 {
			// Valid pod-level requests: at least the containers' sum.
			agg := resourcehelper.AggregateContainerRequests(g.pod, resourcehelper.PodResourcesOptions{})
			pl := v1.ResourceList{}
			for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
				q := agg[name].DeepCopy()
				if r.IntN(2) == 0 {
					q.Add(qty("100m"))
					if name == v1.ResourceMemory {
						q.Add(qty("64Mi"))
					}
				}
				if !q.IsZero() {
					pl[name] = q
				}
			}
			if len(pl) > 0 {
				g.pod.Spec.Resources = &v1.ResourceRequirements{Requests: pl}
				g.podLevel = true
			}
		}
		if r.IntN(10) == 0 {
			g.pod.Spec.Overhead = v1.ResourceList{v1.ResourceCPU: qty("250m"), v1.ResourceMemory: qty("120Mi")}
			g.overhead = true
		}
		pods = append(pods, g)
	}
	return pods
}

// podKinds says, from what the pod holds and the gates, whether the file's
// requests are what the kubelet counts (exact), may be more (over), may be
// less (under), or both (mixed).
type fileCount int

const (
	exact fileCount = iota
	over
	under
	mixed
)

func (c fileCount) String() string { return [...]string{"exact", "over", "under", "mixed"}[c] }

func (c fileCount) and(d fileCount) fileCount {
	switch {
	case c == d || d == exact:
		return c
	case c == exact:
		return d
	}
	return mixed
}

func classify(g genPod, initKept, podLevelKept bool) fileCount {
	c := exact
	if g.regularInit {
		if initKept {
			c = c.and(over)
		} else {
			c = c.and(under)
		}
	}
	if g.overhead {
		c = c.and(under)
	}
	if g.podLevel && !podLevelKept {
		c = c.and(under)
	}
	return c
}

// cmpLists compares two resource lists resource by resource (a missing
// resource is 0): -1 if every a <= b and one is less, 1 if every a >= b
// and one is more, 0 if equal, 2 if neither.
func cmpLists(a, b v1.ResourceList) int {
	less, more := false, false
	for _, name := range unionNames(a, b) {
		qa, qb := a[name], b[name]
		switch qa.Cmp(qb) {
		case -1:
			less = true
		case 1:
			more = true
		}
	}
	switch {
	case less && more:
		return 2
	case less:
		return -1
	case more:
		return 1
	}
	return 0
}

func unionNames(a, b v1.ResourceList) []v1.ResourceName {
	var names []v1.ResourceName
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// TestAllocatedPodsReadMatchesKubelet writes the checkpoint of generated
// pods with the kubelet's allocation manager, under each gate setting of
// the release that changes it, and reads it with pkg/allocated: the same
// entries the kubelet loads from it, container by container, and the
// requests component-helpers' PodRequests counts for the pod as admission
// sees it, exactly where the file holds them all and on the documented side
// otherwise.
func TestAllocatedPodsReadMatchesKubelet(t *testing.T) {
	rel := allocRelease(t)
	total := map[string]int{}
	for _, v := range allocVariants() {
		t.Run(v.name, func(t *testing.T) {
			oracle.SetFeatureGates(t, v.gates)
			written := gateOn("InPlacePodVerticalScaling")
			if got := allocated.Written(rel.Minor, v.gates); got != written {
				t.Fatalf("allocated.Written(%d, %v) = %v, the kubelet keeps the file: %v", rel.Minor, v.gates, got, written)
			}
			initKept := rel.Minor >= 36 && gateOn("InPlacePodVerticalScalingInitContainers")
			podLevelKept := gateOn("InPlacePodLevelResourcesVerticalScaling")
			opts := resourcehelper.PodResourcesOptions{SkipPodLevelResources: !gateOn("PodLevelResources")}
			r := rand.New(rand.NewPCG(uint64(rel.Minor), 1))
			for set := range 300 {
				gens := genPods(r, set, gateOn("PodLevelResources"))
				var pods []*v1.Pod
				for _, g := range gens {
					pods = append(pods, g.pod)
				}
				dir := t.TempDir()
				if err := oracle.WriteAllocations(dir, pods); err != nil {
					t.Fatal(err)
				}
				cp, err := allocated.Read(dir, rel, v.gates)
				if !written {
					if !errors.Is(err, allocated.ErrGateOff) {
						t.Fatalf("gate off: Read = %v, want ErrGateOff", err)
					}
					if _, err := os.Stat(filepath.Join(dir, allocated.FileName)); !errors.Is(err, os.ErrNotExist) {
						t.Fatalf("gate off: the kubelet wrote %s (%v)", allocated.FileName, err)
					}
					total["gate off, no file"]++
					continue
				}
				if err != nil {
					t.Fatalf("set %d: %v", set, err)
				}
				loaded, loadErr := oracle.LoadAllocations(dir, pods)
				if loadErr != nil {
					t.Fatalf("set %d: the kubelet refuses its own file: %v", set, loadErr)
				}
				if len(cp.Pods) != len(pods) {
					t.Fatalf("set %d: read %d pods, the kubelet wrote %d", set, len(cp.Pods), len(pods))
				}
				byUID := map[string]allocated.Pod{}
				for _, p := range cp.Pods {
					byUID[p.UID] = p
				}
				for _, g := range gens {
					uid := string(g.pod.UID)
					got, ok := byUID[uid]
					if !ok {
						t.Fatalf("set %d: pod %s not read", set, uid)
					}
					l := loaded[uid]
					if !reflect.DeepEqual(normContainers(got.Containers), normContainers(l.Containers)) {
						t.Fatalf("set %d pod %s: containers read %v, the kubelet loads %v", set, uid, got.Containers, l.Containers)
					}
					if !reflect.DeepEqual(normRR(got.PodLevel), normRR(l.PodLevel)) {
						t.Fatalf("set %d pod %s: pod-level read %v, the kubelet loads %v", set, uid, got.PodLevel, l.PodLevel)
					}
					ours := got.Requests()
					kubelet := resourcehelper.PodRequests(l.Pod, opts)
					c := classify(g, initKept, podLevelKept)
					cmp := cmpLists(ours, kubelet)
					allowed := map[fileCount][]int{exact: {0}, over: {0, 1}, under: {0, -1}, mixed: {-1, 0, 1, 2}}[c]
					if !slices.Contains(allowed, cmp) {
						t.Fatalf("set %d pod %s (%s): requests from the file %v, PodRequests %v (comparison %d)", set, uid, c, ours, kubelet, cmp)
					}
					if least := got.MinRequests(); !slices.Contains([]int{-1, 0}, cmpLists(least, kubelet)) {
						t.Fatalf("set %d pod %s (%s): least requests from the file %v, more than PodRequests %v", set, uid, c, least, kubelet)
					}
					total[c.String()]++
					if cmp != 0 {
						total[c.String()+" differing"]++
					}
				}
				total["pod sets"]++
			}
		})
	}
	t.Logf("casecount: allocated pods read (pods by how the file counts vs PodRequests): %d gate settings; %s", len(allocVariants()), countLine(total))
}

func countLine(m map[string]int) string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// normContainers and normRR compare allocations by value: quantities by
// their canonical string, empty lists as nil.
func normContainers(m map[string]v1.ResourceRequirements) map[string]string {
	out := map[string]string{}
	for name, rr := range m {
		out[name] = normRR(&rr)
	}
	return out
}

func normRR(rr *v1.ResourceRequirements) string {
	if rr == nil {
		return "nil"
	}
	s := func(l v1.ResourceList) string {
		var parts []string
		for _, n := range unionNames(l, nil) {
			q := l[n]
			parts = append(parts, string(n)+"="+q.String())
		}
		return strings.Join(parts, ",")
	}
	return "req{" + s(rr.Requests) + "} lim{" + s(rr.Limits) + "} claims" + fmt.Sprint(rr.Claims)
}

// TestAllocatedPodsShortfallMatchesKubelet: for generated pods and new
// allocatables around their total, Shortfall against the kubelet's own
// re-admission at a restart (the allocation manager loading the file, the
// predicate admit handler, the pods oldest first). Where the file counts at
// least what the kubelet counts for every pod (no overhead, no init
// container or pod-level request the release does not keep), no shortfall
// means the kubelet admits every pod, and each pod it rejects is listed
// under the resource it names. Where every entry is a running pod, a
// Certain shortfall means the kubelet rejects at least one pod. The other
// outcomes are the package's documented limits, counted.
func TestAllocatedPodsShortfallMatchesKubelet(t *testing.T) {
	rel := allocRelease(t)
	total := map[string]int{}
	for _, v := range allocVariants() {
		t.Run(v.name, func(t *testing.T) {
			oracle.SetFeatureGates(t, v.gates)
			if !gateOn("InPlacePodVerticalScaling") {
				t.Skip("the kubelet keeps no checkpoint with InPlacePodVerticalScaling off")
			}
			initKept := rel.Minor >= 36 && gateOn("InPlacePodVerticalScalingInitContainers")
			podLevelKept := gateOn("InPlacePodLevelResourcesVerticalScaling")
			r := rand.New(rand.NewPCG(uint64(rel.Minor), 2))
			for set := range 300 {
				gens := genPods(r, set, gateOn("PodLevelResources"))
				var apiPods, written []*v1.Pod
				setCount := exact
				for _, g := range gens {
					apiPods = append(apiPods, g.pod)
					written = append(written, g.pod)
					setCount = setCount.and(classify(g, initKept, podLevelKept))
				}
				runningCount := setCount // the same, the entries of pods not running dropped
				// Some nodes: an entry of a pod that no longer runs.
				stale := r.IntN(8) == 0
				if stale {
					gone := genPods(r, 9000+set, false)[0].pod
					gone.UID += "-gone"
					written = append(written, gone)
					setCount = setCount.and(over)
				}
				dir := t.TempDir()
				if err := oracle.WriteAllocations(dir, written); err != nil {
					t.Fatal(err)
				}
				file, err := os.ReadFile(filepath.Join(dir, allocated.FileName))
				if err != nil {
					t.Fatal(err)
				}
				// Some pods: a resize the kubelet has not admitted (the
				// API's spec differs from the allocation, which it counts).
				for i, p := range apiPods {
					p = p.DeepCopy()
					apiPods[i] = p
					if r.IntN(6) == 0 && p.Spec.Containers[0].Resources.Requests != nil {
						p.Spec.Containers[0].Resources.Requests[v1.ResourceCPU] = *resource.NewMilliQuantity(int64(50*(1+r.IntN(40))), resource.DecimalSI)
						total["pending resizes"]++
					}
				}
				cp, err := allocated.Read(dir, rel, v.gates)
				if err != nil {
					t.Fatalf("set %d: %v", set, err)
				}
				for trial := range 4 {
					alloc := nearAllocatable(r, cp.Pods, len(apiPods), trial)
					res := allocated.Shortfall(alloc, cp.Pods)
					node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: allocNode}, Status: v1.NodeStatus{Capacity: alloc, Allocatable: alloc}}
					rejected, loadErr := oracle.Readmit(dir, node, apiPods)
					if loadErr != nil {
						t.Fatalf("set %d: the kubelet refuses its own file: %v", set, loadErr)
					}
					// Readmit checkpoints what it admits: start the next
					// trial from the file as written.
					if err := os.WriteFile(filepath.Join(dir, allocated.FileName), file, 0o600); err != nil {
						t.Fatal(err)
					}
					// With the entries of the pods that do not run dropped
					// (what the caller does with podcgroups), a Certain
					// shortfall is one the kubelet has, and no shortfall is
					// none where the file counts at least what it counts.
					running := map[string]bool{}
					for _, p := range apiPods {
						running[string(p.UID)] = true
					}
					kept, _ := allocated.KeepRunning(cp.Pods, running)
					resRunning := allocated.Shortfall(alloc, kept)
					switch {
					case resRunning.Fits() && len(rejected) > 0 && (runningCount == exact || runningCount == over):
						t.Fatalf("set %d (%s): running pods only, Shortfall says they fit %v, the kubelet rejects %s", set, runningCount, alloc, describeRejections(rejected))
					case slices.ContainsFunc(resRunning.Short, func(s allocated.Short) bool { return s.Certain }) && len(rejected) == 0:
						t.Fatalf("set %d (%s): running pods only, Shortfall says %s, the kubelet admits every pod", set, runningCount, resRunning)
					}
					if stale {
						total["stale entry dropped, verdict held"]++
					}
					// ubSafe: the file counts at least what the kubelet
					// counts for every pod (Requests); lbSafe: every entry
					// is a running pod, so MinRequests is at most what it
					// counts.
					ubSafe := setCount == exact || setCount == over
					certain := slices.ContainsFunc(res.Short, func(s allocated.Short) bool { return s.Certain })
					key := setCount.String()
					if stale {
						key += ", stale entry"
					}
					total["trials"]++
					if setCount == exact {
						total["exact trials"]++
					}
					switch {
					case res.Fits() && len(rejected) == 0:
						total["fits+admitted"]++
					case res.Fits():
						// The kubelet rejects a pod Shortfall let through:
						// only where the file may count less.
						if ubSafe {
							t.Fatalf("set %d (%s): Shortfall says the pods fit %v, the kubelet rejects %s", set, key, alloc, describeRejections(rejected))
						}
						total["fits+rejected (file counts less)"]++
					case len(rejected) > 0:
						if certain {
							total["certain+rejected"]++
						} else {
							total["possible+rejected"]++
						}
						if ubSafe {
							checkRejections(t, set, res, rejected)
						}
					default:
						if certain && !stale {
							t.Fatalf("set %d (%s): Shortfall says %s, the kubelet admits every pod", set, key, res)
						}
						if certain {
							total["certain+admitted (stale entry)"]++
						} else {
							total["possible+admitted"]++
						}
					}
				}
			}
		})
	}
	t.Logf("casecount: allocated pods Shortfall vs kubelet re-admission (verdict+kubelet): %s", countLine(total))
}

// nearAllocatable is a new allocatable around the pods' total as the file
// counts it: per resource the total, one unit less or more, half or double,
// and a pod count at or below the number of pods.
func nearAllocatable(r *rand.Rand, pods []allocated.Pod, running, trial int) v1.ResourceList {
	sums := map[v1.ResourceName]int64{}
	for _, p := range pods {
		for name, q := range p.Requests() {
			if name == v1.ResourceCPU {
				sums[name] += q.MilliValue()
			} else {
				sums[name] += q.Value()
			}
		}
	}
	alloc := v1.ResourceList{}
	for _, name := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "hugepages-2Mi", "hugepages-1Gi"} {
		s := sums[name]
		var a int64
		switch r.IntN(6) {
		case 0:
			a = s
		case 1:
			a = max(s-1, 0)
		case 2:
			a = s + 1
		case 3:
			a = s / 2
		default:
			a = 2*s + 1000
		}
		if trial == 0 {
			a = 2*s + 1000 // one trial where everything fits, as far as the file tells
		}
		if name == v1.ResourceCPU {
			alloc[name] = *resource.NewMilliQuantity(a, resource.DecimalSI)
		} else if strings.HasPrefix(string(name), "hugepages-") && s == 0 && r.IntN(2) == 0 {
			continue // a size the node does not have
		} else {
			alloc[name] = *resource.NewQuantity(a, resource.BinarySI)
		}
	}
	podsAlloc := int64(110)
	if trial > 0 && r.IntN(8) == 0 {
		podsAlloc = int64(max(running-r.IntN(2), 0))
	}
	alloc[v1.ResourcePods] = *resource.NewQuantity(podsAlloc, resource.DecimalSI)
	return alloc
}

// checkRejections: each pod the kubelet rejects is listed by Shortfall
// under the resource the kubelet names.
func checkRejections(t *testing.T, set int, res allocated.Result, rejected []oracle.Rejection) {
	t.Helper()
	for _, rj := range rejected {
		name, ok := strings.CutPrefix(rj.Reason, "OutOf")
		if !ok {
			t.Fatalf("set %d: the kubelet rejects pod %s for %s: %s", set, rj.Pod.UID, rj.Reason, rj.Message)
		}
		i := slices.IndexFunc(res.Short, func(s allocated.Short) bool { return string(s.Resource) == name })
		if i < 0 || !slices.Contains(res.Short[i].Pods, string(rj.Pod.UID)) {
			t.Fatalf("set %d: the kubelet rejects pod %s (%s: %s), Shortfall says %s", set, rj.Pod.UID, rj.Reason, rj.Message, res)
		}
	}
}

func describeRejections(rs []oracle.Rejection) string {
	var s []string
	for _, r := range rs {
		s = append(s, fmt.Sprintf("%s (%s: %s)", r.Pod.UID, r.Reason, r.Message))
	}
	return strings.Join(s, "; ")
}

// TestAllocatedPodsCorruptMatchesKubelet: a file the kubelet refuses to
// load (it panics at its start) is ErrCorrupt, and only such a file; a
// file it loads is read, or is ErrUnknownFormat when it holds what the
// release does not write. Named edits of a file the kubelet wrote, then
// random byte edits.
func TestAllocatedPodsCorruptMatchesKubelet(t *testing.T) {
	rel := allocRelease(t)
	r := rand.New(rand.NewPCG(uint64(rel.Minor), 3))
	gens := genPods(r, 0, gateOn("PodLevelResources"))
	var pods []*v1.Pod
	for _, g := range gens {
		pods = append(pods, g.pod)
	}
	src := t.TempDir()
	if err := oracle.WriteAllocations(src, pods); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(src, allocated.FileName))
	if err != nil {
		t.Fatal(err)
	}
	// withData is a file whose data is d, with the kubelet's checksum.
	withData := func(d string) string {
		return fmt.Sprintf(`{"data":%q,"checksum":%d}`, d, uint64(checksum.New(d)))
	}
	entry := func(fields string) string {
		return withData(`{"entries":{"uid-1":{"ContainerResources":{"c":{"requests":{"cpu":"1"}}}` + fields + `}}}`)
	}
	// The release's own entry fields, by reflection on its PodResourceInfo.
	own := map[string]bool{}
	pri := reflect.TypeFor[allocstate.PodResourceInfo]()
	for i := range pri.NumField() {
		own[pri.Field(i).Name] = true
	}
	type tc struct {
		name string
		file string
		// unknown: the kubelet loads it but pkg/allocated must say
		// ErrUnknownFormat.
		unknown bool
	}
	cases := []tc{
		{"as written", string(good), false},
		{"checksum+1", strings.Replace(string(good), `"checksum":`, `"checksum":1`, 1), false},
		{"truncated", string(good[:len(good)/2]), false},
		{"not JSON", "garbage", false},
		{"empty", "", false},
		{"empty object", "{}", false},
		{"trailing garbage", string(good) + "x", false},
		{"trailing newline", string(good) + "\n", false},
		{"pretty", strings.ReplaceAll(string(good), `,"checksum"`, ",\n  \"checksum\""), false},
		{"data null", withData("null"), false},
		{"no entries", withData("{}"), false},
		{"entry null", withData(`{"entries":{"uid-1":null}}`), false},
		{"data not JSON", withData("x"), false},
		{"ContainerResources a number", withData(`{"entries":{"uid-1":{"ContainerResources":5}}}`), false},
		{"quantity invalid", withData(`{"entries":{"uid-1":{"ContainerResources":{"c":{"requests":{"cpu":"lots"}}}}}}`), false},
		{"unknown envelope field", strings.Replace(string(good), `{"data"`, `{"extra":1,"data"`, 1), true},
		{"unknown entry field", entry(`,"Future":{}`), true},
		{"unknown data field", withData(`{"entries":{},"future":1}`), true},
		{"capitalized key", strings.Replace(string(good), `"data"`, `"Data"`, 1), false},
	}
	for _, f := range []string{"PodLevelResources", "EmptyDirVolumeLimits"} {
		val := `{"requests":{"cpu":"2"}}`
		if f == "EmptyDirVolumeLimits" {
			val = `{"v":"1Gi"}`
		}
		cases = append(cases, tc{"entry field " + f, entry(`,"` + f + `":` + val), !own[f]})
	}
	check := func(t *testing.T, name string, file []byte, unknown bool) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, allocated.FileName), file, 0o600); err != nil {
			t.Fatal(err)
		}
		_, loadErr := oracle.LoadAllocations(dir, nil)
		_, err := allocated.Read(dir, rel, nil)
		switch {
		case loadErr != nil && !errors.Is(err, allocated.ErrCorrupt):
			t.Errorf("%s: the kubelet refuses the file (%v), Read = %v", name, loadErr, err)
		case loadErr == nil && errors.Is(err, allocated.ErrCorrupt):
			t.Errorf("%s: the kubelet loads the file, Read = %v", name, err)
		case loadErr == nil && unknown && !errors.Is(err, allocated.ErrUnknownFormat):
			t.Errorf("%s: Read = %v, want ErrUnknownFormat", name, err)
		case loadErr == nil && !unknown && err != nil && !errors.Is(err, allocated.ErrUnknownFormat):
			t.Errorf("%s: the kubelet loads the file, Read = %v", name, err)
		}
		switch {
		case loadErr != nil:
			return "corrupt"
		case err == nil:
			return "read"
		default:
			return "unknown-format"
		}
	}
	total := map[string]int{}
	for _, c := range cases {
		total["named "+check(t, c.name, []byte(c.file), c.unknown)]++
	}
	for i := range 500 {
		b := slices.Clone(good)
		p := r.IntN(len(b))
		switch r.IntN(3) {
		case 0:
			b[p] = byte(32 + r.IntN(95))
		case 1:
			b = slices.Delete(b, p, p+1)
		default:
			b = slices.Insert(b, p, byte(32+r.IntN(95)))
		}
		// A random edit may add a field or make a known one unknown: the
		// kubelet loading it with Read saying ErrUnknownFormat is allowed.
		total["random "+check(t, fmt.Sprintf("random edit %d", i), b, false)]++
	}
	t.Logf("casecount: allocated pods corrupt vs kubelet load: %d named, 500 random edits; %s", len(cases), countLine(total))
}

// TestAllocatedPodsReleaseRow: pkg/allocated's row of the release is the
// release's: the file name the kubelet writes, and the gate's default and
// lock (Written).
func TestAllocatedPodsReleaseRow(t *testing.T) {
	rel := allocRelease(t)
	s, ok := gateSpec("InPlacePodVerticalScaling")
	if !ok {
		t.Fatal("no InPlacePodVerticalScaling gate")
	}
	if got := allocated.Written(rel.Minor, nil); got != s.Default {
		t.Errorf("Written(%d, defaults) = %v, the gate's default is %v", rel.Minor, got, s.Default)
	}
	off := map[string]bool{"InPlacePodVerticalScaling": false}
	if got := allocated.Written(rel.Minor, off); got != s.LockToDefault {
		t.Errorf("Written(%d, gate off) = %v; the gate is locked: %v", rel.Minor, got, s.LockToDefault)
	}
	dir := t.TempDir()
	if err := oracle.WriteAllocations(dir, []*v1.Pod{{ObjectMeta: metav1.ObjectMeta{UID: "u"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "c"}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, allocated.FileName)); err != nil {
		t.Errorf("the kubelet did not write %s: %v", allocated.FileName, err)
	}
	writeAllocatedTestdata(t, rel, *updateAllocatedTestdata)
}

// writeAllocatedTestdata checks (or with update, writes) the unit tests'
// fixture of this release: a fixed set of pods (app containers, a sidecar,
// an init container, pod-level requests, hugepages), byte for byte as this
// kubelet checkpoints them.
func writeAllocatedTestdata(t *testing.T, rel *kubeletversion.Release, update bool) {
	always := v1.ContainerRestartPolicyAlways
	rr := func(kv ...string) v1.ResourceRequirements {
		req := v1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			req[v1.ResourceName(kv[i])] = qty(kv[i+1])
		}
		return v1.ResourceRequirements{Requests: req}
	}
	pods := []*v1.Pod{
		{ObjectMeta: metav1.ObjectMeta{UID: "11111111-aaaa-4000-8000-000000000001"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: rr("cpu", "600m", "memory", "256Mi")}}}},
		{ObjectMeta: metav1.ObjectMeta{UID: "22222222-bbbb-4000-8000-000000000002"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: rr("cpu", "600m", "memory", "256Mi")}, {Name: "log", Resources: rr("cpu", "100m")}}}},
		{ObjectMeta: metav1.ObjectMeta{UID: "33333333-cccc-4000-8000-000000000003"}, Spec: v1.PodSpec{
			InitContainers: []v1.Container{{Name: "migrate", Resources: rr("cpu", "2", "memory", "1Gi")}, {Name: "proxy", RestartPolicy: &always, Resources: rr("cpu", "200m", "memory", "64Mi")}},
			Containers:     []v1.Container{{Name: "app", Resources: rr("cpu", "600m", "memory", "256Mi", "hugepages-2Mi", "128Mi")}},
		}},
		{ObjectMeta: metav1.ObjectMeta{UID: "44444444-dddd-4000-8000-000000000004"}, Spec: v1.PodSpec{
			Resources:  &v1.ResourceRequirements{Requests: v1.ResourceList{v1.ResourceCPU: qty("1"), v1.ResourceMemory: qty("1Gi")}},
			Containers: []v1.Container{{Name: "a", Resources: rr("cpu", "300m", "memory", "512Mi")}, {Name: "b"}},
		}},
		{ObjectMeta: metav1.ObjectMeta{UID: "55555555-eeee-4000-8000-000000000005"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "besteffort"}}}},
	}
	dir := t.TempDir()
	if err := oracle.WriteAllocations(dir, pods); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, allocated.FileName))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("..", "..", "pkg", "allocated", "testdata", fmt.Sprintf("kubelet-1.%d.allocated_pods_state", rel.Minor))
	if update {
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", out)
		return
	}
	old, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if string(old) != string(b) {
		t.Errorf("%s is not what this kubelet writes (-update-allocated-testdata rewrites it):\n got %s\nwant %s", out, old, b)
	}
}
