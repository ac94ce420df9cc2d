package allocated

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
)

// list is a resource list from name, quantity pairs.
func list(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// pod is an entry whose containers c0, c1, ... request each list.
func pod(uid string, containers ...v1.ResourceList) Pod {
	p := Pod{UID: uid, Containers: map[string]v1.ResourceRequirements{}}
	for i, c := range containers {
		p.Containers[string(rune('a'+i))] = v1.ResourceRequirements{Requests: c}
	}
	return p
}

// short is a Short as the tests compare it.
type short struct {
	Resource, Requested, Allocatable string
	Certain                          bool
	Pods                             []string
}

func summary(r Result) []short {
	var out []short
	for _, s := range r.Short {
		out = append(out, short{string(s.Resource), s.Requested.String(), s.Allocatable.String(), s.Certain, s.Pods})
	}
	return out
}

func TestShortfall(t *testing.T) {
	kept := func(p Pod) Pod { p.InitContainersKept = true; return p }
	withPodLevel := func(p Pod, l v1.ResourceList) Pod {
		p.PodLevel = &v1.ResourceRequirements{Requests: l}
		return p
	}
	for _, tc := range []struct {
		name  string
		alloc v1.ResourceList
		pods  []Pod
		want  []short
	}{
		{
			// The e2e incident: cpu1 offline, 3 x 600m on a node of 2 CPUs.
			name:  "cpu 2 -> 1",
			alloc: list("cpu", "1", "memory", "3Gi", "pods", "110"),
			pods:  []Pod{pod("u1", list("cpu", "600m")), pod("u2", list("cpu", "600m")), pod("u3", list("cpu", "600m"))},
			want:  []short{{"cpu", "1800m", "1", true, []string{"u1", "u2", "u3"}}},
		},
		{
			name:  "exactly full fits",
			alloc: list("cpu", "1800m"),
			pods:  []Pod{pod("u1", list("cpu", "600m")), pod("u2", list("cpu", "600m")), pod("u3", list("cpu", "600m"))},
		},
		{
			// The kubelet rounds each pod up to a millicore before adding.
			name:  "sub-millicore requests round up per pod",
			alloc: list("cpu", "2m"),
			pods:  []Pod{pod("u1", list("cpu", "1u")), pod("u2", list("cpu", "1u")), pod("u3", list("cpu", "1u"))},
			want:  []short{{"cpu", "3m", "2m", true, []string{"u1", "u2", "u3"}}},
		},
		{
			name:  "one pod's containers add up before rounding",
			alloc: list("cpu", "1m"),
			pods:  []Pod{pod("u1", list("cpu", "400u"), list("cpu", "400u"))},
		},
		{
			// The kubelet does not check a resource a pod does not request.
			name:  "a pod without requests of it is no candidate",
			alloc: list("memory", "1Gi"),
			pods:  []Pod{pod("u1", list("memory", "1Gi")), pod("u2", list("memory", "1")), pod("u3", list("cpu", "1")), pod("u4")},
			want:  []short{{"memory", "1073741825", "1Gi", true, []string{"u1", "u2"}}},
		},
		{
			name:  "hugepages shrink",
			alloc: list("hugepages-2Mi", "0", "memory", "2Gi"),
			pods:  []Pod{pod("u1", list("hugepages-2Mi", "128Mi", "memory", "64Mi"))},
			want:  []short{{"hugepages-2Mi", "128Mi", "0", true, []string{"u1"}}},
		},
		{
			name:  "a hugepage size allocatable lacks is 0",
			alloc: list("cpu", "4"),
			pods:  []Pod{pod("u1", list("hugepages-1Gi", "1Gi"))},
			want:  []short{{"hugepages-1Gi", "1Gi", "0", true, []string{"u1"}}},
		},
		{
			name:  "cpu, memory, ephemeral-storage only when allocatable has them",
			alloc: list("hugepages-2Mi", "4Mi"),
			pods:  []Pod{pod("u1", list("cpu", "64", "memory", "1Ti", "ephemeral-storage", "1Ti", "example.com/gpu", "1"))},
		},
		{
			name:  "ephemeral-storage",
			alloc: list("ephemeral-storage", "10Gi"),
			pods:  []Pod{pod("u1", list("ephemeral-storage", "6Gi")), pod("u2", list("ephemeral-storage", "6Gi"))},
			want:  []short{{"ephemeral-storage", "12Gi", "10Gi", true, []string{"u1", "u2"}}},
		},
		{
			name:  "pod count",
			alloc: list("pods", "2", "cpu", "8"),
			pods:  []Pod{pod("u3"), pod("u1", list("cpu", "1")), pod("u2")},
			want:  []short{{"pods", "3", "2", true, []string{"u1", "u2", "u3"}}},
		},
		{
			name:  "pod-level requests replace the containers' sum",
			alloc: list("cpu", "1500m", "memory", "4Gi"),
			pods: []Pod{
				withPodLevel(pod("u1", list("cpu", "300m", "memory", "512Mi"), nil), list("cpu", "1", "memory", "1Gi")),
				pod("u2", list("cpu", "600m")),
			},
			want: []short{{"cpu", "1600m", "1500m", true, []string{"u1", "u2"}}},
		},
		{
			// An init container (2) kept with the app (600m): the kubelet
			// counts 2 if it is an init container, 2600m if not.
			name:  "init containers kept: may not fit",
			alloc: list("cpu", "2500m"),
			pods:  []Pod{kept(pod("u1", list("cpu", "600m"), list("cpu", "2")))},
			want:  []short{{"cpu", "2600m", "2500m", false, []string{"u1"}}},
		},
		{
			name:  "init containers kept: cannot fit",
			alloc: list("cpu", "1500m"),
			pods:  []Pod{kept(pod("u1", list("cpu", "600m"), list("cpu", "2")))},
			want:  []short{{"cpu", "2600m", "1500m", true, []string{"u1"}}},
		},
		{
			name:  "order: cpu, memory, ephemeral-storage, hugepages, pods",
			alloc: list("cpu", "0", "memory", "0", "ephemeral-storage", "0", "hugepages-2Mi", "0", "hugepages-1Gi", "0", "pods", "0"),
			pods:  []Pod{pod("u1", list("hugepages-2Mi", "2Mi", "pods", "1", "hugepages-1Gi", "1Gi", "ephemeral-storage", "1", "memory", "1", "cpu", "1m"))},
			want: []short{
				{"cpu", "1m", "0", true, []string{"u1"}},
				{"memory", "1", "0", true, []string{"u1"}},
				{"ephemeral-storage", "1", "0", true, []string{"u1"}},
				{"hugepages-1Gi", "1Gi", "0", true, []string{"u1"}},
				{"hugepages-2Mi", "2Mi", "0", true, []string{"u1"}},
				{"pods", "1", "0", true, []string{"u1"}},
			},
		},
		{
			name:  "no pods",
			alloc: list("cpu", "0", "pods", "0"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Shortfall(tc.alloc, tc.pods)
			if diff := cmp.Diff(tc.want, summary(r)); diff != "" {
				t.Errorf("unexpected shortfall (-want +got):\n%s", diff)
			}
			if r.Fits() != (len(tc.want) == 0) {
				t.Errorf("Fits() = %v with %d short", r.Fits(), len(tc.want))
			}
			if r.Pods != len(tc.pods) {
				t.Errorf("Pods = %d, want %d", r.Pods, len(tc.pods))
			}
		})
	}
}

func TestRequests(t *testing.T) {
	p := Pod{
		UID: "u",
		Containers: map[string]v1.ResourceRequirements{
			"app":     {Requests: list("cpu", "600m", "memory", "256Mi", "hugepages-2Mi", "128Mi")},
			"migrate": {Requests: list("cpu", "2", "memory", "1Gi")},
			"proxy":   {Requests: list("cpu", "200m", "memory", "64Mi")},
			"empty":   {},
		},
	}
	str := func(l v1.ResourceList) map[string]string {
		out := map[string]string{}
		for n, q := range l {
			out[string(n)] = q.String()
		}
		return out
	}
	want := map[string]string{"cpu": "2800m", "memory": "1344Mi", "hugepages-2Mi": "128Mi"}
	if diff := cmp.Diff(want, str(p.Requests())); diff != "" {
		t.Errorf("Requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, str(p.MinRequests())); diff != "" {
		t.Errorf("MinRequests without init containers kept is Requests (-want +got):\n%s", diff)
	}
	p.InitContainersKept = true
	if diff := cmp.Diff(map[string]string{"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "128Mi"}, str(p.MinRequests())); diff != "" {
		t.Errorf("MinRequests (-want +got):\n%s", diff)
	}
	// Pod-level: cpu, memory and hugepages only; other resources stay the
	// containers' sum.
	p.PodLevel = &v1.ResourceRequirements{Requests: list("cpu", "3", "hugepages-2Mi", "256Mi", "ephemeral-storage", "1Gi")}
	if diff := cmp.Diff(map[string]string{"cpu": "3", "memory": "1344Mi", "hugepages-2Mi": "256Mi"}, str(p.Requests())); diff != "" {
		t.Errorf("Requests with pod-level (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"cpu": "3", "memory": "1Gi", "hugepages-2Mi": "256Mi"}, str(p.MinRequests())); diff != "" {
		t.Errorf("MinRequests with pod-level (-want +got):\n%s", diff)
	}
}

func TestDescribe(t *testing.T) {
	pods := []Pod{pod("u1", list("cpu", "600m")), pod("u2", list("cpu", "600m")), pod("u3", list("cpu", "600m"))}
	r := Shortfall(list("cpu", "1"), pods)
	want := "cpu: pods request 1800m, the restarted kubelet would allow 1: it would reject at least one of default/a, default/b, uid u3 (it admits them oldest first, and allocated_pods_state does not say which is oldest): drain some of them"
	if got := r.Describe(kubeletstate.PodNames{"u1": "default/a", "u2": "default/b"}); got != want {
		t.Errorf("Describe:\n got %s\nwant %s", got, want)
	}
	if got := r.String(); !strings.Contains(got, "uid u1, uid u2, uid u3") {
		t.Errorf("String names pods by UID: %s", got)
	}
	if diff := cmp.Diff([]string{"u1", "u2", "u3"}, r.UIDs()); diff != "" {
		t.Errorf("UIDs (-want +got):\n%s", diff)
	}
	kept := pod("u1", list("cpu", "600m"), list("cpu", "2"))
	kept.InitContainersKept = true
	if got := Shortfall(list("cpu", "2500m"), []Pod{kept}).String(); !strings.Contains(got, "it may reject one of uid u1") || !strings.Contains(got, "init containers in full") {
		t.Errorf("an uncertain shortfall says so: %s", got)
	}
	if got, want := Shortfall(list("cpu", "2"), pods).String(), "the 3 pods in allocated_pods_state fit the new allocatable (pod overhead not counted)"; got != want {
		t.Errorf("fits: got %q, want %q", got, want)
	}
	two := Shortfall(list("cpu", "1", "pods", "2"), pods)
	if got := two.String(); strings.Count(got, "; ") != 1 || !strings.HasPrefix(got, "cpu: ") || !strings.Contains(got, "; pods: 3 pods, the restarted kubelet would allow 2") {
		t.Errorf("two resources: %s", got)
	}
}

func TestKeepRunning(t *testing.T) {
	pods := []Pod{pod("u1"), pod("u3"), pod("u2")}
	kept, gone := KeepRunning(pods, map[string]bool{"u1": true, "u9": true})
	if len(kept) != 1 || kept[0].UID != "u1" {
		t.Errorf("kept %v", kept)
	}
	if diff := cmp.Diff([]string{"u2", "u3"}, gone); diff != "" {
		t.Errorf("gone (-want +got):\n%s", diff)
	}
}
