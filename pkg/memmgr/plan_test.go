package memmgr

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// twoNodes is the machine the plan tests start from: two NUMA nodes of
// 16Gi, each with 512 x 2Mi hugepages.
func twoNodes() []node {
	return []node{
		{mem: 16 * gi, hugepages: map[uint64]uint64{2048: 512}},
		{mem: 16 * gi, hugepages: map[uint64]uint64{2048: 512}},
	}
}

// baseState is a kubelet's state on twoNodes with 1Gi reserved on node 0:
// A/app has 4Gi of memory and 256Mi of hugepages on node 0, B/db 8Gi of
// memory on node 1.
func baseState(t *testing.T, cfg Config) *State {
	t.Helper()
	s, err := New(snap(twoNodes()...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, s, podA, "app", memBlock(4*gi, 0), hpBlock(256*mi, 0))
	allocate(t, s, podB, "db", memBlock(8*gi, 1))
	return reparse(t, s)
}

func TestPlanRebuild(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	appA := Assignment{PodUID: podA, Container: "app", Blocks: []state.Block{memBlock(4*gi, 0), hpBlock(256*mi, 0)}}
	dbB := Assignment{PodUID: podB, Container: "db", Blocks: []state.Block{memBlock(8*gi, 1)}}
	with := func(f func(n []node) []node) *topology.Snapshot { return snap(f(twoNodes())...) }

	for _, tc := range []struct {
		name      string
		machine   *topology.Snapshot
		cfg       *Config
		allowDrop bool
		changed   bool
		kept      []Assignment
		drain     []string // pod/container: reason substring
		dropped   []string
		changes   []string // substrings of Plan.Changes, in order
	}{
		{
			name: "unchanged", machine: snap(twoNodes()...),
			kept: []Assignment{appA, dbB},
		},
		{
			name: "memory grown on node 1",
			machine: with(func(n []node) []node {
				n[1].mem = 32 * gi
				return n
			}),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{"NUMA node 1 memory: total 16Gi -> 32Gi, allocatable 15Gi -> 31Gi, free 7Gi -> 23Gi"},
		},
		{
			name: "memory shrunk on node 0, assignments still fit",
			machine: with(func(n []node) []node {
				n[0].mem = 6 * gi
				return n
			}),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{"NUMA node 0 memory: total 16Gi -> 6Gi, allocatable 14Gi -> 4Gi, free 10Gi -> 0"},
		},
		{
			name: "memory shrunk on node 1 below an assignment",
			machine: with(func(n []node) []node {
				n[1].mem = 8 * gi
				return n
			}),
			changed: true, kept: []Assignment{appA},
			drain: []string{podB + "/db: needs 8Gi of memory on NUMA [1], only 7Gi is free there (allocatable 7Gi)"},
		},
		{
			name: "memory shrunk on node 1 below an assignment, drop allowed",
			machine: with(func(n []node) []node {
				n[1].mem = 8 * gi
				return n
			}),
			allowDrop: true,
			changed:   true, kept: []Assignment{appA},
			dropped: []string{podB + "/db: needs 8Gi"},
			changes: []string{"NUMA node 1: assignments 1 -> 0", "NUMA node 1 memory: total 16Gi -> 8Gi, allocatable 15Gi -> 7Gi, reserved 8Gi -> 0"},
		},
		{
			name: "hugepages grown on node 0",
			machine: with(func(n []node) []node {
				n[0].hugepages[2048] = 1024
				return n
			}),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{
				"NUMA node 0 memory: allocatable 14Gi -> 13Gi, free 10Gi -> 9Gi",
				"NUMA node 0 hugepages-2Mi: total 1Gi -> 2Gi, allocatable 1Gi -> 2Gi, free 768Mi -> 1792Mi",
			},
		},
		{
			name: "hugepages shrunk on node 0 below an assignment",
			machine: with(func(n []node) []node {
				n[0].hugepages[2048] = 64
				return n
			}),
			changed: true, kept: []Assignment{dbB},
			drain: []string{podA + "/app: needs 256Mi of hugepages-2Mi on NUMA [0], only 128Mi is free there"},
		},
		{
			name: "hugepages shrunk on node 1, no assignment there",
			machine: with(func(n []node) []node {
				n[1].hugepages[2048] = 0
				return n
			}),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{"NUMA node 1 memory: allocatable 15Gi -> 16Gi, free 7Gi -> 8Gi", "NUMA node 1 hugepages-2Mi: total 1Gi -> 0, allocatable 1Gi -> 0, free 1Gi -> 0"},
		},
		{
			name: "1Gi hugepage size appears on node 1",
			machine: with(func(n []node) []node {
				n[1].hugepages[1048576] = 2
				return n
			}),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{"NUMA node 1 memory: allocatable 15Gi -> 13Gi, free 7Gi -> 5Gi", "NUMA node 1 hugepages-1Gi: added (total 2Gi, allocatable 2Gi, free 2Gi)"},
		},
		{
			name: "2Mi hugepages gone from node 0 (size no longer supported)",
			machine: with(func(n []node) []node {
				n[0].hugepages = nil
				return n
			}),
			changed: true, kept: []Assignment{dbB},
			drain: []string{podA + "/app: NUMA node 0 no longer has hugepages-2Mi"},
		},
		{
			name:    "node 1 gone",
			machine: snap(twoNodes()[0]),
			changed: true, kept: []Assignment{appA},
			drain: []string{podB + "/db: NUMA node 1 no longer exists"},
		},
		{
			name:      "node 1 gone, drop allowed",
			machine:   snap(twoNodes()[0]),
			allowDrop: true,
			changed:   true, kept: []Assignment{appA},
			dropped: []string{podB + "/db: NUMA node 1 no longer exists"},
			changes: []string{"NUMA node 1: removed"},
		},
		{
			name:    "node 2 added",
			machine: snap(append(twoNodes(), node{mem: 8 * gi})...),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{"NUMA node 2: added (memory 8Gi)"},
		},
		{
			name:    "reservedMemory moved to node 1",
			machine: snap(twoNodes()...),
			cfg:     ptr(staticCfg(map[int]uint64{1: gi})),
			changed: true, kept: []Assignment{appA, dbB},
			changes: []string{
				"NUMA node 0 memory: systemReserved 1Gi -> 0, allocatable 14Gi -> 15Gi, free 10Gi -> 11Gi",
				"NUMA node 1 memory: systemReserved 0 -> 1Gi, allocatable 15Gi -> 14Gi, free 7Gi -> 6Gi",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := baseState(t, cfg)
			c := cfg
			if tc.cfg != nil {
				c = *tc.cfg
			}
			c.AllowDrop = tc.allowDrop
			wantValid := !tc.changed
			if err := Validate(old, tc.machine, c); (err == nil) != wantValid {
				t.Fatalf("Validate of the old state: %v, want valid %v", err, wantValid)
			}
			p, err := PlanRebuild(old, tc.machine, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", p)
			if p.Changed != tc.changed {
				t.Errorf("Changed %v, want %v", p.Changed, tc.changed)
			}
			if diff := cmp.Diff(tc.kept, p.Kept); diff != "" {
				t.Errorf("kept (-want +got):\n%s", diff)
			}
			checkAssignments(t, "needs drain", tc.drain, p.NeedsDrain)
			checkAssignments(t, "dropped", tc.dropped, p.Dropped)
			if p.Blocked() != (len(tc.drain) > 0) {
				t.Errorf("Blocked %v", p.Blocked())
			}
			for _, want := range tc.changes {
				if !slices.ContainsFunc(p.Changes, func(c string) bool { return strings.Contains(c, want) }) {
					t.Errorf("no change %q in %q", want, p.Changes)
				}
			}
			if !tc.changed {
				if p.New != nil {
					t.Errorf("an unchanged plan has a new state")
				}
				return
			}
			// What would be written verifies and is what the kubelet accepts.
			n := reparse(t, p.New)
			if err := Validate(n, tc.machine, c); err != nil {
				t.Errorf("the rebuilt state, read back: %v", err)
			}
			var kept []string
			for _, a := range p.Kept {
				kept = append(kept, a.PodUID+"/"+a.Container)
			}
			if got := entryNames(n); !slices.Equal(got, kept) {
				t.Errorf("entries %q, want the kept %q", got, kept)
			}
			// Rebuilding the rebuilt state changes nothing.
			again, err := PlanRebuild(n, tc.machine, c)
			if err != nil || again.Changed {
				t.Errorf("second plan: %v, changed %v", err, again != nil && again.Changed)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func entryNames(s *State) []string {
	var out []string
	for _, pod := range sortedKeys(s.Entries) {
		for _, c := range sortedKeys(s.Entries[pod]) {
			out = append(out, pod+"/"+c)
		}
	}
	return out
}

// checkAssignments compares assignments with "pod/container: reason"
// prefixes.
func checkAssignments(t *testing.T, what string, want []string, got []Assignment) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %q", what, got, want)
		return
	}
	for i, a := range got {
		if s := a.PodUID + "/" + a.Container + ": " + a.Reason; !strings.HasPrefix(s, want[i]) {
			t.Errorf("%s[%d] = %q, want prefix %q", what, i, s, want[i])
		}
	}
}

// TestPlanCrossNUMA: an assignment spanning nodes 0 and 1 is replayed the
// kubelet's way (node 0's free first, the rest from node 1) and kept when
// the machine grows.
func TestPlanCrossNUMA(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	s, err := New(snap(twoNodes()...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, s, podA, "big", memBlock(20*gi, 0, 1))
	old := reparse(t, s)
	if got := old.MachineState[0].MemoryMap[v1.ResourceMemory].Free; got != 0 {
		t.Fatalf("node 0 free %d after the cross-NUMA allocation", got)
	}
	grown := twoNodes()
	grown[0].mem = 32 * gi
	p, err := PlanRebuild(old, snap(grown...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Changed || p.Blocked() || len(p.Kept) != 1 {
		t.Fatalf("plan:\n%s", p)
	}
	n := p.New.MachineState
	if got := n[0].MemoryMap[v1.ResourceMemory]; got.Reserved != 20*gi || got.Free != 10*gi {
		t.Errorf("node 0 memory %+v, want all 20Gi reserved there", *got)
	}
	if !slices.Equal(n[0].Cells, []int{0, 1}) || !slices.Equal(n[1].Cells, []int{0, 1}) {
		t.Errorf("cells %v %v", n[0].Cells, n[1].Cells)
	}
	if n[0].NumberOfAssignments != 1 || n[1].NumberOfAssignments != 1 {
		t.Errorf("assignments %d %d", n[0].NumberOfAssignments, n[1].NumberOfAssignments)
	}

	// Shrunk below the pair's free memory: drain.
	shrunk := twoNodes()
	shrunk[1].mem = 6 * gi
	p, err = PlanRebuild(old, snap(shrunk...), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkAssignments(t, "needs drain", []string{podA + "/big: needs 20Gi of memory on NUMA [0,1], only 19Gi is free there"}, p.NeedsDrain)
}

// TestPlanRefuses: what no rebuild can fix is an error, not a plan.
func TestPlanRefuses(t *testing.T) {
	cfg := staticCfg(map[int]uint64{1: gi})
	old := baseState(t, cfg)
	for _, tc := range []struct {
		name    string
		machine *topology.Snapshot
		cfg     Config
		want    error
		kubelet string
	}{
		{"policy changed to None", snap(twoNodes()...), Config{Policy: PolicyNone}, ErrPolicy,
			`could not restore state from checkpoint: [memorymanager] configured policy "None" differs from state checkpoint policy "Static", please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`},
		{"reservedMemory on a node that is gone", snap(twoNodes()[0]), cfg, ErrConfig,
			"the reserved memory configuration references a NUMA node 1 that does not exist on this machine"},
		{"reservedMemory not matching node allocatable", snap(twoNodes()...), func() Config {
			c := cfg
			c.NodeAllocatableReservation = v1.ResourceList{v1.ResourceMemory: resource.MustParse("1124Mi")}
			return c
		}(), ErrConfig, `the total amount "1Gi" of type "memory" is not equal to the value "1124Mi" determined by Node Allocatable feature`},
		{"no reserved memory", snap(twoNodes()...), Config{Policy: PolicyStatic}, ErrConfig,
			"[memorymanager] you should specify the system reserved memory"},
		{"unknown policy", snap(twoNodes()...), Config{Policy: "static"}, ErrConfig, `unknown policy: "static"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PlanRebuild(old, tc.machine, tc.cfg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("plan %v, error %v; want %v", p, err, tc.want)
			}
			if verr := Validate(old, tc.machine, tc.cfg); !errors.Is(verr, tc.want) {
				t.Errorf("Validate: %v", verr)
			}
			var ke *KubeletError
			if !errors.As(err, &ke) || ke.Kubelet != tc.kubelet {
				t.Errorf("kubelet message %q, want %q", ke.Kubelet, tc.kubelet)
			}
		})
	}
}

// TestFormats: the podEntries layout (PodLevelResourceManagers) against
// kubelets with and without the gate.
func TestFormats(t *testing.T) {
	machine := snap(twoNodes()...)
	off := staticCfg(map[int]uint64{0: gi})
	on := off
	on.PodLevelResourceManagers = true

	v1State := baseState(t, off)
	v2 := v1State.Clone()
	v2.Format = FormatV2
	v2 = reparse(t, v2)
	if v2.Format != FormatV2 {
		t.Fatalf("format %s after reading a V2 file", v2.Format)
	}

	// A gate-on kubelet reads V1 files (it migrates them).
	if err := Validate(v1State, machine, on); err != nil {
		t.Errorf("V1 under the gate: %v", err)
	}
	// A gate-off kubelet calls V2 files corrupted; the plan rewrites them
	// as V1, keeping everything.
	if err := Validate(v2, machine, off); !errors.Is(err, ErrCorrupt) {
		t.Errorf("V2 without the gate: %v", err)
	}
	p, err := PlanRebuild(v2, machine, off)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Changed || p.New.Format != FormatV1 || len(p.Kept) != 2 || p.Blocked() {
		t.Errorf("plan:\n%s", p)
	}
	if !slices.Contains(p.Changes, "format V2 (podEntries) -> V1") {
		t.Errorf("changes %q", p.Changes)
	}

	// Pod-level blocks are replayed in place of the pod's containers.
	pl, err := New(machine, on)
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, pl, podA, "app", memBlock(gi, 0))
	allocate(t, pl, podA, "side", memBlock(gi, 0))
	pl.MachineState = defaultMachineState(machine, systemReserved{0: {v1.ResourceMemory: gi}})
	pod := unit{PodUID: podA, Blocks: []state.Block{memBlock(3*gi, 0)}}
	if err := replay(pl.MachineState, pod); err != nil {
		t.Fatal(err)
	}
	pl.PodEntries[podA] = state.PodEntry{MemoryBlocks: pod.Blocks}
	pl = reparse(t, pl)
	if err := Validate(pl, machine, on); err != nil {
		t.Fatalf("pod-level state under the gate: %v", err)
	}
	grown := twoNodes()
	grown[0].mem = 20 * gi
	p, err = PlanRebuild(pl, snap(grown...), on)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Changed || p.Blocked() || len(p.Kept) != 1 || p.Kept[0].Container != "" {
		t.Errorf("pod-level plan:\n%s", p)
	}
	if got := p.New.MachineState[0].MemoryMap[v1.ResourceMemory].Reserved; got != 3*gi {
		t.Errorf("reserved %d, want the pod's 3Gi", got)
	}
	if len(p.New.Entries[podA]) != 2 || len(p.New.PodEntries[podA].MemoryBlocks) != 1 {
		t.Errorf("entries %v pod entries %v", p.New.Entries, p.New.PodEntries)
	}
	// Without the gate, the pod-level assignment cannot be carried over.
	p, err = PlanRebuild(pl, snap(grown...), off)
	if err != nil {
		t.Fatal(err)
	}
	checkAssignments(t, "needs drain", []string{podA + "/: a pod-level assignment needs the PodLevelResourceManagers"}, p.NeedsDrain)
}

// TestChecksumZero: the kubelet accepts checksum 0 unchecked; so does
// Parse, and Marshal writes the real checksum.
func TestChecksumZero(t *testing.T) {
	b := bytes.Replace(readVector(t, "m04-static-1-entry"), []byte(`"checksum":631627110`), []byte(`"checksum":0`), 1)
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	snap := vectorMachine(t, 8)
	if err := Validate(s, snap, vectorConfig(t, PolicyStatic, snap)); err != nil {
		t.Fatal(err)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, kubeletBytes(readVector(t, "m04-static-1-entry"))) {
		t.Errorf("got %s", out)
	}
}

// TestEmptyMachineStateWithEntries: the kubelet refuses it; the plan
// rebuilds the accounting from the entries.
func TestEmptyMachineStateWithEntries(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	s := baseState(t, cfg)
	s.MachineState = state.NUMANodeMap{}
	s = reparse(t, s)
	machine := snap(twoNodes()...)
	err := Validate(s, machine, cfg)
	var ke *KubeletError
	if !errors.As(err, &ke) || ke.Kubelet != "[memorymanager] machine state can not be empty when it has memory assignments" {
		t.Fatalf("Validate: %v", err)
	}
	p, err := PlanRebuild(s, machine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := baseState(t, cfg); !cmp.Equal(p.New.MachineState, want.MachineState) {
		t.Errorf("rebuilt machine state (-want +got):\n%s", cmp.Diff(want.MachineState, p.New.MachineState))
	}
}

// TestPlanWrite: a blocked plan leaves the file alone; an allowed one
// replaces it after a backup, and the result validates.
func TestPlanWrite(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	dir := t.TempDir()
	cfg.Path = filepath.Join(dir, FileName)
	old := baseState(t, cfg)
	oldBytes, err := old.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg.Path, oldBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	machine := snap(twoNodes()[0])
	now := time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)

	read, err := ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanRebuild(read, machine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Write(now); !errors.Is(err, ErrNeedsDrain) {
		t.Fatalf("blocked write: %v", err)
	}
	if b, _ := os.ReadFile(cfg.Path); !bytes.Equal(b, oldBytes) {
		t.Fatal("a blocked plan changed the file")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("a blocked plan left %d files", len(entries))
	}

	cfg.AllowDrop = true
	p, err = PlanRebuild(read, machine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	backup, err := p.Write(now)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(backup); !bytes.Equal(b, oldBytes) {
		t.Errorf("backup %s does not hold the old file", backup)
	}
	n, err := ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(n, machine, cfg); err != nil {
		t.Errorf("written state: %v", err)
	}
	// An unchanged plan writes nothing.
	p, err = PlanRebuild(n, machine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := p.Write(now.Add(time.Second)); b != "" || err != nil {
		t.Errorf("unchanged plan wrote: %q %v", b, err)
	}
}

func TestPlanString(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	p, err := PlanRebuild(baseState(t, cfg), snap(twoNodes()[0]), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := p.String()
	for _, want := range []string{
		"/var/lib/kubelet/memory_manager_state: needs a drain before it can be rebuilt for this machine\n",
		"  because: memmgr: the kubelet would refuse to start: [memorymanager] (pod: " + podB + ", container: db) the memory assignment uses the NUMA that does not exist",
		"  change: NUMA node 1: removed\n",
		"  keep: pod " + podA + " container app: 4Gi of memory on NUMA [0], 256Mi of hugepages-2Mi on NUMA [0]\n",
		"  NEEDS DRAIN: pod " + podB + " container db: 8Gi of memory on NUMA [1]: NUMA node 1 no longer exists\n",
		"  not applied:",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan does not say %q:\n%s", want, got)
		}
	}
}

// TestPlanDescribe: Describe names the pods it is given, keeping their
// UIDs, in every line of the plan; Drains are what blocks it, or what it
// drops when allowed.
func TestPlanDescribe(t *testing.T) {
	cfg := staticCfg(map[int]uint64{0: gi})
	p, err := PlanRebuild(baseState(t, cfg), snap(twoNodes()[0]), cfg)
	if err != nil {
		t.Fatal(err)
	}
	wantDrains := []kubeletstate.Drain{{PodUID: podB, What: "container db: 8Gi of memory on NUMA [1]", Reason: "NUMA node 1 no longer exists"}}
	if diff := cmp.Diff(wantDrains, p.Drains()); diff != "" {
		t.Errorf("unexpected Drains() (-want +got):\n%s", diff)
	}
	names := kubeletstate.PodNames{podA: "shop/app-7d9f.v2", podB: "databases/db-0"}
	got := p.Describe(names)
	for _, want := range []string{
		"  keep: pod shop/app-7d9f.v2 (uid " + podA + ") container app: 4Gi of memory on NUMA [0], 256Mi of hugepages-2Mi on NUMA [0]\n",
		"  NEEDS DRAIN: pod databases/db-0 (uid " + podB + ") container db: 8Gi of memory on NUMA [1]: NUMA node 1 no longer exists\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("plan does not say %q:\n%s", want, got)
		}
	}
	if p.Describe(nil) != p.String() {
		t.Errorf("Describe(nil) is not String():\n%s", p.Describe(nil))
	}
	cfg.AllowDrop = true
	if p, err = PlanRebuild(baseState(t, cfg), snap(twoNodes()[0]), cfg); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantDrains, p.Drains()); diff != "" {
		t.Errorf("allowed: unexpected Drains() (-want +got):\n%s", diff)
	}
	if want := "  drop (allowed): pod databases/db-0 (uid " + podB + ") container db:"; !strings.Contains(p.Describe(names), want) {
		t.Errorf("plan does not say %q:\n%s", want, p.Describe(names))
	}
}
