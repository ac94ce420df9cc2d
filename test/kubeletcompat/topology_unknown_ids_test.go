package kubeletcompat_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// physicalID is cAdvisor's nodeRegExp (machine/machine.go), which
// GetSockets counts in /proc/cpuinfo: a "physical id" of -1 does not match.
var physicalID = regexp.MustCompile(`(?m)^physical id\s*:\s*([0-9]+)$`)

// cadvisorSockets is cAdvisor's machine.GetSockets for the tree at root:
// the distinct "physical id" lines of its cpuinfo or, when there are none
// (PowerVM's cpuinfo has none; here every id is -1), cAdvisor's own count of
// the distinct physical_package_id of the online CPUs under its sysfs. The
// oracle's MachineInfoFromRoot calls machine.GetSockets, whose fallback
// reads this machine's /sys instead of the tree's.
func cadvisorSockets(t *testing.T, root string) int {
	t.Helper()
	cpuinfo, err := os.ReadFile(filepath.Join(root, "proc/cpuinfo"))
	if err != nil {
		t.Fatal(err)
	}
	// getUniqueMatchesCount (machine/machine.go).
	unique := map[string]bool{}
	for _, m := range physicalID.FindAllString(string(cpuinfo), -1) {
		unique[m] = true
	}
	if len(unique) > 0 {
		return len(unique)
	}
	return oracle.UniqueCPUPropertyCount(filepath.Join(root, "sys/devices/system/cpu")+"/", oracle.CPUPhysicalPackageID)
}

// TestUnknownTopologyIDsMatchKubelet checks machines whose CPUs'
// topology/physical_package_id or topology/core_id read -1 (PowerVM LPARs)
// against cAdvisor v0.56.2 and the kubelet: cAdvisor counts such a CPU and
// places it in a core and socket with id -1 (sysinfo.getCoresInfo; only a
// missing file makes it skip the CPU), so the cpu capacity
// (CapacityFromMachineInfo: NumCores), the CPU manager's topology and the
// CPUs its static policy reserves must include it.
func TestUnknownTopologyIDsMatchKubelet(t *testing.T) {
	lparNoNUMA := fixturegen.PowerVMLPAR()
	lparNoNUMA.NoNUMA = true
	lparNoIDs := fixturegen.PowerVMLPAR()
	lparNoIDs.NoNUMA = true
	lparNoIDs.UnknownCoreIDs = lparNoIDs.UnknownPackageIDs
	// Two sockets of 2 cores x 2 threads, a node per socket, every core_id
	// -1: each node's CPUs make one core.
	coresUnknown := func(noNUMA bool) fixturegen.Machine {
		m := fixturegen.Machine{
			Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2,
			NoNUMA: noNUMA,
			Nodes: []fixturegen.Node{
				{CPUs: []int{0, 1, 4, 5}, MemTotalKB: 4194304},
				{CPUs: []int{2, 3, 6, 7}, MemTotalKB: 4194304},
			},
			OfflineCPUs: []int{7},
		}
		m.UnknownCoreIDs = []int{0, 1, 2, 3, 4, 5, 6}
		return m
	}
	oneUnknown := fixturegen.OneNode(4, 4194304, 0)
	oneUnknown.UnknownCoreIDs = []int{1, 2}
	oneUnknown.UnknownPackageIDs = []int{2}

	tests := []struct {
		name    string
		machine fixturegen.Machine
		// remove are files to delete from the written tree.
		remove []string
		// cpu is the capacity, worked out by hand to keep the oracle honest.
		cpu string
		// mixedPackages: some package ids are -1 and some not, which no
		// real machine shows (x86 never writes -1, PowerVM's cpuinfo has no
		// "physical id"); cAdvisor's socket count comes from cpuinfo,
		// which hotplugd does not read, so the reserved CPUs are not
		// compared.
		mixedPackages bool
	}{
		{name: "PowerVM LPAR", machine: fixturegen.PowerVMLPAR(), cpu: "15"},
		{name: "PowerVM LPAR without NUMA", machine: lparNoNUMA, cpu: "16"},
		{name: "PowerVM LPAR without NUMA, core ids -1", machine: lparNoIDs, cpu: "16"},
		{name: "core ids -1", machine: coresUnknown(false), cpu: "7"},
		{name: "core ids -1 without NUMA", machine: coresUnknown(true), cpu: "8"},
		{name: "some ids -1", machine: oneUnknown, cpu: "4", mixedPackages: true},
		{
			name:    "core_id -1, physical_package_id missing",
			machine: oneUnknown,
			remove:  []string{"sys/devices/system/cpu/cpu1/topology/physical_package_id"},
			cpu:     "3", mixedPackages: true,
		},
		{
			name:    "both -1, core_id missing",
			machine: oneUnknown,
			remove:  []string{"sys/devices/system/cpu/cpu2/topology/core_id"},
			cpu:     "3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := tt.machine.WriteDir(root); err != nil {
				t.Fatal(err)
			}
			for _, rel := range tt.remove {
				if err := os.Remove(filepath.Join(root, rel)); err != nil {
					t.Fatal(err)
				}
			}
			sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
			info, err := oracle.MachineInfoFromRoot(sys, proc)
			if err != nil {
				t.Fatal(err)
			}
			info.NumSockets = cadvisorSockets(t, root)
			wantCap, wantAlloc, err := oracle.NodeStatus(info, "")
			if err != nil {
				t.Fatalf("oracle.NodeStatus() error: %v", err)
			}
			if got := quantities(wantCap)["cpu"]; got != tt.cpu {
				t.Errorf("the kubelet's capacity cpu = %s, worked out by hand %s", got, tt.cpu)
			}

			// Where cAdvisor places each CPU it lists; the node of a
			// machine without NUMA nodes is the package.
			type place struct{ Node, Package, Core int }
			want := map[int]place{}
			for _, n := range info.Topology {
				for _, c := range n.Cores {
					for _, cpu := range c.Threads {
						want[cpu] = place{n.Id, c.SocketID, c.Id}
					}
				}
			}

			fs := topology.NewFS(sys, proc)
			for _, read := range []struct {
				name string
				fn   func() (*topology.Snapshot, error)
			}{{"Snapshot", fs.Snapshot}, {"CapacitySnapshot", fs.CapacitySnapshot}} {
				snap, err := read.fn()
				if err != nil {
					t.Fatalf("%s() error: %v", read.name, err)
				}
				if diff := cmp.Diff(quantities(wantCap), quantities(snap.Capacity())); diff != "" {
					t.Errorf("%s: capacity differs (-kubelet +hotplugd):\n%s", read.name, diff)
				}
				gotAlloc, err := snap.Allocatable(nil)
				if err != nil {
					t.Fatalf("%s: Allocatable() error: %v", read.name, err)
				}
				if diff := cmp.Diff(quantities(wantAlloc), quantities(gotAlloc)); diff != "" {
					t.Errorf("%s: allocatable differs (-kubelet +hotplugd):\n%s", read.name, diff)
				}
				got := map[int]place{}
				for _, c := range snap.OnlineCPUs() {
					node := c.Node
					if len(snap.NUMANodes) == 0 {
						node = c.Package
					}
					got[c.ID] = place{node, c.Package, c.Core}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: CPU placement differs (-cAdvisor +hotplugd OnlineCPUs):\n%s", read.name, diff)
				}
			}

			if tt.mixedPackages {
				return
			}
			// The static policy's reserved CPUs come from the CPU manager's
			// topology (topology.Discover on cAdvisor's info; hotplugd's
			// kubeletTopology): every reservation size, and one too many.
			snap, err := fs.CapacitySnapshot()
			if err != nil {
				t.Fatal(err)
			}
			m := cpuMachine{info: info, snap: snap}
			for n := 1; n <= len(want)+1; n++ {
				k := cpuKubelet{reserved: strconv.Itoa(n)}
				t.Run("reserve "+k.reserved, func(t *testing.T) {
					k.setGates(t)
					wantRes, kerr := kubeletReserved(t, m, k)
					gotRes, err := cpumgr.ReservedCPUs(k.kubeletConfig(), snap, hotplugdRelease(t))
					if (err != nil) != (kerr != nil) {
						t.Fatalf("hotplugd: %v, %v; the kubelet: %v, %v", gotRes, err, wantRes, kerr)
					}
					if err == nil && !gotRes.Equals(wantRes) {
						t.Errorf("hotplugd reserves %s, the kubelet %s", gotRes, wantRes)
					}
				})
			}
		})
	}
}
