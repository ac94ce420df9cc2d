package kubeletcompat_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// oddMemoryBytes is a MemoryCapacity that is no whole number of Ki, which
// only a hand-built MachineInfo can have (MemTotal is in kB).
const oddMemoryBytes = 131006464*1024 + 512

// machineCase is one machine as cAdvisor sees it (info, for the kubelet's
// code) and as hotplugd sees it (snap).
type machineCase struct {
	name string
	info *oracle.MachineInfo
	snap *topology.Snapshot
	// skip, when set, is why the machine cannot be used here.
	skip string
	// want pins, for some configurations, allocatable entries worked out by
	// hand (config case name -> resource -> quantity), to keep the oracle
	// itself honest.
	want map[string]map[string]string
}

// TestCapacityMatchesKubelet compares hotplugd's capacity with the
// kubelet's node status (cAdvisor's machine info through the node-status
// setter) for every test machine.
func TestCapacityMatchesKubelet(t *testing.T) {
	for _, m := range testMachines(t) {
		t.Run(m.name, func(t *testing.T) {
			if m.skip != "" {
				t.Skip(m.skip)
			}
			want, _, err := oracle.NodeStatus(m.info, "")
			if err != nil {
				t.Fatalf("oracle.NodeStatus() error: %v", err)
			}
			if diff := cmp.Diff(quantities(want), quantities(m.snap.Capacity())); diff != "" {
				t.Errorf("capacity differs (-kubelet +hotplugd):\n%s", diff)
			}
		})
	}
}

// TestAllocatableMatchesKubelet compares hotplugd's allocatable (and
// capacity) with the kubelet's for every test machine and kubelet
// configuration.
func TestAllocatableMatchesKubelet(t *testing.T) {
	for _, m := range testMachines(t) {
		t.Run(m.name, func(t *testing.T) {
			if m.skip != "" {
				t.Skip(m.skip)
			}
			for _, c := range configCases() {
				t.Run(c.name, func(t *testing.T) {
					path := c.path(t)
					wantCap, wantAlloc, kubeletErr := oracle.NodeStatus(m.info, path)
					if (kubeletErr != nil) != c.kubeletRefuses {
						t.Fatalf("oracle.NodeStatus() error = %v, want error: %v (oracle broken?)", kubeletErr, c.kubeletRefuses)
					}
					for r, q := range m.want[c.name] {
						if got := quantities(wantAlloc)[r]; got != q {
							t.Errorf("oracle allocatable[%s] = %q, worked out by hand %q", r, got, q)
						}
					}

					gotCap := m.snap.Capacity()
					gotAlloc, hotplugdErr := hotplugdAllocatable(m.snap, path)
					if kubeletErr != nil {
						if hotplugdErr == nil {
							t.Errorf("the kubelet refuses to start (%v), hotplugd predicts allocatable %v", kubeletErr, gotAlloc)
						}
						return
					}
					if hotplugdErr != nil {
						t.Fatalf("hotplugd error %v, the kubelet starts with allocatable %v", hotplugdErr, quantities(wantAlloc))
					}
					if diff := cmp.Diff(quantities(wantCap), quantities(gotCap)); diff != "" {
						t.Errorf("capacity differs (-kubelet +hotplugd):\n%s", diff)
					}
					if diff := cmp.Diff(quantities(wantAlloc), gotAlloc); diff != "" {
						t.Errorf("allocatable differs (-kubelet +hotplugd):\n%s", diff)
					}
				})
			}
		})
	}
}

// hotplugdAllocatable is hotplugd's prediction for the config file at path
// ("" is no config file).
func hotplugdAllocatable(snap *topology.Snapshot, path string) (map[string]string, error) {
	var cfg *kubeletv1beta1.KubeletConfiguration
	if path == "" {
		cfg = kubeletconfig.Default()
	} else {
		c, err := kubeletconfig.Load(path)
		if err != nil {
			return nil, err
		}
		cfg = c
	}
	alloc, err := snap.Allocatable(cfg)
	if err != nil {
		return nil, err
	}
	return quantities(alloc), nil
}

// testMachines returns this machine, hand-built and sysfs-tree machines, and
// the topology fixtures of the main module.
func testMachines(t *testing.T) []machineCase {
	t.Helper()
	var ms []machineCase

	// This machine, as the kubelet's cAdvisor reads it.
	real := machineCase{name: "this machine"}
	if info, err := oracle.HostMachineInfo(); err != nil {
		real.skip = "cAdvisor machine.Info fails on this machine: " + err.Error()
	} else if snap, err := topology.NewFS("/sys", "/proc").Snapshot(); err != nil {
		t.Errorf("hotplugd snapshot of this machine: %v", err)
		real.skip = "hotplugd cannot read this machine"
	} else {
		real.info, real.snap = info, snap
	}
	ms = append(ms, real)

	ms = append(ms, machineCase{
		name: "hand-built 16 cpus 2 nodes odd memory",
		info: handBuiltInfo(),
		snap: handBuiltSnapshot(),
		want: map[string]map[string]string{
			// Capacity - 100Mi default eviction - 1536Mi - 6Gi of hugepages:
			// no whole number of Ki, so the kubelet prints plain bytes.
			"empty config": {"cpu": "16", "memory": "125992698368", "hugepages-2Mi": "1536Mi", "hugepages-1Gi": "6Gi"},
			// No eviction at all: capacity - hugepages.
			"evictionHard 0%":   {"memory": "126097555968"},
			"evictionHard 100%": {"memory": "126097555968"},
			// reservedSystemCPUs "0": systemReserved cpu = 1, kubeReserved cpu dropped.
			"reservedSystemCPUs overrides cpu reservations":  {"cpu": "15"},
			"reservedSystemCPUs replaces systemReserved cpu": {"cpu": "15"},
			"kubeReserved": {"cpu": "15900m"},
		},
	})

	// The same machine as a sysfs/procfs tree, read by both sides.
	tree16 := treeMachine{
		nodes:          [][]int{cpuset.New(0, 1, 2, 3, 4, 5, 6, 7).List(), cpuset.New(8, 9, 10, 11, 12, 13, 14, 15).List()},
		threadsPerCore: 2,
		nodeMemKiB:     []uint64{65503232, 65503232},
		memTotalKiB:    131006464,
		hugePages:      map[uint64]uint64{2048: 768, 1048576: 6},
	}
	ms = append(ms, treeCase(t, "tree 16 cpus 2 nodes", tree16, nil))

	ms = append(ms, treeCase(t, "tree 8 cpus cpu3 and cpu6 offline", treeMachine{
		nodes:          [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}},
		offline:        []int{3, 6},
		threadsPerCore: 1,
		nodeMemKiB:     []uint64{8126464, 8388608},
		memTotalKiB:    16515072,
		hugePages:      map[uint64]uint64{2048: 0, 1048576: 0},
	}, nil))

	// Hugepages take nearly all memory: allocatable memory clamps at 0
	// while the kubelet still starts (hugepages are not part of the
	// reservation the container manager checks).
	ms = append(ms, treeCase(t, "tree hugepages fill memory", treeMachine{
		nodes:          [][]int{{0, 1}},
		threadsPerCore: 1,
		nodeMemKiB:     []uint64{4194304},
		memTotalKiB:    4194304,
		hugePages:      map[uint64]uint64{2048: 1900},
	}, map[string]map[string]string{
		"empty config":                    {"memory": "196Mi"}, // 4096Mi - 100Mi - 3800Mi
		"kubeReserved":                    {"memory": "0", "cpu": "1900m"},
		"systemReserved and kubeReserved": {"memory": "0", "cpu": "1400m"},
	}))

	// Fixtures of the main module, if any.
	archives, _ := filepath.Glob("../../pkg/topology/testdata/fixtures/*.tar.gz")
	for _, a := range archives {
		name := "fixture " + strings.TrimSuffix(filepath.Base(a), ".tar.gz")
		root := t.TempDir()
		m := machineCase{name: name}
		if err := extractArchive(a, root); err != nil {
			t.Errorf("%s: %v", name, err)
			m.skip = "cannot extract " + a
		} else {
			m = rootCase(t, name, root)
		}
		ms = append(ms, m)
	}
	return ms
}

// treeCase writes tm as a tree and reads it with both sides.
func treeCase(t *testing.T, name string, tm treeMachine, want map[string]map[string]string) machineCase {
	t.Helper()
	root := t.TempDir()
	tm.write(t, root)
	m := rootCase(t, name, root)
	m.want = want
	return m
}

// rootCase reads the tree at root with cAdvisor's code and with hotplugd's.
func rootCase(t *testing.T, name, root string) machineCase {
	t.Helper()
	m := machineCase{name: name}
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	info, err := oracle.MachineInfoFromRoot(sys, proc)
	if err != nil {
		t.Errorf("%s: cAdvisor cannot read the tree: %v", name, err)
		m.skip = "cAdvisor cannot read the tree"
		return m
	}
	snap, err := topology.NewFS(sys, proc).Snapshot()
	if err != nil {
		t.Errorf("%s: hotplugd cannot read the tree: %v", name, err)
		m.skip = "hotplugd cannot read the tree"
		return m
	}
	m.info, m.snap = info, snap
	return m
}

// handBuiltInfo is a cAdvisor MachineInfo for two sockets of 4 cores x 2
// threads, one NUMA node each, with memory that is no whole number of Ki.
func handBuiltInfo() *oracle.MachineInfo {
	info := &oracle.MachineInfo{
		NumCores:         16,
		NumPhysicalCores: 8,
		NumSockets:       2,
		MemoryCapacity:   oddMemoryBytes,
		HugePages:        []oracle.HugePagesInfo{{PageSize: 1048576, NumPages: 6}, {PageSize: 2048, NumPages: 768}},
	}
	for node := 0; node < 2; node++ {
		n := oracle.Node{
			Id:        node,
			Memory:    oddMemoryBytes / 2,
			HugePages: []oracle.HugePagesInfo{{PageSize: 1048576, NumPages: 3}, {PageSize: 2048, NumPages: 384}},
		}
		for core := 0; core < 4; core++ {
			first := node*8 + core*2
			n.Cores = append(n.Cores, oracle.Core{Id: core, SocketID: node, Threads: []int{first, first + 1}})
		}
		info.Topology = append(info.Topology, n)
	}
	return info
}

// handBuiltSnapshot is hotplugd's view of handBuiltInfo's machine.
func handBuiltSnapshot() *topology.Snapshot {
	all := topology.CPUList{CPUSet: cpuset.New(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)}
	s := &topology.Snapshot{
		CPUs:                   topology.CPUs{Possible: all, Present: all, Online: all},
		Memory:                 topology.Memory{MemTotalBytes: oddMemoryBytes},
		HugePages:              []topology.HugePages{{PageSizeKiB: 2048, Pages: 768}, {PageSizeKiB: 1048576, Pages: 6}},
		DefaultHugePageSizeKiB: 2048,
	}
	for node := 0; node < 2; node++ {
		var ids []int
		for i := 0; i < 8; i++ {
			id := node*8 + i
			ids = append(ids, id)
			s.CPUs.List = append(s.CPUs.List, topology.CPU{ID: id, Online: true, Package: node, Die: 0, Core: i / 2, Node: node})
		}
		s.NUMANodes = append(s.NUMANodes, topology.NUMANode{
			ID:            node,
			CPUs:          topology.CPUList{CPUSet: cpuset.New(ids...)},
			MemTotalBytes: oddMemoryBytes / 2,
			HugePages:     []topology.HugePages{{PageSizeKiB: 2048, Pages: 384}, {PageSizeKiB: 1048576, Pages: 3}},
		})
	}
	return s
}
