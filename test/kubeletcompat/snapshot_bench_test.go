package kubeletcompat_test

import (
	"slices"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/kubelet/cadvisor"

	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// BenchmarkSnapshotVsMachineInfo times, interleaved in one run on this
// machine, cAdvisor's machine.Info with CapacityFromMachineInfo (what the
// kubelet calls at start) and hotplugd's snapshots with capacity: the full
// Snapshot (with every memory block's state, which machine.Info does not
// read) and the CapacitySnapshot a reconcile takes (the same scope as
// machine.Info's topology). Interleaving keeps the ratios fair on a noisy
// shared machine.
//
// It reports the ratios of the mean times (x-faster) and of the median
// times (x-faster-median). The goal is a capacity snapshot at least 20x
// faster than machine.Info (issue 23), judged on the median: a capacity
// snapshot takes about 0.1 ms, so one preemption by a neighbour in one of
// the iterations moves its mean by tens of percent, and its median not. A
// run below the goal is logged, not failed: a benchmark that fails on noise
// teaches people to ignore it.
func BenchmarkSnapshotVsMachineInfo(b *testing.B) {
	if _, err := oracle.HostMachineInfo(); err != nil {
		b.Skipf("cAdvisor's machine.Info does not run here: %v", err)
	}
	fs := topology.NewFS("/sys", "/proc")
	var full, lean, ca []time.Duration
	for b.Loop() {
		t0 := time.Now()
		s, err := fs.Snapshot()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Capacity()
		t1 := time.Now()
		s, err = fs.CapacitySnapshot()
		if err != nil {
			b.Fatal(err)
		}
		_ = s.Capacity()
		t2 := time.Now()
		info, err := oracle.HostMachineInfo()
		if err != nil {
			b.Fatal(err)
		}
		_ = cadvisor.CapacityFromMachineInfo(info)
		t3 := time.Now()
		full = append(full, t1.Sub(t0))
		lean = append(lean, t2.Sub(t1))
		ca = append(ca, t3.Sub(t2))
	}
	b.ReportMetric(mean(ca), "cadvisor-ns/op")
	b.ReportMetric(mean(full), "snapshot-ns/op")
	b.ReportMetric(mean(lean), "capacity-snapshot-ns/op")
	b.ReportMetric(mean(ca)/mean(full), "snapshot-x-faster")
	b.ReportMetric(mean(ca)/mean(lean), "capacity-snapshot-x-faster")
	b.ReportMetric(median(ca)/median(full), "snapshot-x-faster-median")
	ratio := median(ca) / median(lean)
	b.ReportMetric(ratio, "capacity-snapshot-x-faster-median")
	if len(lean) >= 20 && ratio < capacitySnapshotGoal {
		b.Logf("below the goal: the capacity snapshot is %.1fx faster than cAdvisor's machine.Info (median; %.1fx by the mean), the goal is %dx",
			ratio, mean(ca)/mean(lean), capacitySnapshotGoal)
	}
}

// capacitySnapshotGoal is how many times faster than machine.Info the
// capacity snapshot should be (issue 23).
const capacitySnapshotGoal = 20

// mean returns the mean of ds in nanoseconds.
func mean(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return float64(sum.Nanoseconds()) / float64(len(ds))
}

// median returns the median of ds in nanoseconds; it sorts ds.
func median(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2].Nanoseconds())
}
