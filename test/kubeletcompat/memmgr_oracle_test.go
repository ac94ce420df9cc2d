package kubeletcompat_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
)

// memTestTime stamps hotplugd's backups.
var memTestTime = time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)

const (
	memPodA = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	memPodB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
	memPodC = "c0ffee00-1111-4222-8333-444455556666"
	memPodP = "d00dfeed-2222-4333-8444-555566667777"
)

// memVectorMachine is the machine of the golden files' Static rows: one
// NUMA node, 4 CPUs, memGiB of memory, 512 x 2Mi hugepages.
func memVectorMachine(t *testing.T, memGiB uint64) memMachine {
	return newMemMachine(t, 4, []int{2048}, memNode{memGiB: memGiB, hugepages: map[int]int{2048: 512}})
}

// memVectorKubelet is the golden files' kubelet: reservedMemory 1Gi on
// node 0, node allocatable memory reservation 1Gi (924Mi systemReserved and
// the default 100Mi hard eviction threshold).
func memVectorKubelet(policy string) memKubelet {
	k := memKubelet{policy: policy, systemReserved: "924Mi"}
	if policy == memmgr.PolicyStatic {
		k.reserved = map[int]string{0: "1Gi"}
	}
	return k
}

// hotplugdMemVerdict is hotplugd's verdict on the state file b for the
// kubelet k on machine m, the file living in dir: what hotplugd says the
// kubelet says ("" for a start).
func hotplugdMemVerdict(t *testing.T, m memMachine, k memKubelet, dir string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, memStateFile)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := memmgr.ReadFile(p)
	if err == nil {
		err = memmgr.Validate(s, m.snap, k.hotplugdConfig(t, m, dir))
	}
	return memKubeletMessage(t, err)
}

// memKubeletVerdict is the kubelet's verdict on b: its memory manager
// started on m with b as its state file in dir.
func memKubeletVerdict(t *testing.T, m memMachine, k memKubelet, dir string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, memStateFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return memErrText(k.start(t, m, dir))
}

func readMemVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../pkg/memmgr/testdata", name+".memory_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMemoryManagerVectorsMatchKubelet: for every golden file and machine of
// the vectors' README, hotplugd's verdict is the kubelet's, word for word.
func TestMemoryManagerVectorsMatchKubelet(t *testing.T) {
	m04 := readMemVector(t, "m04-static-1-entry")
	m04bad := bytes.Replace(m04, []byte(`"checksum":631627110`), []byte(`"checksum":12345`), 1)
	for _, tc := range []struct {
		name    string
		file    []byte
		policy  string
		memGiB  uint64
		wantErr string // substring of the kubelet's error; "" for a start
	}{
		{"m01 None", readMemVector(t, "m01-none-firststart"), memmgr.PolicyNone, 8, ""},
		{"m01 under Static", readMemVector(t, "m01-none-firststart"), memmgr.PolicyStatic, 8, `configured policy "Static" differs from state checkpoint policy "None"`},
		{"m02 8Gi", readMemVector(t, "m02-static-1numa-8Gi-hp2Mi"), memmgr.PolicyStatic, 8, ""},
		{"m02 16Gi", readMemVector(t, "m02-static-1numa-8Gi-hp2Mi"), memmgr.PolicyStatic, 16, "[memorymanager] the expected machine state is different from the real one"},
		{"m02 under None", readMemVector(t, "m02-static-1numa-8Gi-hp2Mi"), memmgr.PolicyNone, 8, `configured policy "None" differs from state checkpoint policy "Static"`},
		{"m04 8Gi", m04, memmgr.PolicyStatic, 8, ""},
		{"m04 4Gi", m04, memmgr.PolicyStatic, 4, "[memorymanager] the expected machine state is different from the real one"},
		{"m04 checksum 12345", m04bad, memmgr.PolicyStatic, 8, "checkpoint is corrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := memVectorKubelet(tc.policy)
			k.setGates(t)
			m := memVectorMachine(t, tc.memGiB)
			dir := t.TempDir()
			got := hotplugdMemVerdict(t, m, k, dir, tc.file)
			want := memKubeletVerdict(t, m, k, dir, tc.file)
			if !strings.Contains(want, tc.wantErr) || (tc.wantErr == "") != (want == "") {
				t.Fatalf("the kubelet says %q, the README %q", want, tc.wantErr)
			}
			if got != want {
				t.Errorf("verdicts differ\nhotplugd: %s\nkubelet:  %s", got, want)
			}
		})
	}
}

// TestMemoryManagerFirstStart: on the vectors' machine the kubelet writes
// m02 on first start (m02 was saved with a newline the kubelet does not
// write), and hotplugd's New is the same bytes, for both layouts.
func TestMemoryManagerFirstStart(t *testing.T) {
	for _, tc := range []struct {
		policy   string
		podLevel bool
		vector   string
	}{
		{memmgr.PolicyStatic, false, "m02-static-1numa-8Gi-hp2Mi"},
		{memmgr.PolicyNone, false, "m01-none-firststart"},
		{memmgr.PolicyStatic, true, ""},
	} {
		k := memVectorKubelet(tc.policy)
		k.podLevel = tc.podLevel
		k.setGates(t)
		m := memVectorMachine(t, 8)
		dir := t.TempDir()
		if err := k.start(t, m, dir); err != nil {
			t.Fatal(err)
		}
		kubelet, err := os.ReadFile(filepath.Join(dir, memStateFile))
		if err != nil {
			t.Fatal(err)
		}
		s, err := memmgr.New(m.snap, k.hotplugdConfig(t, m, dir))
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, kubelet) {
			t.Errorf("%s gate %v: hotplugd New\n%s\nkubelet\n%s", tc.policy, tc.podLevel, got, kubelet)
		}
		// The vectors are V1 files; kubelet 1.37 writes V3 (its golden file
		// is checked in TestMemoryManagerV137Golden).
		if tc.vector != "" && hotplugdRelease(t).MemState != kubeletversion.MemStateV3 {
			if v := readMemVector(t, tc.vector); !bytes.Equal(bytes.TrimSuffix(v, []byte("\n")), kubelet) {
				t.Errorf("%s: the kubelet wrote\n%s\nthe vector is\n%s", tc.policy, kubelet, v)
			}
		}
	}
}

// memLoadInputs are state files for comparing the kubelet's checkpoint
// loader with hotplugd's Parse.
func memLoadInputs(t *testing.T) map[string][]byte {
	m01 := readMemVector(t, "m01-none-firststart")
	m04 := readMemVector(t, "m04-static-1-entry")
	none := func(s string) []byte { return []byte(s) }
	return map[string][]byte{
		"m01":                    m01,
		"m01 checksum 0":         bytes.Replace(m01, []byte("4236770233"), []byte("0"), 1),
		"m01 checksum off by 1":  bytes.Replace(m01, []byte("4236770233"), []byte("4236770234"), 1),
		"m04 (Static)":           m04,
		"empty":                  nil,
		"truncated":              m04[:len(m04)/2],
		"not JSON":               none("policyName: None\n"),
		"trailing garbage":       append(append([]byte{}, m01...), '}'),
		"null":                   none("null"),
		"empty object":           none("{}"),
		"policyName a number":    none(`{"policyName":5,"machineState":{},"checksum":0}`),
		"checksum a string":      none(`{"policyName":"None","machineState":{},"checksum":"0"}`),
		"checksum negative":      none(`{"policyName":"None","machineState":{},"checksum":-1}`),
		"machineState key":       none(`{"policyName":"None","machineState":{"x":null},"checksum":0}`),
		"total a string":         bytes.Replace(m04, []byte(`"total":8589934592`), []byte(`"total":"8Gi"`), 1),
		"size negative":          bytes.Replace(m04, []byte(`"size":1073741824`), []byte(`"size":-1`), 1),
		"entries null":           none(`{"policyName":"None","machineState":{},"entries":null,"checksum":0}`),
		"keys in capitals":       none(`{"POLICYNAME":"None","MachineState":{},"checksum":4236770233}`),
		"unknown field":          none(`{"policyName":"None","machineState":{},"future":1,"checksum":4236770233}`),
		"podEntries checksum 0":  none(`{"policyName":"None","machineState":{},"podEntries":{"p":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":1}]}},"checksum":0}`),
		"podEntries wrong type":  none(`{"policyName":"None","machineState":{},"podEntries":5,"checksum":4236770233}`),
		"1.37 data layout":       none(`{"data":"{}","dataChecksum":1,"policyName":"None","machineState":{},"checksum":0}`),
		"machineState node null": none(`{"policyName":"None","machineState":{"0":null},"checksum":0}`),
	}
}

// TestMemoryManagerLoadMatchesKubelet: the kubelet's checkpoint loader
// (state.NewCheckpointState for a None kubelet) and hotplugd agree on every
// input, with and without PodLevelResourceManagers, to the word.
func TestMemoryManagerLoadMatchesKubelet(t *testing.T) {
	inputs := memLoadInputs(t)
	for _, podLevel := range []bool{false, true} {
		k := memKubelet{policy: memmgr.PolicyNone, podLevel: podLevel}
		m := memVectorMachine(t, 8)
		for name, b := range inputs {
			t.Run(fmt.Sprintf("%s gate %v", name, podLevel), func(t *testing.T) {
				k.setGates(t)
				dir := t.TempDir()
				want := memKubeletVerdict(t, m, k, dir, b)
				got := hotplugdMemVerdict(t, m, k, dir, b)
				if got != want {
					t.Errorf("gate %v: verdicts differ\nhotplugd: %s\nkubelet:  %s", podLevel, got, want)
				}
			})
		}
	}
}

// memRebuildCase is a topology change under a running Static memory
// manager: the kubelet admits pods on the old machine; the node comes back
// as the new machine (or with a new configuration).
type memRebuildCase struct {
	name     string
	old, new []memNode
	kubelet  memKubelet
	// after is the kubelet's configuration on the new machine, if changed.
	after     *memKubelet
	pods      []memPod
	allowDrop bool
	// drain lists the "pod/container" hotplugd must not carry over.
	drain []string
}

func memTwoNodes() []memNode {
	return []memNode{
		{memGiB: 8, hugepages: map[int]int{2048: 512}},
		{memGiB: 8, hugepages: map[int]int{2048: 512}},
	}
}

func memChanged(f func(n []memNode) []memNode) []memNode { return f(memTwoNodes()) }

func memRebuildCases() []memRebuildCase {
	static := memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: map[int]string{0: "1Gi"}}
	gated := static
	gated.podLevel = true
	pods := []memPod{
		{uid: memPodA, nodes: []int{0}, containers: []memContainer{{name: "app", memory: 2 * memGi, hugepages: 256 * memMi}, {name: "side", memory: 512 * memMi}}},
		{uid: memPodB, nodes: []int{1}, containers: []memContainer{{name: "db", memory: 3 * memGi}}},
	}
	podLevel := append(slices.Clone(pods), memPod{uid: memPodP, nodes: []int{0}, podMemory: 3 * memGi,
		containers: []memContainer{{name: "main", memory: memGi}, {name: "helper"}}})
	cross := []memPod{{uid: memPodC, nodes: []int{0, 1}, containers: []memContainer{{name: "big", memory: 10 * memGi}}}}
	return []memRebuildCase{
		{name: "unchanged", old: memTwoNodes(), new: memTwoNodes(), kubelet: static, pods: pods},
		{name: "memory grown on node 1", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[1].memGiB = 16; return n })},
		{name: "memory grown on both nodes", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[0].memGiB, n[1].memGiB = 12, 24; return n })},
		{name: "memory shrunk on node 0, assignments still fit", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[0].memGiB = 5; return n })},
		{name: "memory shrunk on node 1 below an assignment", old: memTwoNodes(), kubelet: static, pods: pods,
			new:   memChanged(func(n []memNode) []memNode { n[1].memGiB = 3; return n }),
			drain: []string{memPodB + "/db"}},
		{name: "memory shrunk on node 1 below an assignment, drop allowed", old: memTwoNodes(), kubelet: static, pods: pods,
			new:       memChanged(func(n []memNode) []memNode { n[1].memGiB = 3; return n }),
			allowDrop: true, drain: []string{memPodB + "/db"}},
		{name: "hugepages grown on node 0", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[0].hugepages[2048] = 1024; return n })},
		{name: "hugepages shrunk on node 0 below an assignment", old: memTwoNodes(), kubelet: static, pods: pods,
			new:   memChanged(func(n []memNode) []memNode { n[0].hugepages[2048] = 64; return n }),
			drain: []string{memPodA + "/app"}},
		{name: "hugepages shrunk on node 0 below an assignment, drop allowed", old: memTwoNodes(), kubelet: static, pods: pods,
			new:       memChanged(func(n []memNode) []memNode { n[0].hugepages[2048] = 64; return n }),
			allowDrop: true, drain: []string{memPodA + "/app"}},
		{name: "hugepages removed from node 1", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[1].hugepages[2048] = 0; return n })},
		{name: "1Gi hugepages added on node 1", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[1].hugepages[1048576] = 2; return n })},
		{name: "hugepages moved from node 1 to node 0", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[0].hugepages[2048], n[1].hugepages[2048] = 1024, 0; return n })},
		{name: "node 1 gone", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memTwoNodes()[:1], drain: []string{memPodB + "/db"}},
		{name: "node 1 gone, drop allowed", old: memTwoNodes(), kubelet: static, pods: pods,
			new: memTwoNodes()[:1], allowDrop: true, drain: []string{memPodB + "/db"}},
		{name: "node 2 added", old: memTwoNodes(), kubelet: static, pods: pods,
			new: append(memTwoNodes(), memNode{memGiB: 4, hugepages: map[int]int{2048: 128}})},
		{name: "reservedMemory moved to node 1", old: memTwoNodes(), new: memTwoNodes(), kubelet: static, pods: pods,
			after: &memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: map[int]string{1: "1Gi"}}},
		{name: "cross-NUMA assignment, memory grown on node 0", old: memTwoNodes(), kubelet: static, pods: cross,
			new: memChanged(func(n []memNode) []memNode { n[0].memGiB = 16; return n })},
		{name: "cross-NUMA assignment, memory shrunk below it", old: memTwoNodes(), kubelet: static, pods: cross,
			new: memChanged(func(n []memNode) []memNode { n[1].memGiB = 4; return n }), drain: []string{memPodC + "/big"}},
		{name: "PodLevelResourceManagers, memory grown on node 1", old: memTwoNodes(), kubelet: gated, pods: pods,
			new: memChanged(func(n []memNode) []memNode { n[1].memGiB = 16; return n })},
		{name: "PodLevelResourceManagers, hugepages shrunk on node 0 below an assignment, drop allowed", old: memTwoNodes(), kubelet: gated, pods: pods,
			new:       memChanged(func(n []memNode) []memNode { n[0].hugepages[2048] = 64; return n }),
			allowDrop: true, drain: []string{memPodA + "/app"}},
		{name: "PodLevelResourceManagers turned off", old: memTwoNodes(), new: memTwoNodes(), kubelet: gated, pods: pods, after: &static},
		{name: "pod-level pod, memory grown on node 0", old: memTwoNodes(), kubelet: gated, pods: podLevel,
			new: memChanged(func(n []memNode) []memNode { n[0].memGiB = 16; return n })},
		{name: "pod-level pod, memory shrunk on node 0 below it", old: memTwoNodes(), kubelet: gated, pods: podLevel,
			new: memChanged(func(n []memNode) []memNode { n[0].memGiB = 6; return n }), drain: []string{memPodP + "/"}},
		{name: "pod-level pod, PodLevelResourceManagers turned off", old: memTwoNodes(), new: memTwoNodes(), kubelet: gated, pods: podLevel, after: &static,
			drain: []string{memPodP + "/"}},
		{name: "pod-level pod, PodLevelResourceManagers turned off, drop allowed", old: memTwoNodes(), new: memTwoNodes(), kubelet: gated, pods: podLevel, after: &static,
			allowDrop: true, drain: []string{memPodP + "/"}},
		{name: "PodLevelResourceManagers turned on, memory grown on node 0", old: memTwoNodes(), kubelet: static, pods: pods,
			new:   memChanged(func(n []memNode) []memNode { n[0].memGiB = 16; return n }),
			after: &gated},
	}
}

// TestMemoryManagerRebuildMatchesKubelet runs each topology change through
// the kubelet's memory manager and hotplugd:
//   - the kubelet writes its state on the old machine; hotplugd reads it
//     back byte for byte and finds it valid there;
//   - on the new machine hotplugd's verdict on that file is the kubelet's;
//   - hotplugd's plan keeps what still fits; a file it writes is accepted by
//     the kubelet's memory manager Start on the new machine (which leaves it
//     as it is), is byte for byte what the kubelet's state code writes for
//     that state, and is what a kubelet that admitted the kept pods on the
//     new machine writes (up to the order of a container's blocks, which
//     the kubelet takes from a map);
//   - a plan hotplugd refuses to apply (needs a drain) is for a file the
//     kubelet refuses too.
func TestMemoryManagerRebuildMatchesKubelet(t *testing.T) {
	for _, tc := range memRebuildCases() {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.kubelet
			k.setGates(t)
			oldM := newMemMachine(t, 2, []int{2048, 1048576}, tc.old...)
			oldBytes := k.allocate(t, oldM, tc.pods)

			// The kubelet's own file, read and written back by hotplugd.
			old, err := memmgr.Parse(oldBytes)
			if err != nil {
				t.Fatalf("hotplugd refuses the kubelet's file: %v\n%s", err, oldBytes)
			}
			if again, err := old.Marshal(); err != nil || !bytes.Equal(again, oldBytes) {
				t.Fatalf("round trip: %v\n got %s\nwant %s", err, again, oldBytes)
			}
			if err := memmgr.Validate(old, oldM.snap, k.hotplugdConfig(t, oldM, t.TempDir())); err != nil {
				t.Fatalf("hotplugd: the kubelet's file is invalid on its own machine: %v", err)
			}

			after := k
			if tc.after != nil {
				after = *tc.after
				after.setGates(t)
			}
			newM := newMemMachine(t, 2, []int{2048, 1048576}, tc.new...)
			dir := t.TempDir()
			kubeletSays := memKubeletVerdict(t, newM, after, dir, oldBytes)
			if got := hotplugdMemVerdict(t, newM, after, dir, oldBytes); got != kubeletSays {
				t.Errorf("verdicts on the old file differ\nhotplugd: %s\nkubelet:  %s", got, kubeletSays)
			}

			cfg := after.hotplugdConfig(t, newM, dir)
			cfg.AllowDrop = tc.allowDrop
			plan, err := memmgr.PlanRebuild(old, newM.snap, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubelet: %q\n%s", kubeletSays, plan)
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
			case plan.Blocked():
				if kubeletSays == "" {
					t.Errorf("hotplugd wants a drain for a file the kubelet accepts")
				}
				if _, err := plan.Write(memTestTime); !errors.Is(err, memmgr.ErrNeedsDrain) {
					t.Errorf("blocked plan written: %v", err)
				}
				return
			}
			if kubeletSays == "" {
				t.Errorf("hotplugd rewrites a file the kubelet accepts")
			}

			// Apply the plan and start the kubelet on it.
			if err := os.WriteFile(filepath.Join(dir, memStateFile), oldBytes, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := plan.Write(memTestTime); err != nil {
				t.Fatal(err)
			}
			newBytes, err := os.ReadFile(filepath.Join(dir, memStateFile))
			if err != nil {
				t.Fatal(err)
			}
			afterStart, err := after.startWith(t, newM, newBytes)
			if err != nil {
				t.Fatalf("the kubelet refuses hotplugd's file: %v\n%s", err, newBytes)
			}
			if !bytes.Equal(afterStart, newBytes) {
				t.Errorf("the kubelet rewrote hotplugd's file at start:\n%s\n%s", newBytes, afterStart)
			}
			stored, err := memLoadAndStore(t, after.policy, newBytes)
			if err != nil {
				t.Fatalf("the kubelet's checkpoint code refuses hotplugd's file: %v", err)
			}
			if !bytes.Equal(stored, newBytes) {
				t.Errorf("the kubelet writes this state as\n%s\nhotplugd wrote\n%s", stored, newBytes)
			}
			if built := memKubeletWrites(t, plan.New); !bytes.Equal(built, newBytes) {
				t.Errorf("the kubelet's state code builds\n%s\nhotplugd wrote\n%s", built, newBytes)
			}

			// A kubelet that admitted the kept pods on the new machine.
			var kept []memPod
			for _, p := range tc.pods {
				if !slices.ContainsFunc(plan.Kept, func(a memmgr.Assignment) bool { return a.PodUID == p.uid }) {
					continue
				}
				if slices.Contains(tc.drain, p.uid+"/") {
					continue
				}
				kp := p
				kp.containers = nil
				for _, c := range p.containers {
					if p.podMemory > 0 || !slices.Contains(tc.drain, p.uid+"/"+c.name) {
						kp.containers = append(kp.containers, c)
					}
				}
				kept = append(kept, kp)
			}
			fresh := after.allocate(t, newM, kept)
			if got, want := memNormalized(t, newBytes), memNormalized(t, fresh); got != want {
				t.Errorf("hotplugd's rebuild\n%s\na kubelet admitting the kept pods on the new machine\n%s", got, want)
			}
		})
	}
}
