package kubeletcompat_test

import (
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
// shared machine. It fails when the capacity snapshot is not at least 10x
// faster than machine.Info.
func BenchmarkSnapshotVsMachineInfo(b *testing.B) {
	if _, err := oracle.HostMachineInfo(); err != nil {
		b.Skipf("cAdvisor's machine.Info does not run here: %v", err)
	}
	fs := topology.NewFS("/sys", "/proc")
	var full, lean, ca time.Duration
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
		full += t1.Sub(t0)
		lean += t2.Sub(t1)
		ca += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ca.Nanoseconds())/n, "cadvisor-ns/op")
	b.ReportMetric(float64(full.Nanoseconds())/n, "snapshot-ns/op")
	b.ReportMetric(float64(lean.Nanoseconds())/n, "capacity-snapshot-ns/op")
	b.ReportMetric(float64(ca)/float64(full), "snapshot-x-faster")
	b.ReportMetric(float64(ca)/float64(lean), "capacity-snapshot-x-faster")
	if ratio := float64(ca) / float64(lean); b.N >= 20 && ratio < 10 {
		b.Errorf("the capacity snapshot is %.1fx faster than cAdvisor's machine.Info, want at least 10x", ratio)
	}
}
