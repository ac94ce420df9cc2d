//go:build e2e

package e2e

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
)

// burstSize is how many synthetic memory uevents scenario 4 sends.
const burstSize = 10000

// TestUeventBurst is scenario 4: 10 000 synthetic memory uevents ("online"
// written to memory blocks' uevent files: real uevents, no change) while
// the kubelet runs. Nothing is to be corrected: the kubelet alone leaves
// its Node as it is, and hotplugd restarts nothing and writes nothing.
func TestUeventBurst(t *testing.T) {
	s := setup(t)
	acquireMachine(t) // nothing else changes the machine meanwhile
	k := startKubelet(t, s, "")
	files := daemontest.MemoryBlocks(t)
	base := getNode(t, s)
	unchanged := func(n *v1.Node) bool {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory, hugepages2Mi} {
			if !sameQuantity(n.Status.Capacity, r, base.Status.Capacity[r]) || !sameQuantity(n.Status.Allocatable, r, base.Status.Allocatable[r]) {
				return false
			}
		}
		return true
	}
	change := fmt.Sprintf("%d synthetic memory uevents while the kubelet runs", burstSize)

	t.Run("kubelet alone", func(t *testing.T) {
		t0 := time.Now()
		daemontest.SyntheticUevents(t, files, burstSize)
		sent := time.Since(t0)
		if n, held := holdNode(t, s, quietWindow+settle+2*time.Second, unchanged); !held {
			t.Errorf("the Node changed: capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
		}
		results.add(result{scenario: "4 uevent burst", side: "kubelet alone", change: change,
			correct: "nothing to correct (Node unchanged, 5.5 s watched)", restarts: k.startsSince(t0), writes: -1,
			note: "burst sent in " + seconds(sent)})
	})

	t.Run("hotplugd", func(t *testing.T) {
		d := startHotplugd(t, s, k)
		const received = `hotplugd_uevents_total{action="online",subsystem="memory"}`
		writes0, nodeWrites0, events0 := hotplugdWrites(t, d), nodeWrites(d), d.Metric(received)
		reconciles0 := d.Metric(`hotplugd_reconciles_total{trigger="uevent"}`) + d.Metric(`hotplugd_reconciles_total{trigger="overflow"}`)
		t0 := time.Now()
		daemontest.SyntheticUevents(t, files, burstSize)
		sent := time.Since(t0)
		// The quiet window, the settle time and 2 s more: any restart
		// or write would have happened.
		if n, held := holdNode(t, s, quietWindow+settle+2*time.Second, func(n *v1.Node) bool {
			return unchanged(n) && conditionIs(v1.ConditionFalse)(n)
		}); !held {
			t.Errorf("the Node changed: capacity %v allocatable %v condition %+v", n.Status.Capacity, n.Status.Allocatable, staleCondition(n))
		}
		got, reconciles := d.Metric(received)-events0, d.Metric(`hotplugd_reconciles_total{trigger="uevent"}`)+d.Metric(`hotplugd_reconciles_total{trigger="overflow"}`)-reconciles0
		t.Logf("burst of %d sent in %v; hotplugd received %v of them and re-read the machine %v times", burstSize, sent.Round(time.Millisecond), got, reconciles)
		if got == 0 {
			t.Errorf("hotplugd received none of the burst's uevents")
		}
		restarts := k.startsSince(t0)
		if restarts != 0 {
			t.Errorf("%d kubelet starts during the burst (%s), want 0", restarts, timeline(k, t0))
		}
		if got := d.Metric("hotplugd_kubelet_restarts_total"); got != 0 {
			t.Errorf("hotplugd_kubelet_restarts_total = %v, want 0", got)
		}
		writes := hotplugdWrites(t, d) - writes0
		if writes != 0 || nodeWrites(d) != nodeWrites0 {
			t.Errorf("hotplugd wrote %v times to the API (%v Node writes) for a burst that changed nothing, want 0", writes, nodeWrites(d)-nodeWrites0)
		}
		results.add(result{scenario: "4 uevent burst", side: "hotplugd", change: change,
			correct: "nothing to correct (Node unchanged, 5.5 s watched)", restarts: restarts, writes: writes,
			note: fmt.Sprintf("burst sent in %s; %v received, %v re-reads", seconds(sent), got, reconciles)})
	})
}

// nodeWrites is hotplugd_node_writes_total over every kind (status,
// metadata, event).
func nodeWrites(d *daemontest.Daemon) float64 {
	return d.Metric(`hotplugd_node_writes_total{what="status"}`) + d.Metric(`hotplugd_node_writes_total{what="metadata"}`) +
		d.Metric(`hotplugd_node_writes_total{what="event"}`)
}
