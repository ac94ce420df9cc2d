//go:build e2e

package e2e

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// node0Hugepages2Mi is the count file of 2 MiB pages on NUMA node 0.
const node0Hugepages2Mi = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"

const hugepages2Mi v1.ResourceName = "hugepages-2Mi"

// TestHugepages is scenario 1: 64 x 2Mi hugepages reserved through node0's
// file while the kubelet runs. The kubelet alone keeps hugepages-2Mi: 0;
// with hotplugd the Node shows 128Mi and allocatable memory 128Mi lower
// after one restart hotplugd asked of the kubelet's supervisor (whose
// start ran hotplugd preflight, which had nothing to repair), and the
// condition is False again.
//
// It runs on the current kubelet release and on the oldest hotplugd
// supports (incidentReleases).
func TestHugepages(t *testing.T) {
	s := setup(t)
	incidentReleases(t, s, func(t *testing.T, r release) { hugepagesIncident(t, s, r) })
}

func hugepagesIncident(t *testing.T, s *suite, r release) {
	m := acquireMachine(t)
	k := startKubeletWith(t, s, kubeletSpec{Binary: r.bin})
	base := getNode(t, s)
	if got := quantity(base.Status.Capacity, hugepages2Mi); got != "0" {
		t.Fatalf("the kubelet started with hugepages-2Mi %q, want 0 (hugepages left reserved on this machine?)", got)
	}
	// What a restarted kubelet reports: 128Mi of 2Mi pages, allocatable
	// memory 128Mi lower, capacity memory unchanged.
	wantAlloc := base.Status.Allocatable.Memory().DeepCopy()
	wantAlloc.Sub(resource.MustParse("128Mi"))
	correct := func(n *v1.Node) bool {
		return sameQuantity(n.Status.Capacity, hugepages2Mi, resource.MustParse("128Mi")) &&
			sameQuantity(n.Status.Allocatable, v1.ResourceMemory, wantAlloc) &&
			sameQuantity(n.Status.Capacity, v1.ResourceMemory, *base.Status.Capacity.Memory())
	}
	const change = "64 x 2Mi hugepages (node0's file) while the kubelet runs"

	t.Run("kubelet alone", func(t *testing.T) {
		const watch = 15 * time.Second
		t0 := time.Now()
		m.SetHugePages(t, node0Hugepages2Mi, 64)
		n, held := holdNode(t, s, watch, func(n *v1.Node) bool {
			return quantity(n.Status.Capacity, hugepages2Mi) == "0" &&
				sameQuantity(n.Status.Allocatable, v1.ResourceMemory, *base.Status.Allocatable.Memory())
		})
		if !held {
			t.Fatalf("the kubelet alone changed its Node: capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
		}
		if _, alive := k.pid(); !alive || !k.healthy() {
			t.Fatalf("the kubelet is not running: the watch proves nothing; end of its log:\n%s", k.logTail(3000))
		}
		results.add(result{scenario: scenarioOn("1 hugepages", r), side: "kubelet alone", change: change,
			correct: "never (15 s watched: hugepages-2Mi stays 0)", restarts: k.startsSince(t0), writes: -1})
	})

	t.Run("hotplugd", func(t *testing.T) {
		d := startHotplugd(t, s, k, r.hotplugdArgs(t)...)
		defer d.Stop() // before the hugepages are given back (a drift again)
		writes0, mark, events0, offset := hotplugdWrites(t, d), d.Mark(), eventCounts(t, s), k.logSize()
		t0 := time.Now()
		m.SetHugePages(t, node0Hugepages2Mi, 64)
		changed := time.Now()
		took, n, ok := waitNode(t, s, changed, time.Minute, correct)
		if !ok {
			t.Fatalf("the Node is not correct 1 min after the change: capacity %v allocatable %v; hotplugd's log:\n%s",
				n.Status.Capacity, n.Status.Allocatable, d.Dump())
		}
		restart := remedyDone(t, d, mark, 30*time.Second)
		t.Logf("change -> Node correct: %v (kubelet calls: %s; the remedy took %v)", took.Round(time.Millisecond), timeline(k, t0), restart.Round(time.Millisecond))
		checkRemedy(t, s, d, k, t0, took, restart, 1)
		checkStartPreflight(t, k, offset) // no state file to repair
		writes := settleWrites(t, d) - writes0
		events := remediatedOnce(t, s, events0)
		results.add(result{scenario: scenarioOn("1 hugepages", r), side: "hotplugd", change: change, correct: seconds(took),
			restarts: k.startsSince(t0), writes: writes, note: "kubelet " + timeline(k, t0) + "; events " + events.String()})
	})
}
