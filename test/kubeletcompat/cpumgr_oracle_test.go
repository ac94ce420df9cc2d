package kubeletcompat_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// Pod UIDs of the golden files.
const (
	cpuPodA = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	cpuPodB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
)

// cpuLine is one socket, one NUMA node, cores x threads CPUs numbered the
// Intel way (siblings n and n+cores), some of them offline: the machines of
// the golden files' README, and, with CPUs offline, a machine before CPUs
// are added or after they are removed.
func cpuLine(cores, threads int, offline ...int) fixturegen.Machine {
	return fixturegen.Machine{
		Sockets:        1,
		CoresPerSocket: cores,
		ThreadsPerCore: threads,
		OfflineCPUs:    offline,
		Nodes:          []fixturegen.Node{{CPUs: fixturegen.CPUs(0, cores*threads-1), MemTotalKB: 8 << 20}},
	}
}

// cpuTwoSockets is 2 sockets x 2 cores x 2 threads, a NUMA node per socket:
// socket 0 has CPUs 0,1,4,5, socket 1 has 2,3,6,7.
func cpuTwoSockets(offline ...int) fixturegen.Machine {
	return fixturegen.Machine{
		Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2, OfflineCPUs: offline,
		Nodes: []fixturegen.Node{
			{CPUs: []int{0, 1, 4, 5}, MemTotalKB: 4 << 20},
			{CPUs: []int{2, 3, 6, 7}, MemTotalKB: 4 << 20},
		},
	}
}

func cpus(list string) cpuset.CPUSet {
	s, err := cpuset.Parse(list)
	if err != nil {
		panic(err)
	}
	return s
}

// hotplugdVerdict is what hotplugd says the kubelet's Start returns for the
// file b: the kubelet's error text, "" for a start.
func hotplugdVerdict(t *testing.T, m cpuMachine, k cpuKubelet, path string, b []byte) string {
	t.Helper()
	cfg, err := cpumgr.NewConfig(k.kubeletConfig(), m.snap, path, hotplugdRelease(t))
	if err != nil {
		t.Fatalf("NewConfig() error: %v", err)
	}
	s, err := cpumgr.Parse(b)
	if err != nil {
		var le *cpumgr.LoadError
		if !errors.As(err, &le) {
			t.Fatalf("Parse() error %v is not the kubelet's", err)
		}
		return fmt.Sprintf("could not restore state from checkpoint: %s, please drain this node and delete the CPU manager checkpoint file %q before restarting Kubelet", le.KubeletFor(cfg), path)
	}
	if err := cpumgr.Validate(s, m.snap, cfg); err != nil {
		var se *cpumgr.StartError
		if !errors.As(err, &se) {
			t.Fatalf("Validate() error %v is not a *StartError", err)
		}
		return se.Kubelet
	}
	return ""
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestCPUManagerVectorsMatchKubelet runs the kubelet's CPU manager on every
// golden file with the machine and configuration of its README row and
// checks that hotplugd's verdict is the kubelet's, word for word.
func TestCPUManagerVectorsMatchKubelet(t *testing.T) {
	static1 := cpuKubelet{reserved: "1"}
	podLevel := cpuKubelet{reserved: "1", gates: map[string]bool{"PodLevelResourceManagers": true}}
	tests := []struct {
		file    string
		machine fixturegen.Machine
		kubelet cpuKubelet
		// ok is the README's verdict: the kubelet starts.
		ok bool
	}{
		{"c01-static-4cpu-empty", cpuLine(4, 1), static1, true},
		{"c03-static-8cpu-2entries", cpuLine(8, 1), static1, true},
		{"c03-static-8cpu-2entries", cpuLine(4, 1), static1, false},
		{"c01-static-4cpu-empty", cpuLine(8, 1), static1, false},
		{"c07-checksum-zero", cpuLine(8, 1), static1, true},
		{"c08-pretty-reordered", cpuLine(8, 1), static1, true},
		{"c10-entries-empty-object", cpuLine(4, 1), static1, true},
		{"c12-entry-overlaps-default", cpuLine(8, 1), static1, false},
		{"c13-reserved-cpu-not-in-default", cpuLine(8, 1), static1, false},
		{"c15-empty-default-no-entries", cpuLine(8, 1), static1, true},
		{"c16-policy-none", cpuLine(8, 1), cpuKubelet{policy: cpumgr.PolicyNone}, true},
		{"c16-policy-none", cpuLine(8, 1), static1, false},
		{"c18-reserved-2-smt", cpuLine(4, 2), cpuKubelet{reserved: "2"}, true},
		{"c19-v3-podentries", cpuLine(8, 1), podLevel, true},
		{"c19-v3-podentries", cpuLine(8, 1), static1, false},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/%dx%d/%s/%v", tt.file, tt.machine.CoresPerSocket, tt.machine.ThreadsPerCore, tt.kubelet.policy, tt.kubelet.gates)
		t.Run(name, func(t *testing.T) {
			tt.kubelet.setGates(t)
			b, err := os.ReadFile(filepath.Join("..", "..", "pkg", "cpumgr", "testdata", tt.file+".cpu_manager_state"))
			if err != nil {
				t.Fatal(err)
			}
			m := newCPUMachine(t, tt.machine)
			dir := t.TempDir()
			path := filepath.Join(dir, cpuStateFile)
			after, kerr := kubeletStartWith(t, m, tt.kubelet, dir, b)
			// The README's verdicts and bytes are kubelet v1.36.3's, which
			// made the vectors; another release is judged by its own Start
			// alone (1.37 starts with c19 without the gate, ignoring its
			// pod-level CPUs, and writes c15 back as V4).
			vectorsRelease := oracle.KubeletVersion() == "v1.36.3"
			if vectorsRelease && (kerr == nil) != tt.ok {
				t.Fatalf("kubelet Start error = %v, the README says ok=%v", kerr, tt.ok)
			}
			if got, want := hotplugdVerdict(t, m, tt.kubelet, path, b), errText(kerr); got != want {
				t.Errorf("hotplugd says %q, the kubelet %q", got, want)
			}
			if tt.file == "c15-empty-default-no-entries" && vectorsRelease {
				const want = `{"policyName":"static","defaultCpuSet":"0-7","checksum":14413152}`
				if string(after) != want {
					t.Errorf("the kubelet rewrote c15 to %s, the README says %s", after, want)
				}
			}
		})
	}
}

// cpuRebuildCase is one topology change.
type cpuRebuildCase struct {
	name     string
	old, new fixturegen.Machine
	kubelet  cpuKubelet
	// state is the checkpoint as the kubelet left it on the old machine.
	state *cpumgr.State
	// oldInvalid: the state does not start the kubelet even on the old
	// machine (a configuration change, not a topology one).
	oldInvalid bool

	wantChanged bool
	wantDrain   int
	// wantErr is the sentinel PlanRebuild's error matches, nil for none.
	wantErr error
	// v4Err and v4Drain replace wantErr and wantDrain for a kubelet that
	// writes V4 (1.37), when they differ there.
	v4Err   error
	v4Drain int
}

func cpuState(format cpumgr.Format, policy, def string, entries map[string]map[string]string, podEntries map[string]string) *cpumgr.State {
	s := &cpumgr.State{Format: format, PolicyName: policy, DefaultCPUSet: cpus(def), Entries: map[string]map[string]cpuset.CPUSet{}}
	for pod, containers := range entries {
		s.Entries[pod] = map[string]cpuset.CPUSet{}
		for c, list := range containers {
			s.Entries[pod][c] = cpus(list)
		}
	}
	if podEntries != nil {
		s.PodEntries = map[string]cpuset.CPUSet{}
		for pod, list := range podEntries {
			s.PodEntries[pod] = cpus(list)
		}
	}
	return s
}

func cpuRebuildCases() []cpuRebuildCase {
	static1 := cpuKubelet{reserved: "1"}
	podLevel := cpuKubelet{reserved: "1", gates: map[string]bool{"PodLevelResourceManagers": true}}
	strict := cpuKubelet{reserved: "1", options: map[string]string{"strict-cpu-reservation": "true"}}
	v2 := cpumgr.FormatV2
	return []cpuRebuildCase{
		{
			name: "added 4 to 8, no pins",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: static1,
			state:       cpuState(v2, "static", "0-3", nil, nil),
			wantChanged: true,
		},
		{
			name: "added 4 to 8, pinned container kept",
			old:  cpuLine(8, 1, 4, 5, 6, 7), new: cpuLine(8, 1), kubelet: static1,
			state:       cpuState(v2, "static", "0-1", map[string]map[string]string{cpuPodA: {"app": "2-3"}}, nil),
			wantChanged: true,
		},
		{
			name: "removed 8 to 4, no pins",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 4, 5, 6, 7), kubelet: static1,
			state:       cpuState(v2, "static", "0-7", nil, nil),
			wantChanged: true,
		},
		{
			name: "removed 8 to 6, pins on the remaining CPUs",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 6, 7), kubelet: static1,
			state:       cpuState(v2, "static", "0-1,6-7", map[string]map[string]string{cpuPodA: {"app": "2-3"}, cpuPodB: {"db": "4-5"}}, nil),
			wantChanged: true,
		},
		{
			name: "removed 8 to 4, a pinned container lost its CPUs",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 4, 5, 6, 7), kubelet: static1,
			state:     cpuState(v2, "static", "0-1,6-7", map[string]map[string]string{cpuPodA: {"app": "2-3"}, cpuPodB: {"db": "4-5"}}, nil),
			wantDrain: 1, wantErr: cpumgr.ErrNeedsDrain,
		},
		{
			name: "removed 8 to 4, a pinned container lost one of its CPUs",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 4, 5, 6, 7), kubelet: static1,
			state:     cpuState(v2, "static", "0-1,5-7", map[string]map[string]string{cpuPodA: {"app": "2-4"}}, nil),
			wantDrain: 1, wantErr: cpumgr.ErrNeedsDrain,
		},
		{
			name: "SMT: cores added, 2 reserved CPUs",
			old:  cpuLine(8, 2, 4, 5, 6, 7, 12, 13, 14, 15), new: cpuLine(8, 2), kubelet: cpuKubelet{reserved: "2"},
			state:       cpuState(v2, "static", "0-1,8-9", map[string]map[string]string{cpuPodA: {"app": "2-3,10-11"}}, nil),
			wantChanged: true,
		},
		{
			name: "SMT: a core removed, reservedSystemCPUs",
			old:  cpuLine(4, 2), new: cpuLine(4, 2, 3, 7), kubelet: cpuKubelet{specific: cpus("0,4")},
			state:       cpuState(v2, "static", "0-1,3-5,7", map[string]map[string]string{cpuPodA: {"app": "2,6"}}, nil),
			wantChanged: true,
		},
		{
			name: "SMT: a thread removed from a pinned core",
			old:  cpuLine(4, 2), new: cpuLine(4, 2, 6), kubelet: cpuKubelet{reserved: "2"},
			state:     cpuState(v2, "static", "0-1,3-5,7", map[string]map[string]string{cpuPodA: {"app": "2,6"}}, nil),
			wantDrain: 1, wantErr: cpumgr.ErrNeedsDrain,
		},
		{
			name: "SMT: the kubelet's reserved CPU moves to the other socket",
			// With CPU 7 offline socket 1 has fewer CPUs and the kubelet
			// reserves CPU 3 there; with it back, CPU 0.
			old: cpuTwoSockets(7), new: cpuTwoSockets(), kubelet: static1,
			state:       cpuState(v2, "static", "0-3,5-6", map[string]map[string]string{cpuPodA: {"app": "4"}}, nil),
			wantChanged: true,
		},
		{
			name: "SMT: the kubelet's reserved CPU moves onto a pinned CPU",
			old:  cpuTwoSockets(7), new: cpuTwoSockets(), kubelet: static1,
			state:     cpuState(v2, "static", "1-3,5-6", map[string]map[string]string{cpuPodA: {"app": "0,4"}}, nil),
			wantDrain: 1, wantErr: cpumgr.ErrNeedsDrain,
		},
		{
			name: "strict reservation: added 4 to 8",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: strict,
			state:       cpuState(v2, "static", "1", map[string]map[string]string{cpuPodA: {"app": "2-3"}}, nil),
			wantChanged: true,
		},
		{
			name: "strict reservation: removed 8 to 4",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 4, 5, 6, 7), kubelet: strict,
			state:       cpuState(v2, "static", "1,4-7", map[string]map[string]string{cpuPodA: {"app": "2-3"}}, nil),
			wantChanged: true,
		},
		{
			name: "pod-level (V3): added 4 to 8",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: podLevel,
			state:       cpuState(cpumgr.FormatV3, "static", "0-1", map[string]map[string]string{cpuPodA: {"app": "2"}}, map[string]string{cpuPodA: "2-3"}),
			wantChanged: true,
		},
		{
			name: "pod-level (V3): a pod lost a CPU of its pod-level set",
			old:  cpuLine(8, 1), new: cpuLine(8, 1, 6, 7), kubelet: podLevel,
			state:     cpuState(cpumgr.FormatV3, "static", "0-3", map[string]map[string]string{cpuPodA: {"app": "4"}}, map[string]string{cpuPodA: "4-7"}),
			wantDrain: 2, wantErr: cpumgr.ErrNeedsDrain,
		},
		{
			name: "pod-level gate on, V2 file: added 4 to 8, written as V3",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: podLevel,
			state:       cpuState(v2, "static", "0-1", map[string]map[string]string{cpuPodA: {"app": "2-3"}}, nil),
			wantChanged: true,
		},
		{
			name: "unchanged machine",
			old:  cpuLine(8, 1), new: cpuLine(8, 1), kubelet: static1,
			state: cpuState(v2, "static", "0-1,6-7", map[string]map[string]string{cpuPodA: {"app": "2-3"}, cpuPodB: {"db": "4-5"}}, nil),
		},
		{
			name: "none policy: added 4 to 8",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: cpuKubelet{policy: cpumgr.PolicyNone},
			state: cpuState(v2, "none", "", nil, nil),
		},
		{
			name: "policy changed to static",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: static1,
			state: cpuState(v2, "none", "", nil, nil), oldInvalid: true,
			wantErr: cpumgr.ErrPolicyChanged,
		},
		{
			name: "V3 file, gate turned off",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: static1,
			state:      cpuState(cpumgr.FormatV3, "static", "0-1", map[string]map[string]string{cpuPodA: {"app": "2"}}, map[string]string{cpuPodA: "2-3"}),
			oldInvalid: true, wantErr: cpumgr.ErrInvalidState,
			// 1.37 loads the file but not its pod-level CPUs: the pod
			// (its pod-level and container assignments) needs a drain.
			v4Err: cpumgr.ErrNeedsDrain, v4Drain: 2,
		},
		{
			name: "reservation raised to 2 CPUs, CPU 1 pinned",
			old:  cpuLine(4, 1), new: cpuLine(8, 1), kubelet: cpuKubelet{reserved: "2"},
			state:      cpuState(v2, "static", "0,2-3", map[string]map[string]string{cpuPodA: {"app": "1"}}, nil),
			oldInvalid: true, wantDrain: 1, wantErr: cpumgr.ErrNeedsDrain,
		},
	}
}

// TestCPUManagerRebuildMatchesKubelet checks PlanRebuild against the
// kubelet's CPU manager for a table of topology changes: hotplugd's verdict
// on the old file is the kubelet's; every file hotplugd writes is loaded by
// the kubelet's checkpoint code, accepted by its Start for the new machine
// (which leaves it as it is) and is byte for byte what the kubelet writes for
// the same state; every state hotplugd refuses is one the kubelet refuses or
// one where the rebuild would drop a pinned CPU, and the rebuild the operator
// allows after draining is accepted too.
func TestCPUManagerRebuildMatchesKubelet(t *testing.T) {
	for _, tt := range cpuRebuildCases() {
		t.Run(tt.name, func(t *testing.T) {
			outcome := checkRebuild(t, tt, true)
			t.Logf("outcome: %s", outcome)
		})
	}
}

// checkRebuild runs one topology change through hotplugd and the kubelet's
// CPU manager and checks the invariants; with expect it also checks the
// case's expectations. It returns what happened, for statistics.
func checkRebuild(t *testing.T, tt cpuRebuildCase, expect bool) string {
	t.Helper()
	tt.kubelet.setGates(t)
	oldBytes, err := tt.state.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	// The state is one the kubelet accepts on the old machine (or, for a
	// configuration change, refuses there already).
	oldM := newCPUMachine(t, tt.old)
	if _, err := kubeletStartWith(t, oldM, tt.kubelet, t.TempDir(), oldBytes); (err != nil) != tt.oldInvalid {
		t.Fatalf("on the old machine the kubelet says %v, want invalid=%v", err, tt.oldInvalid)
	}

	m := newCPUMachine(t, tt.new)
	dir := t.TempDir()
	path := filepath.Join(dir, cpuStateFile)
	// The kubelet's message names its state directory: both use dir.
	kerr := kubeletVerdictIn(t, m, tt.kubelet, dir, oldBytes)
	if got, want := hotplugdVerdict(t, m, tt.kubelet, path, oldBytes), errText(kerr); got != want {
		t.Errorf("hotplugd says %q, the kubelet %q", got, want)
	}

	cfg, err := cpumgr.NewConfig(tt.kubelet.kubeletConfig(), m.snap, path, hotplugdRelease(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := cpumgr.Parse(oldBytes)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := cpumgr.PlanRebuild(s, m.snap, cfg)
	t.Logf("plan:\n%v", plan)
	if hotplugdRelease(t).CPUState == kubeletversion.CPUStateV4 && tt.v4Err != nil {
		tt.wantErr, tt.wantDrain = tt.v4Err, tt.v4Drain
	}
	if expect {
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("PlanRebuild() error = %v, want %v", err, tt.wantErr)
			}
		} else if err != nil {
			t.Fatalf("PlanRebuild() error: %v", err)
		}
		if plan != nil && len(plan.NeedsDrain) != tt.wantDrain {
			t.Errorf("NeedsDrain = %v, want %d", plan.NeedsDrain, tt.wantDrain)
		}
	}

	outcome := "valid"
	if err != nil {
		// Refused: the kubelet refuses the state too, or the rebuild would
		// drop a pinned CPU.
		if kerr == nil && (plan == nil || len(plan.NeedsDrain) == 0) {
			t.Errorf("hotplugd refuses a state the kubelet accepts, with nothing to drain: %v", err)
		}
		if !errors.Is(err, cpumgr.ErrNeedsDrain) {
			return "refused: " + err.Error()
		}
		// The operator drained the pods and allows the drop.
		cfg.AllowDrop = true
		if plan, err = cpumgr.PlanRebuild(s, m.snap, cfg); err != nil {
			t.Fatalf("PlanRebuild(AllowDrop) error: %v", err)
		}
		if !plan.Dropped || !plan.Changed {
			t.Fatalf("PlanRebuild(AllowDrop) = %+v, want a change that drops", plan)
		}
		outcome = "needs drain, then rewritten"
	} else if plan.Changed {
		outcome = "rewritten"
	}
	if expect && plan.Changed != tt.wantChanged && !plan.Dropped {
		t.Errorf("Changed = %v, want %v", plan.Changed, tt.wantChanged)
	}
	if !plan.Changed {
		if kerr != nil {
			t.Errorf("hotplugd leaves alone a state the kubelet refuses: %v", kerr)
		}
		return outcome
	}
	if kerr == nil {
		t.Errorf("hotplugd rewrites a state the kubelet accepts")
	}
	checkWrittenByHotplugd(t, m, tt.kubelet, dir, plan, oldBytes)
	return outcome
}

// kubeletVerdictIn runs the kubelet's Start on b in the state directory dir
// and leaves dir as it found it.
func kubeletVerdictIn(t *testing.T, m cpuMachine, k cpuKubelet, dir string, b []byte) error {
	t.Helper()
	_, err := kubeletStartWith(t, m, k, dir, b)
	if err := os.Remove(filepath.Join(dir, cpuStateFile)); err != nil {
		t.Fatal(err)
	}
	return err
}

// checkWrittenByHotplugd applies the plan over the old file in dir and checks
// the result with the kubelet's code.
func checkWrittenByHotplugd(t *testing.T, m cpuMachine, k cpuKubelet, dir string, plan *cpumgr.Plan, oldBytes []byte) {
	t.Helper()
	path := filepath.Join(dir, cpuStateFile)
	if err := os.WriteFile(path, oldBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)
	backup, err := cpumgr.Apply(plan, now)
	if err != nil {
		t.Fatalf("Apply() error: %v", err)
	}
	if b, err := os.ReadFile(backup); err != nil || !bytes.Equal(b, oldBytes) {
		t.Errorf("backup %s = %q, %v; want the old file", backup, b, err)
	}
	written, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	policy := k.policy
	if policy == "" {
		policy = cpumgr.PolicyStatic
	}
	// (a) the kubelet's checkpoint code loads it;
	if err := kubeletLoads(dir, policy); err != nil {
		t.Errorf("the kubelet cannot load %s: %v", written, err)
	}
	// (b) its CPU manager starts with it on the new machine, and does not
	// rewrite it;
	after, err := kubeletStartWith(t, m, k, t.TempDir(), written)
	if err != nil {
		t.Errorf("the kubelet refuses %s: %v", written, err)
	}
	if !bytes.Equal(after, written) {
		t.Errorf("the kubelet rewrote %s to %s", written, after)
	}
	// (c) it is what the kubelet writes for the same state.
	if diff := cmp.Diff(string(kubeletWrites(t, plan.New)), string(written)); diff != "" {
		t.Errorf("hotplugd's file differs from the kubelet's (-kubelet +hotplugd):\n%s", diff)
	}
}
