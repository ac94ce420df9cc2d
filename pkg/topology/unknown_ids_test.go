package topology_test

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// TestUnknownTopologyIDs checks CPUs whose topology/physical_package_id or
// topology/core_id reads -1 (PowerVM LPARs). cAdvisor parses the -1 as an
// id like any other and lists and counts the CPU (sysinfo.getCoresInfo
// skips a CPU only when os.IsNotExist on one of the two files), so the
// kubelet's cpu capacity includes it; a missing file still leaves the CPU
// out.
func TestUnknownTopologyIDs(t *testing.T) {
	lparNoNUMA := fixturegen.PowerVMLPAR()
	lparNoNUMA.NoNUMA = true
	coresUnknown := fixturegen.OneNode(4, 4194304, 0)
	coresUnknown.UnknownCoreIDs = fixturegen.CPUs(0, 3)
	oneUnknown := fixturegen.OneNode(2, 4194304, 0)
	oneUnknown.UnknownCoreIDs = []int{1}
	oneUnknown.UnknownPackageIDs = []int{1}

	tests := []struct {
		name    string
		machine fixturegen.Machine
		// change edits the tree rooted at root (with sys/ and proc/); nil
		// leaves it as written.
		change func(t *testing.T, root string)
		// cpu is the predicted capacity; online the ids of OnlineCPUs.
		cpu    string
		online string
		// cpus are CPUs of Snapshot to check, by id.
		cpus map[int]topology.CPU
	}{
		{
			name:    "PowerVM LPAR: every physical_package_id -1",
			machine: fixturegen.PowerVMLPAR(),
			cpu:     "15",
			online:  "0-12,14-15",
			cpus: map[int]topology.CPU{
				5:  {ID: 5, Online: true, Package: -1, Die: 0, Core: 1, Node: 0, UnknownIDs: true},
				14: {ID: 14, Online: true, Package: -1, Die: 0, Core: 2, Node: 1, UnknownIDs: true},
				// Offline: no topology directory, not counted.
				13: {ID: 13, Online: false, Package: -1, Die: -1, Core: -1, Node: 0},
			},
		},
		{
			// cAdvisor counts every cpuN directory without NUMA nodes; the
			// CPU manager sees the online CPUs, under one node -1.
			name:    "PowerVM LPAR without NUMA",
			machine: lparNoNUMA,
			cpu:     "16",
			online:  "0-12,14-15",
			cpus: map[int]topology.CPU{
				0: {ID: 0, Online: true, Package: -1, Die: 0, Core: 0, Node: -1, UnknownIDs: true},
			},
		},
		{
			name:    "every core_id -1",
			machine: coresUnknown,
			cpu:     "4",
			online:  "0-3",
			cpus: map[int]topology.CPU{
				3: {ID: 3, Online: true, Package: 0, Die: 0, Core: -1, Node: 0, UnknownIDs: true},
			},
		},
		{
			name:    "both ids -1 on one CPU",
			machine: oneUnknown,
			cpu:     "2",
			online:  "0-1",
			cpus: map[int]topology.CPU{
				0: {ID: 0, Online: true, Package: 0, Die: 0, Core: 0, Node: 0},
				1: {ID: 1, Online: true, Package: -1, Die: 0, Core: -1, Node: 0, UnknownIDs: true},
			},
		},
		{
			name:    "core_id -1 without physical_package_id: not counted",
			machine: oneUnknown,
			change:  remove("sys/devices/system/cpu/cpu1/topology/physical_package_id"),
			cpu:     "1",
			online:  "0",
			cpus: map[int]topology.CPU{
				1: {ID: 1, Online: true, Package: -1, Die: 0, Core: -1, Node: 0},
			},
		},
		{
			name:    "physical_package_id -1 without core_id: not counted",
			machine: oneUnknown,
			change:  remove("sys/devices/system/cpu/cpu1/topology/core_id"),
			cpu:     "1",
			online:  "0",
			cpus: map[int]topology.CPU{
				1: {ID: 1, Online: true, Package: -1, Die: 0, Core: -1, Node: 0},
			},
		},
		{
			// cAdvisor does not read die_id.
			name:    "die_id -1 alone",
			machine: smallMachine(),
			change:  write("sys/devices/system/cpu/cpu1/topology/die_id", "-1\n"),
			cpu:     "2",
			online:  "0-1",
			cpus: map[int]topology.CPU{
				1: {ID: 1, Online: true, Package: 0, Die: -1, Core: 1, Node: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := tt.machine.WriteDir(root); err != nil {
				t.Fatal(err)
			}
			if tt.change != nil {
				tt.change(t, root)
			}
			fs := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
			full, err := fs.Snapshot()
			if err != nil {
				t.Fatalf("Snapshot() error: %v", err)
			}
			lean, err := fs.CapacitySnapshot()
			if err != nil {
				t.Fatalf("CapacitySnapshot() error: %v", err)
			}
			for _, s := range []struct {
				name string
				snap *topology.Snapshot
			}{{"Snapshot", full}, {"CapacitySnapshot", lean}} {
				capacity := s.snap.Capacity()
				if got := capacity.Cpu().String(); got != tt.cpu {
					t.Errorf("%s: capacity cpu = %s, want %s", s.name, got, tt.cpu)
				}
				var ids []int
				for _, c := range s.snap.OnlineCPUs() {
					ids = append(ids, c.ID)
				}
				if got := cpuset.New(ids...).String(); got != tt.online {
					t.Errorf("%s: OnlineCPUs() = %s, want %s", s.name, got, tt.online)
				}
			}
			got := map[int]topology.CPU{}
			for id := range tt.cpus {
				c, ok := full.CPU(id)
				if !ok {
					t.Fatalf("no cpu%d in the snapshot", id)
				}
				got[id] = c
			}
			if diff := cmp.Diff(tt.cpus, got); diff != "" {
				t.Errorf("unexpected CPUs (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCPUHasTopology checks HasTopology on hand-built CPUs, whose zero
// UnknownIDs keeps the meaning a -1 had before UnknownIDs existed: absent.
func TestCPUHasTopology(t *testing.T) {
	tests := []struct {
		name string
		cpu  topology.CPU
		want bool
	}{
		{"ids", topology.CPU{Package: 1, Core: 3}, true},
		{"ids read -1", topology.CPU{Package: -1, Core: -1, UnknownIDs: true}, true},
		{"package read -1", topology.CPU{Package: -1, Core: 2, UnknownIDs: true}, true},
		{"no package file", topology.CPU{Package: -1, Core: 2}, false},
		{"no core file", topology.CPU{Package: 0, Core: -1}, false},
		{"no topology directory", topology.CPU{Package: -1, Die: -1, Core: -1}, false},
		{"die -1 does not matter", topology.CPU{Package: 0, Die: -1, Core: 0}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cpu.HasTopology(); got != tt.want {
				t.Errorf("%+v.HasTopology() = %v, want %v", tt.cpu, got, tt.want)
			}
		})
	}
}
