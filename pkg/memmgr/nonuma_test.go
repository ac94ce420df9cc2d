package memmgr

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// noNUMA is a machine whose kernel has no NUMA nodes: sockets packages of
// 2 cores, 8Gi of memory and 64 x 2Mi hugepages, the listed CPUs offline.
func noNUMA(sockets int, offline ...int) fixturegen.Machine {
	return fixturegen.Machine{
		Sockets: sockets, CoresPerSocket: 2, ThreadsPerCore: 1,
		OfflineCPUs: offline, NoNUMA: true,
		Nodes:           []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 2*sockets-1), MemTotalKB: 8 << 20, HugePages: map[int]int{2048: 64}}},
		HugePageSizesKB: []int{2048},
	}
}

// unknownPackages makes the physical_package_id of m's online CPUs read
// -1, as on a PowerVM LPAR.
func unknownPackages(m fixturegen.Machine) fixturegen.Machine {
	for cpu := range m.NumCPUs() {
		if !slices.Contains(m.OfflineCPUs, cpu) {
			m.UnknownPackageIDs = append(m.UnknownPackageIDs, cpu)
		}
	}
	return m
}

// readMachine writes m as a sysfs tree and reads it back as preflight does.
func readMachine(t *testing.T, m fixturegen.Machine) *topology.Snapshot {
	t.Helper()
	dir := t.TempDir()
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewFS(filepath.Join(dir, "sys"), filepath.Join(dir, "proc")).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if len(s.NUMANodes) != 0 {
		t.Fatalf("the machine has NUMA nodes %v", s.NUMANodes)
	}
	return s
}

// noNUMAMachine is readMachine(noNUMA(sockets, offline...)).
func noNUMAMachine(t *testing.T, sockets int, offline ...int) *topology.Snapshot {
	t.Helper()
	return readMachine(t, noNUMA(sockets, offline...))
}

// noNUMAConfig is a Static kubelet with reservedMemory reserved (memory
// by node, adding up to 1Gi), 924Mi systemReserved and the default 100Mi
// hard eviction threshold.
func noNUMAConfig(t *testing.T, s *topology.Snapshot, reserved map[int]string) Config {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: Static\nsystemReserved:\n  memory: 924Mi\nreservedMemory:\n")
	for _, id := range sortedKeys(reserved) {
		fmt.Fprintf(&b, "- numaNode: %d\n  limits:\n    memory: %s\n", id, reserved[id])
	}
	kc, err := kubeletconfig.Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := NewConfig(kc, s, "", kubeletversion.ByMinor(36))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// memoryless is a node of a machine without NUMA nodes as the kubelet's
// Static policy accounts it: no memory, so allocatable and free are 0
// minus the reservation in unsigned arithmetic, and no hugepages.
func memoryless(id int, reserved uint64) *state.NUMANodeState {
	return &state.NUMANodeState{
		Cells: []int{id},
		MemoryMap: map[v1.ResourceName]*state.MemoryTable{
			v1.ResourceMemory: {SystemReserved: reserved, Allocatable: -reserved, Free: -reserved},
		},
	}
}

// TestNoNUMAMachineState: on a kernel without NUMA nodes the kubelet
// (cAdvisor's getCPUTopology) has one memoryless node per CPU package, and
// its Static policy starts there with that accounting. Kubelet v1.36.3's
// own code gives the same in test/kubeletcompat
// (TestMemoryManagerParityNoNUMAFirstStart).
func TestNoNUMAMachineState(t *testing.T) {
	for _, tc := range []struct {
		name     string
		machine  fixturegen.Machine
		reserved map[int]string
		want     state.NUMANodeMap
		wantErr  string // the kubelet's message
	}{
		{
			name: "one package", machine: noNUMA(1), reserved: map[int]string{0: "1Gi"},
			want: state.NUMANodeMap{0: memoryless(0, gi)},
		},
		{
			name: "two packages, reserved on the second", machine: noNUMA(2), reserved: map[int]string{1: "1Gi"},
			want: state.NUMANodeMap{0: memoryless(0, 0), 1: memoryless(1, gi)},
		},
		{
			name: "two packages, reserved on both", machine: noNUMA(2), reserved: map[int]string{0: "512Mi", 1: "512Mi"},
			want: state.NUMANodeMap{0: memoryless(0, 512*mi), 1: memoryless(1, 512*mi)},
		},
		{
			name: "an offline package is no node", machine: noNUMA(2, 2, 3), reserved: map[int]string{0: "1Gi"},
			want: state.NUMANodeMap{0: memoryless(0, gi)},
		},
		{
			name: "package ids unknown: node -1", machine: unknownPackages(noNUMA(2, 3)), reserved: map[int]string{-1: "1Gi"},
			want: state.NUMANodeMap{-1: memoryless(-1, gi)},
		},
		{
			name: "package ids unknown, reserved on node 0", machine: unknownPackages(noNUMA(1)), reserved: map[int]string{0: "1Gi"},
			wantErr: "the reserved memory configuration references a NUMA node 0 that does not exist on this machine",
		},
		{
			name: "reserved on an offline package", machine: noNUMA(2, 2, 3), reserved: map[int]string{1: "1Gi"},
			wantErr: "the reserved memory configuration references a NUMA node 1 that does not exist on this machine",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := readMachine(t, tc.machine)
			cfg := noNUMAConfig(t, s, tc.reserved)
			got, err := New(s, cfg)
			if msg := kubeletMessage(t, err); msg != tc.wantErr {
				t.Fatalf("New: the kubelet would say %q, want %q (%v)", msg, tc.wantErr, err)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got.MachineState); diff != "" {
				t.Errorf("unexpected machine state (-want +got):\n%s", diff)
			}
			// The kubelet accepts the state it wrote, and hotplugd
			// leaves it alone.
			if err := Validate(reparse(t, got), s, cfg); err != nil {
				t.Errorf("Validate: %v", err)
			}
			p, err := PlanRebuild(reparse(t, got), s, cfg)
			if err != nil {
				t.Fatalf("PlanRebuild: %v", err)
			}
			if p.Changed {
				t.Errorf("PlanRebuild changes the kubelet's own state: %v", p.Changes)
			}
		})
	}
}

// TestNoNUMAPackageChanges: a CPU package coming online or going offline
// adds or removes a node the kubelet accounts; hotplugd rebuilds the
// machine state as the kubelet would, keeping the assignments that still
// fit and draining those on a node that is gone (as the kubelet does in
// test/kubeletcompat TestMemoryManagerParityNoNUMARebuild).
func TestNoNUMAPackageChanges(t *testing.T) {
	cfg := noNUMAConfig(t, noNUMAMachine(t, 2), map[int]string{0: "1Gi"})
	// Only node 0 has memory to give: the kubelet's accounting of a
	// memoryless node is 0 minus its reservation, and node 1 reserves
	// nothing. (A node holds single-node or cross-node assignments, never
	// both.)
	app := memBlock(2*gi, 0)
	db := memBlock(gi, 0, 1)
	for _, tc := range []struct {
		name            string
		before, after   []int // offline CPUs
		blocks          map[string]state.Block
		wantValidateErr string
		wantDrain       []string
		want            state.NUMANodeMap
	}{
		{
			name: "package 1 comes online", before: []int{2, 3}, after: nil,
			blocks:          map[string]state.Block{"app": app},
			wantValidateErr: "[memorymanager] the expected machine state is different from the real one",
			want: state.NUMANodeMap{
				0: withReserved(memoryless(0, gi), 1, 2*gi),
				1: memoryless(1, 0),
			},
		},
		{
			name: "package 1 goes offline, an assignment on package 0 kept", before: nil, after: []int{2, 3},
			blocks:          map[string]state.Block{"app": app},
			wantValidateErr: "[memorymanager] the expected machine state is different from the real one",
			want:            state.NUMANodeMap{0: withReserved(memoryless(0, gi), 1, 2*gi)},
		},
		{
			name: "package 1 goes offline under an assignment across both", before: nil, after: []int{2, 3},
			blocks:          map[string]state.Block{"db": db},
			wantValidateErr: "[memorymanager] (pod: " + podA + ", container: db) the memory assignment uses the NUMA that does not exist",
			wantDrain:       []string{podA + "/db"},
			want:            state.NUMANodeMap{0: memoryless(0, gi)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(noNUMAMachine(t, 2, tc.before...), cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range sortedKeys(tc.blocks) {
				allocate(t, s, podA, name, tc.blocks[name])
			}
			s = reparse(t, s)
			after := noNUMAMachine(t, 2, tc.after...)
			if msg := kubeletMessage(t, Validate(s, after, cfg)); msg != tc.wantValidateErr {
				t.Errorf("Validate: the kubelet would say %q, want %q", msg, tc.wantValidateErr)
			}
			p, err := PlanRebuild(s, after, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var drain []string
			for _, a := range p.NeedsDrain {
				drain = append(drain, a.PodUID+"/"+a.Container)
			}
			if diff := cmp.Diff(tc.wantDrain, drain); diff != "" {
				t.Errorf("unexpected drain (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, p.New.MachineState); diff != "" {
				t.Errorf("unexpected rebuilt machine state (-want +got):\n%s", diff)
			}
		})
	}
}

// withReserved accounts n assignments taking size of memory on ns.
func withReserved(ns *state.NUMANodeState, n int, size uint64) *state.NUMANodeState {
	ns.NumberOfAssignments = n
	mt := ns.MemoryMap[v1.ResourceMemory]
	mt.Reserved += size
	mt.Free -= size
	return ns
}

// kubeletMessage is what hotplugd says the kubelet says, "" for nil.
func kubeletMessage(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var ke *KubeletError
	if !errors.As(err, &ke) {
		t.Fatalf("%v is no *KubeletError", err)
	}
	return ke.Kubelet
}
