package memmgr

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

const (
	gi = uint64(1) << 30
	mi = uint64(1) << 20

	podA = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	podB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
)

// node describes one NUMA node of a test machine: memory in bytes and
// hugepages by page size in KiB.
type node struct {
	mem       uint64
	hugepages map[uint64]uint64
}

// snap builds a snapshot with NUMA nodes 0..n-1.
func snap(nodes ...node) *topology.Snapshot {
	s := &topology.Snapshot{}
	for id, n := range nodes {
		tn := topology.NUMANode{ID: id, MemTotalBytes: n.mem, HugePages: []topology.HugePages{}}
		for _, size := range slices.Sorted(maps.Keys(n.hugepages)) {
			tn.HugePages = append(tn.HugePages, topology.HugePages{PageSizeKiB: size, Pages: n.hugepages[size]})
		}
		s.NUMANodes = append(s.NUMANodes, tn)
		s.Memory.MemTotalBytes += n.mem
	}
	return s
}

// staticCfg is a Static configuration reserving memory bytes on each listed
// node, with a node allocatable reservation to match.
func staticCfg(perNode map[int]uint64) Config {
	cfg := Config{Policy: PolicyStatic, NodeAllocatableReservation: v1.ResourceList{}}
	var total int64
	for _, id := range sortedKeys(perNode) {
		cfg.ReservedMemory = append(cfg.ReservedMemory, kubeletv1beta1.MemoryReservation{
			NumaNode: int32(id),
			Limits:   v1.ResourceList{v1.ResourceMemory: *resource.NewQuantity(int64(perNode[id]), resource.BinarySI)},
		})
		total += int64(perNode[id])
	}
	cfg.NodeAllocatableReservation[v1.ResourceMemory] = *resource.NewQuantity(total, resource.BinarySI)
	return cfg
}

// vectorMachine is the machine of the golden files' Static rows: one NUMA
// node, 4 CPUs, memGiB of memory, 512 x 2Mi hugepages, written as a sysfs
// tree and read back with the topology package, as preflight does.
func vectorMachine(t *testing.T, memGiB uint64) *topology.Snapshot {
	t.Helper()
	m := fixturegen.OneNode(4, memGiB<<20, 512)
	dir := t.TempDir()
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewFS(filepath.Join(dir, "sys"), filepath.Join(dir, "proc")).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// vectorConfig is the golden files' kubelet configuration: reservedMemory
// 1Gi on node 0, and 1Gi of node allocatable memory reservation (924Mi
// systemReserved plus the default 100Mi hard eviction threshold).
func vectorConfig(t *testing.T, policy string, s *topology.Snapshot) Config {
	t.Helper()
	kc, err := kubeletconfig.Parse([]byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
memoryManagerPolicy: ` + policy + `
systemReserved:
  memory: 924Mi
reservedMemory:
- numaNode: 0
  limits:
    memory: 1Gi
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := NewConfig(kc, s, "", kubeletversion.ByMinor(36))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// allocate adds an assignment to s as the kubelet's Static policy does when
// it admits a container: the blocks go into the entries and are accounted
// in the machine state.
func allocate(t *testing.T, s *State, pod, container string, blocks ...state.Block) {
	t.Helper()
	u := unit{PodUID: pod, Container: container, Blocks: blocks}
	if ok, why := fits(s.MachineState, u); !ok {
		t.Fatalf("allocate %s: %s", u, why)
	}
	if err := replay(s.MachineState, u); err != nil {
		t.Fatal(err)
	}
	if s.Entries[pod] == nil {
		s.Entries[pod] = map[string][]state.Block{}
	}
	s.Entries[pod][container] = blocks
}

func memBlock(size uint64, nodes ...int) state.Block {
	return state.Block{NUMAAffinity: nodes, Type: v1.ResourceMemory, Size: size}
}

func hpBlock(size uint64, nodes ...int) state.Block {
	return state.Block{NUMAAffinity: nodes, Type: "hugepages-2Mi", Size: size}
}

// reparse writes s and reads it back, as a file the kubelet wrote.
func reparse(t *testing.T, s *State) *State {
	t.Helper()
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
