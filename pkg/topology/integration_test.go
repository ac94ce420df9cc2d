package topology

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/machinetest"
)

// TestIntegrationCapacitySnapshotFollowsHotplug checks, as root on a machine
// whose cpu1 can go offline, that the files kept open never give a stale
// value: cpu1's topology files, which the kernel removes when it goes
// offline and creates anew when it comes back, and the 2Mi hugepage counts,
// global and node 0's. machinetest restores every value.
func TestIntegrationCapacitySnapshotFollowsHotplug(t *testing.T) {
	f := thisMachine(t)
	m := machinetest.Acquire(t)
	before := agrees(t, f)
	if c, ok := before.CPU(1); !ok || !c.Online || !c.HasTopology() {
		t.Skipf("cpu1 is not an online CPU with a topology here: %+v", c)
	}
	cpu := func(s *Snapshot) string {
		c, _ := s.CPU(1)
		return snapshotJSON(t, &Snapshot{CPUs: CPUs{Online: s.CPUs.Online, List: []CPU{c}}})
	}

	m.SetCPUOnline(t, 1, false)
	off := agrees(t, f)
	if c, _ := off.CPU(1); c.Online || c.HasTopology() {
		t.Errorf("cpu1 offline: %+v, want offline without topology", c)
	}
	m.SetCPUOnline(t, 1, true)
	on := agrees(t, f)
	if diff := cmp.Diff(cpu(before), cpu(on)); diff != "" {
		t.Errorf("cpu1 back online (-before +after):\n%s", diff)
	}

	// The global count, then node 0's, which changes the global one too.
	pages2M := func(hps []HugePages) uint64 {
		for _, hp := range hps {
			if hp.PageSizeKiB == 2048 {
				return hp.Pages
			}
		}
		return 0
	}
	for _, c := range []struct {
		path  string
		pages func(*Snapshot) uint64
	}{
		{"/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", func(s *Snapshot) uint64 { return pages2M(s.HugePages) }},
		{"/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", func(s *Snapshot) uint64 {
			if len(s.NUMANodes) == 0 || s.NUMANodes[0].ID != 0 {
				return 0
			}
			return pages2M(s.NUMANodes[0].HugePages)
		}},
	} {
		want := c.pages(agrees(t, f)) + 1
		m.SetHugePages(t, c.path, want)
		if got := c.pages(agrees(t, f)); got != want {
			t.Errorf("%s reads %d in the snapshot after writing %d", c.path, got, want)
		}
	}
}
