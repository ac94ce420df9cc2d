package cpumgr

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

// BenchmarkVerifyPlanWrite is preflight's work on a large node: 2 sockets x
// 128 cores x 2 threads (512 CPUs) whose second socket's last 32 cores came
// online, and a state with 200 pinned containers of 2 CPUs each. Each
// iteration verifies the file (Parse: the kubelet's load chain and
// checksums), computes the configuration (the kubelet's choice of 2
// reserved CPUs), plans the rebuild and applies it (Marshal, then a backup
// and an atomic, fsynced replacement in a temporary directory). Goal: under
// 5 ms.
func BenchmarkVerifyPlanWrite(b *testing.B) {
	const sockets, cores, threads = 2, 128, 2
	var offline []int
	for t := range threads {
		for c := cores - 32; c < cores; c++ {
			offline = append(offline, t*sockets*cores+cores+c)
		}
	}
	m := func(offline []int) fixturegen.Machine {
		nodes := make([]fixturegen.Node, sockets)
		for cpu := range sockets * cores * threads {
			s := (cpu % (sockets * cores)) / cores
			nodes[s].CPUs = append(nodes[s].CPUs, cpu)
			nodes[s].MemTotalKB = 64 << 20
		}
		return fixturegen.Machine{Sockets: sockets, CoresPerSocket: cores, ThreadsPerCore: threads, OfflineCPUs: offline, Nodes: nodes}
	}
	oldSnap := snapshot(b, m(offline))
	snap := snapshot(b, m(nil))
	kc := kubelet("2")

	oldCfg, err := NewConfig(kc, oldSnap, "", rel136)
	if err != nil {
		b.Fatal(err)
	}
	newCfg, err := NewConfig(kc, snap, "", rel136)
	if err != nil {
		b.Fatal(err)
	}
	// The old state: 200 containers on whole cores, the rest shared. The
	// kubelet reserved a core on the smaller socket (128,384); now it
	// reserves 0,256: neither is pinned, so every container is kept.
	oldTopo := kubeletTopology(oldSnap)
	s := &State{Format: FormatV2, PolicyName: PolicyStatic, Entries: map[string]map[string]cpuset.CPUSet{}}
	free := oldTopo.all().Difference(oldCfg.Reserved.Union(newCfg.Reserved))
	for i := range 200 {
		core := free.List()[0]
		pair := cpuset.New(core, core+sockets*cores)
		free = free.Difference(pair)
		pod := fmt.Sprintf("%08x-4a57-4e0b-9a55-1d2c3b4a5f60", i/2)
		if s.Entries[pod] == nil {
			s.Entries[pod] = map[string]cpuset.CPUSet{}
		}
		s.Entries[pod][fmt.Sprintf("c%d", i%2)] = pair
	}
	s.DefaultCPUSet = oldTopo.all().Difference(knownCPUs(s, false))
	if err := Validate(s, oldSnap, oldCfg); err != nil {
		b.Fatalf("the old state is invalid on the old machine: %v", err)
	}
	old, err := s.Marshal()
	if err != nil {
		b.Fatal(err)
	}

	path := filepath.Join(b.TempDir(), "cpu_manager_state")
	now := time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)
	b.SetBytes(int64(len(old)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		s, err := Parse(old)
		if err != nil {
			b.Fatal(err)
		}
		cfg, err := NewConfig(kc, snap, path, rel136)
		if err != nil {
			b.Fatal(err)
		}
		p, err := PlanRebuild(s, snap, cfg)
		if err != nil || !p.Changed || len(p.Kept) != 200 {
			b.Fatalf("PlanRebuild() = %v, %v", p, err)
		}
		backup, err := Apply(p, now.Add(time.Duration(i)*time.Microsecond))
		if err != nil {
			b.Fatal(err)
		}
		// A node keeps one backup per repair, not thousands in one
		// directory: remove it outside the timing.
		if backup != "" {
			b.StopTimer()
			if err := os.Remove(backup); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	}
}
