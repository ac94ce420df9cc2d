package kubeletcompat_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
)

// noNUMAMem is a machine whose kernel has no NUMA nodes (no
// /sys/devices/system/node): sockets packages of 2 CPUs, the listed CPUs
// offline, 8Gi of memory and 256 x 2Mi hugepages.
func noNUMAMem(sockets int, offline ...int) fixturegen.Machine {
	return fixturegen.Machine{
		Sockets: sockets, CoresPerSocket: 2, ThreadsPerCore: 1,
		OfflineCPUs: offline, NoNUMA: true,
		Nodes:           []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 2*sockets-1), MemTotalKB: 8 << 20, HugePages: map[int]int{2048: 256}}},
		HugePageSizesKB: []int{2048},
	}
}

// withUnknownPackages makes the physical_package_id of the listed CPUs of
// m read -1, as on a PowerVM LPAR.
func withUnknownPackages(m fixturegen.Machine, cpus ...int) fixturegen.Machine {
	m.UnknownPackageIDs = cpus
	return m
}

// readMemMachine reads m with cAdvisor's code (which, without NUMA nodes,
// makes one node per CPU package) and with hotplugd's.
func readMemMachine(t *testing.T, m fixturegen.Machine) memMachine {
	t.Helper()
	info, snap := readTree(t, m)
	return memMachine{info: info, snap: snap}
}

// TestMemoryManagerParityNoNUMAFirstStart: on machines without NUMA nodes
// the kubelet's Static memory manager (NewManager with cAdvisor's machine
// info, then Start without a state file) and hotplugd's New agree: the
// same refusal, word for word, or the same state file, byte for byte, which
// hotplugd then finds valid.
func TestMemoryManagerParityNoNUMAFirstStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		machine  fixturegen.Machine
		reserved map[int]string
		wantErr  bool
	}{
		{name: "one package", machine: noNUMAMem(1), reserved: map[int]string{0: "1Gi"}},
		{name: "two packages, reserved on package 1", machine: noNUMAMem(2), reserved: map[int]string{1: "1Gi"}},
		{name: "two packages, reserved on both", machine: noNUMAMem(2), reserved: map[int]string{0: "512Mi", 1: "512Mi"}},
		{name: "package 1 offline", machine: noNUMAMem(2, 2, 3), reserved: map[int]string{0: "1Gi"}},
		{name: "reserved on an offline package", machine: noNUMAMem(2, 2, 3), reserved: map[int]string{1: "1Gi"}, wantErr: true},
		{name: "reserved on a package that does not exist", machine: noNUMAMem(2), reserved: map[int]string{2: "1Gi"}, wantErr: true},
		{name: "reservation below node allocatable", machine: noNUMAMem(1), reserved: map[int]string{0: "512Mi"}, wantErr: true},
		{name: "package ids unknown: node -1", machine: withUnknownPackages(noNUMAMem(2, 3), 0, 1, 2),
			reserved: map[int]string{-1: "1Gi"}},
		{name: "package ids unknown, reserved on node 0", machine: withUnknownPackages(noNUMAMem(1), 0, 1),
			reserved: map[int]string{0: "1Gi"}, wantErr: true},
		{name: "package 1's ids unknown: nodes -1 and 0", machine: withUnknownPackages(noNUMAMem(2), 2, 3),
			reserved: map[int]string{-1: "512Mi", 0: "512Mi"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := readMemMachine(t, tc.machine)
			k := memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: tc.reserved}
			k.setGates(t)
			dir := t.TempDir()
			kubeletErr := k.start(t, m, dir)
			if (kubeletErr != nil) != tc.wantErr {
				t.Fatalf("the kubelet says %v", kubeletErr)
			}
			s, err := memmgr.New(m.snap, k.hotplugdConfig(t, m, dir))
			if got, want := memKubeletMessage(t, err), memErrText(kubeletErr); got != want {
				t.Fatalf("verdicts differ\nhotplugd: %s\nkubelet:  %s", got, want)
			}
			if err != nil {
				return
			}
			kubelet, err := os.ReadFile(filepath.Join(dir, memStateFile))
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(kubelet), string(got)); diff != "" {
				t.Errorf("unexpected state file from New (-kubelet +hotplugd):\n%s", diff)
			}
			if v := hotplugdMemVerdict(t, m, k, t.TempDir(), kubelet); v != "" {
				t.Errorf("hotplugd refuses the kubelet's own file: %s", v)
			}
		})
	}
}

// TestMemoryManagerParityNoNUMARebuild: the kubelet admits pods on a
// machine without NUMA nodes, then a CPU package comes online or goes
// offline, adding or removing one of its nodes. On the new machine
// hotplugd's verdict on the kubelet's file is the kubelet's; hotplugd's
// plan drains what the kubelet could not start with, and the kubelet's
// memory manager starts on the file the plan writes (dropping what does not
// fit, as the operator allowed) and leaves it as it is.
func TestMemoryManagerParityNoNUMARebuild(t *testing.T) {
	k := memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: map[int]string{0: "1Gi"}}
	// Only a node with reservedMemory has memory to give: the kubelet
	// accounts a memoryless node's allocatable as 0 minus its reservation.
	// (A node holds single-node or cross-node assignments, never both.)
	onNode0 := memPod{uid: memPodA, nodes: []int{0}, containers: []memContainer{{name: "app", memory: 2 * memGi}, {name: "side", memory: 512 * memMi}}}
	across := memPod{uid: memPodC, nodes: []int{0, 1}, containers: []memContainer{{name: "big", memory: 3 * memGi}}}
	for _, tc := range []struct {
		name                string
		oldOffline, offline []int
		kubelet             memKubelet
		pods                []memPod
		drain               []string
	}{
		{name: "package 1 comes online", oldOffline: []int{2, 3}, kubelet: k, pods: []memPod{onNode0}},
		{name: "package 1 goes offline, an assignment on package 0 kept", offline: []int{2, 3}, kubelet: k, pods: []memPod{onNode0}},
		{name: "package 1 goes offline under an assignment across both", offline: []int{2, 3}, kubelet: k, pods: []memPod{across},
			drain: []string{memPodC + "/big"}},
		{name: "package 1, holding reservedMemory, goes offline", offline: []int{2, 3},
			kubelet: memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: map[int]string{0: "512Mi", 1: "512Mi"}},
			pods:    []memPod{onNode0}},
		{name: "unchanged", kubelet: k, pods: []memPod{across}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.kubelet.setGates(t)
			oldBytes := tc.kubelet.allocate(t, readMemMachine(t, noNUMAMem(2, tc.oldOffline...)), tc.pods)
			old, err := memmgr.Parse(oldBytes)
			if err != nil {
				t.Fatalf("hotplugd refuses the kubelet's file: %v\n%s", err, oldBytes)
			}

			m := readMemMachine(t, noNUMAMem(2, tc.offline...))
			dir := t.TempDir()
			kubeletSays := memKubeletVerdict(t, m, tc.kubelet, dir, oldBytes)
			if got := hotplugdMemVerdict(t, m, tc.kubelet, dir, oldBytes); got != kubeletSays {
				t.Errorf("verdicts on the old file differ\nhotplugd: %s\nkubelet:  %s", got, kubeletSays)
			}

			cfg := tc.kubelet.hotplugdConfig(t, m, dir)
			cfg.AllowDrop = true
			plan, err := memmgr.PlanRebuild(old, m.snap, cfg)
			if errors.Is(err, memmgr.ErrConfig) {
				// The configuration itself is refused: no file helps.
				if kerr := tc.kubelet.start(t, m, t.TempDir()); memErrText(kerr) != memKubeletMessage(t, err) {
					t.Errorf("the configuration: hotplugd says %v, the kubelet %v", err, kerr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var notCarried []string
			for _, a := range append(slices.Clone(plan.NeedsDrain), plan.Dropped...) {
				notCarried = append(notCarried, a.PodUID+"/"+a.Container)
			}
			if !slices.Equal(notCarried, tc.drain) {
				t.Errorf("not carried over: %q, want %q", notCarried, tc.drain)
			}
			switch {
			case !plan.Changed:
				if kubeletSays != "" {
					t.Errorf("hotplugd keeps a file the kubelet refuses: %s", kubeletSays)
				}
				return
			case kubeletSays == "":
				t.Errorf("hotplugd rewrites a file the kubelet accepts")
			}
			b, err := plan.New.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			after, kerr := tc.kubelet.startWith(t, m, b)
			if kerr != nil {
				t.Fatalf("the kubelet refuses hotplugd's file: %v\n%s", kerr, b)
			}
			if diff := cmp.Diff(string(b), string(after)); diff != "" {
				t.Errorf("the kubelet rewrote hotplugd's file (-hotplugd +kubelet):\n%s", diff)
			}
		})
	}
}
