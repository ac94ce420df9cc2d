package preflight

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/podnames"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

const vectors = "../cpumgr/testdata"

// machine writes a 1-socket, n-CPU, 1-node machine and snapshots it.
func machine(t *testing.T, cpus int, memKB uint64) *topology.Snapshot {
	t.Helper()
	return machineWith(t, cpus, memKB, 0)
}

// machineWith is machine with pages2M 2 MiB hugepages on the node.
func machineWith(t *testing.T, cpus int, memKB uint64, pages2M int) *topology.Snapshot {
	t.Helper()
	root := t.TempDir()
	m := fixturegen.OneNode(cpus, memKB, pages2M)
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc")).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func staticConfig(t *testing.T) Options {
	t.Helper()
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	return Options{RootDir: t.TempDir(), Config: cfg, Release: rel136, Now: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}
}

func install(t *testing.T, o Options, vector string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectors, vector))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.RootDir, CPUManagerState), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

func cpuResult(t *testing.T, rep Report) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.File == CPUManagerState {
			return r
		}
	}
	t.Fatal("no cpu_manager_state result")
	return Result{}
}

func TestAbsent(t *testing.T) {
	o := staticConfig(t)
	rep := Run(machine(t, 4, 8<<20), o)
	for _, r := range rep.Results {
		if r.Verdict != Absent {
			t.Errorf("%s: %s, want absent", r.File, r.Verdict)
		}
	}
	if rep.NeedsPerson() {
		t.Error("NeedsPerson() for absent files")
	}
}

// TestCPUUpgradeIsRepaired is the incident: a node with a static CPU manager
// comes back with 16 CPUs instead of 8; the pinned containers keep their CPUs
// and the new ones join the default set.
func TestCPUUpgradeIsRepaired(t *testing.T) {
	o := staticConfig(t)
	old := install(t, o, "c03-static-8cpu-2entries.cpu_manager_state")
	snap := machine(t, 16, 8<<20)

	dry := o
	dry.DryRun = true
	if r := cpuResult(t, Run(snap, dry)); r.Verdict != WouldRepair || !strings.Contains(r.Plan, "8-15") {
		t.Fatalf("dry run: %+v", r)
	}
	if b, _ := os.ReadFile(filepath.Join(o.RootDir, CPUManagerState)); string(b) != string(old) {
		t.Fatal("the dry run changed the file")
	}

	r := cpuResult(t, Run(snap, o))
	if r.Verdict != Repaired {
		t.Fatalf("verdict %s, want repaired: %+v", r.Verdict, r)
	}
	if b, err := os.ReadFile(r.Backup); err != nil || string(b) != string(old) {
		t.Errorf("backup %s: %v, want the old file", r.Backup, err)
	}
	st, err := cpumgr.ReadFile(r.Path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := cpumgr.NewConfig(o.Config, snap, r.Path, rel136)
	if err != nil {
		t.Fatal(err)
	}
	if err := cpumgr.Validate(st, snap, cfg); err != nil {
		t.Errorf("the repaired file is not valid: %v", err)
	}
	if got := st.DefaultCPUSet.String(); got != "0-1,6-15" {
		t.Errorf("default set %s, want 0-1,6-15", got)
	}
	// A second run finds it valid.
	if r := cpuResult(t, Run(snap, o)); r.Verdict != Valid {
		t.Errorf("second run: %s, want valid", r.Verdict)
	}
}

// TestLostCPUsNeedAPerson: back with 4 CPUs, the pinned containers lost
// theirs: nothing is written unless the operator allows the drop.
func TestLostCPUsNeedAPerson(t *testing.T) {
	o := staticConfig(t)
	old := install(t, o, "c03-static-8cpu-2entries.cpu_manager_state")
	snap := machine(t, 4, 8<<20)
	rep := Run(snap, o)
	r := cpuResult(t, rep)
	if r.Verdict != NeedsPerson || !rep.NeedsPerson() || !strings.Contains(r.Todo, "--allow-drop-assignments") {
		t.Fatalf("%+v, want needs a person with what to do", r)
	}
	if b, _ := os.ReadFile(r.Path); string(b) != string(old) {
		t.Fatal("the file was changed")
	}
	o.AllowDrop = true
	if r := cpuResult(t, Run(snap, o)); r.Verdict != Repaired {
		t.Fatalf("with --allow-drop-assignments: %+v", r)
	}
}

func TestCorruptFileNeedsAPerson(t *testing.T) {
	o := staticConfig(t)
	path := filepath.Join(o.RootDir, CPUManagerState)
	if err := os.WriteFile(path, []byte(`{"policyName":"static","defaultCpuSet":"0-3","checksum":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := cpuResult(t, Run(machine(t, 4, 8<<20), o))
	if r.Verdict != NeedsPerson || r.Why == "" {
		t.Fatalf("%+v, want needs a person", r)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), `"checksum":1`) {
		t.Fatal("the corrupt file was changed")
	}
}

func TestPolicyChangedNeedsAPerson(t *testing.T) {
	o := staticConfig(t)
	install(t, o, "c16-policy-none.cpu_manager_state")
	r := cpuResult(t, Run(machine(t, 8, 8<<20), o))
	if r.Verdict != NeedsPerson || !strings.Contains(r.Todo, "policy changed") {
		t.Fatalf("%+v, want needs a person: policy changed", r)
	}
}

// TestMemoryHotAddIsRepaired: a Static memory manager's state after the
// node's memory doubled (8Gi -> 16Gi) is rebuilt, keeping the assignment.
func TestMemoryHotAddIsRepaired(t *testing.T) {
	cfg, err := kubeletconfig.Parse([]byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
memoryManagerPolicy: Static
systemReserved: {memory: 924Mi}
reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{RootDir: t.TempDir(), Config: cfg, Release: rel136, Now: time.Now()}
	old, err := os.ReadFile("../memmgr/testdata/m04-static-1-entry.memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(o.RootDir, MemoryManagerState)
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	snapWith := func(memKB uint64) *topology.Snapshot { return machineWith(t, 4, memKB, 512) }
	if r := Run(snapWith(8<<20), o).Results[1]; r.Verdict != Valid {
		t.Fatalf("on its own machine: %+v, want valid", r)
	}
	r := Run(snapWith(16<<20), o).Results[1]
	if r.Verdict != Repaired {
		t.Fatalf("after memory hot-add: %+v, want repaired", r)
	}
	if b, _ := os.ReadFile(r.Backup); string(b) != string(old) {
		t.Error("backup differs from the old file")
	}
	if r := Run(snapWith(16<<20), o).Results[1]; r.Verdict != Valid {
		t.Errorf("second run: %+v, want valid", r)
	}

	// The same kubelet started with --experimental-allocatable-ignore-eviction
	// reserves 924Mi for node allocatable, not 1Gi, and its memory manager
	// refuses reservedMemory of 1Gi: a person must fix the configuration.
	o.AllocatableIgnoresEviction = true
	if r := Run(snapWith(16<<20), o).Results[1]; r.Verdict != NeedsPerson || !strings.Contains(r.Why, `is not equal to the value "924Mi" determined by Node Allocatable feature`) {
		t.Errorf("with --experimental-allocatable-ignore-eviction: %+v, want the kubelet's refusal", r)
	}
}

var rel136 = kubeletversion.ByMinor(36)

func configResult(rep Report) (Result, bool) {
	for _, r := range rep.Results {
		if r.File == KubeletConfiguration {
			return r, true
		}
	}
	return Result{}, false
}

// TestKubeletConfigurationRefused: a configuration the kubelet refuses on
// this machine (a memory reservation above the machine's memory) is a third
// result in the kubelet's words and needs a person; the state file that
// would be repaired (the CPU upgrade) is only planned while it stands.
func TestKubeletConfigurationRefused(t *testing.T) {
	o := staticConfig(t)
	o.Config.SystemReserved = map[string]string{"memory": "100Gi"}
	o.ConfigPath = "/etc/kubernetes/kubelet.yaml"
	old := install(t, o, "c03-static-8cpu-2entries.cpu_manager_state")
	rep := Run(machine(t, 16, 8<<20), o)
	r, ok := configResult(rep)
	if !ok || r.Verdict != NeedsPerson || !rep.NeedsPerson() {
		t.Fatalf("%+v, want the kubelet configuration to need a person", rep.Results)
	}
	const why = `kubelet 1.36 would refuse to start on this machine: node allocatable: invalid Node Allocatable configuration. Resource "memory" has a reservation of 102500Mi but capacity of 8Gi. Expected capacity >= reservation.`
	if r.Why != why || r.Path != o.ConfigPath {
		t.Errorf("%+v, want why %q", r, why)
	}
	if c := cpuResult(t, rep); c.Verdict != WouldRepair {
		t.Errorf("cpu_manager_state: %+v, want would repair", c)
	}
	if b, _ := os.ReadFile(filepath.Join(o.RootDir, CPUManagerState)); string(b) != string(old) {
		t.Error("a state file was rewritten although the kubelet refuses its configuration")
	}
	if !strings.Contains(rep.String(), "kubelet configuration: needs a person (/etc/kubernetes/kubelet.yaml)") {
		t.Errorf("report:\n%s", rep)
	}
}

// TestKubeletConfigurationOffline: CPU 3 went offline; the kubelet reserves
// it by reservedSystemCPUs under the none policy, and refuses to start.
func TestKubeletConfigurationOffline(t *testing.T) {
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nreservedSystemCPUs: \"3\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{RootDir: t.TempDir(), Config: cfg, Release: rel136}
	if rep := Run(machine(t, 4, 8<<20), o); rep.NeedsPerson() || len(rep.Results) != 2 {
		t.Fatalf("on its own machine: %+v", rep.Results)
	}
	rep := Run(machine(t, 3, 8<<20), o)
	r, ok := configResult(rep)
	if !ok || r.Verdict != NeedsPerson || !strings.Contains(r.Why, "reserved CPUs: reserved-cpus: 3 is not a subset of online-cpus: 0-2") {
		t.Fatalf("%+v", rep.Results)
	}
}

// TestCannotPredictIsAWarning: the static policy with an option under which
// hotplugd does not predict the reserved CPUs: the kubelet may well start,
// so the file is not judged (Unknown), never a block.
func TestCannotPredictIsAWarning(t *testing.T) {
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n" +
		"kubeReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions: {distribute-cpus-across-numa: \"true\"}\n"))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{RootDir: t.TempDir(), Config: cfg, Release: rel136}
	install(t, o, "c01-static-4cpu-empty.cpu_manager_state")
	rep := Run(machine(t, 8, 8<<20), o)
	if r := cpuResult(t, rep); r.Verdict != Unknown || rep.NeedsPerson() || !strings.Contains(r.Why, "reservedSystemCPUs") {
		t.Fatalf("%+v, want unknown", rep.Results)
	}
	if len(rep.Warnings()) != 1 {
		t.Errorf("warnings %q", rep.Warnings())
	}
}

// TestSymlinkIsAWarning: the kubelet follows a symlink; hotplugd does not
// read through one, so it cannot judge the file.
func TestSymlinkIsAWarning(t *testing.T) {
	o := staticConfig(t)
	real := filepath.Join(t.TempDir(), "elsewhere")
	b, err := os.ReadFile(filepath.Join(vectors, "c01-static-4cpu-empty.cpu_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(o.RootDir, CPUManagerState)); err != nil {
		t.Fatal(err)
	}
	rep := Run(machine(t, 8, 8<<20), o)
	if r := cpuResult(t, rep); r.Verdict != Unknown || rep.NeedsPerson() {
		t.Fatalf("%+v, want unknown", r)
	}
}

// TestOptionsFor: the kubelet's command line decides the root dir and the
// configuration: --cpu-manager-policy=static --reserved-cpus=0 over a file
// that sets neither, --root-dir elsewhere.
func TestOptionsFor(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "data", "kubelet")
	k, err := kubeletconfig.FromArgs([]string{"--config", cfgPath, "--cpu-manager-policy=static", "--reserved-cpus=0", "--root-dir", root, "--experimental-allocatable-ignore-eviction"}, "/")
	if err != nil {
		t.Fatal(err)
	}
	o, err := OptionsFor(k)
	if err != nil {
		t.Fatal(err)
	}
	if o.RootDir != root || o.Config.CPUManagerPolicy != "static" || o.Config.ReservedSystemCPUs != "0" || !o.AllocatableIgnoresEviction || o.ConfigPath != cfgPath ||
		o.PodLogsDir != kubeletconfig.DefaultPodLogsDir {
		t.Errorf("OptionsFor() = %+v", o)
	}
	// The file of the incident, on an unchanged machine: valid.
	o.Release = rel136
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(vectors, "c03-static-8cpu-2entries.cpu_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, CPUManagerState), b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := Run(machine(t, 8, 8<<20), o)
	if r := cpuResult(t, rep); r.Verdict != Valid || rep.NeedsPerson() {
		t.Fatalf("%+v", rep.Results)
	}
}

const (
	// The pods of c03-static-8cpu-2entries: app on CPUs 2-3, db on 4-5.
	podApp = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	podDB  = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
)

// podLogs makes a kubelet pod log directory with a directory per name
// (<namespace>_<name>_<uid>) and returns it.
func podLogs(t *testing.T, dirs ...string) string {
	t.Helper()
	logs := t.TempDir()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(logs, d, "work"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return logs
}

// TestDrainNamesThePods: CPUs 4-7 went offline under a pod pinned to 4-5:
// the report names the pod to drain as <namespace>/<name>, from the
// kubelet's pod log directory, with its container and UID; a pod the
// directory does not name keeps its UID alone.
func TestDrainNamesThePods(t *testing.T) {
	snap := machine(t, 4, 8<<20)
	for _, tc := range []struct {
		name      string
		logs      []string // "" PodLogsDir when nil
		wantDrain []podnames.Pod
		wantLine  string
	}{
		{
			name:      "named",
			logs:      []string{"databases_db-0.primary_" + podDB, "shop_app-7d9f_" + podApp, "default_other_" + podApp[:8]},
			wantDrain: []podnames.Pod{{Namespace: "databases", Name: "db-0.primary", UID: podDB}},
			wantLine:  "pod databases/db-0.primary (uid " + podDB + ") container db 4-5: CPUs 4-5 are offline",
		},
		{
			name:      "not in the pod log directory",
			logs:      []string{"shop_app-7d9f_" + podApp},
			wantDrain: []podnames.Pod{{UID: podDB}},
			wantLine:  "pod " + podDB + " container db 4-5: CPUs 4-5 are offline",
		},
		{
			name:      "no pod log directory",
			wantDrain: []podnames.Pod{{UID: podDB}},
			wantLine:  "pod " + podDB + " container db 4-5: CPUs 4-5 are offline",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := staticConfig(t)
			install(t, o, "c03-static-8cpu-2entries.cpu_manager_state")
			if tc.logs != nil {
				o.PodLogsDir = podLogs(t, tc.logs...)
			}
			rep := Run(snap, o)
			r := cpuResult(t, rep)
			if r.Verdict != NeedsPerson {
				t.Fatalf("%+v, want needs a person", r)
			}
			if diff := cmp.Diff(tc.wantDrain, r.Drain); diff != "" {
				t.Errorf("unexpected pods to drain (-want +got):\n%s", diff)
			}
			if want := "cpumgr: assignments cannot be kept: drain their pods first: 1 assignment(s): " + tc.wantLine; r.Why != want {
				t.Errorf("why %q, want %q", r.Why, want)
			}
			if !strings.Contains(r.Plan, "  needs drain: "+tc.wantLine+"\n") {
				t.Errorf("the plan does not name the pod:\n%s", r.Plan)
			}
			// The kept pod is not looked up: only drains are.
			if !strings.Contains(r.Plan, "  keep: pod "+podApp+" container app 2-3\n") {
				t.Errorf("plan:\n%s", r.Plan)
			}
			if !strings.Contains(rep.String(), "why: "+r.Why+"\n") {
				t.Errorf("report:\n%s", rep)
			}
		})
	}
}

// TestMemoryDrainNamesThePods: the memory manager's assignment no longer
// fits a smaller machine: its pod is named as for the CPU manager.
func TestMemoryDrainNamesThePods(t *testing.T) {
	cfg, err := kubeletconfig.Parse([]byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
memoryManagerPolicy: Static
systemReserved: {memory: 924Mi}
reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	o := Options{RootDir: t.TempDir(), Config: cfg, Release: rel136, Now: time.Now(),
		PodLogsDir: podLogs(t, "shop_app-7d9f.v2_"+podApp)}
	old, err := os.ReadFile("../memmgr/testdata/m04-static-1-entry.memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(o.RootDir, MemoryManagerState), old, 0o644); err != nil {
		t.Fatal(err)
	}
	r := Run(machineWith(t, 4, 2560<<10, 512), o).Results[1]
	if r.Verdict != NeedsPerson {
		t.Fatalf("%+v, want needs a person", r)
	}
	if diff := cmp.Diff([]podnames.Pod{{Namespace: "shop", Name: "app-7d9f.v2", UID: podApp}}, r.Drain); diff != "" {
		t.Errorf("unexpected pods to drain (-want +got):\n%s", diff)
	}
	line := "pod shop/app-7d9f.v2 (uid " + podApp + ") container app: 1Gi of memory on NUMA [0]: "
	if !strings.Contains(r.Why, "(see the plan): "+line) || !strings.Contains(r.Plan, "NEEDS DRAIN: "+line) {
		t.Errorf("why %q\nplan:\n%s\nwant both to say %q", r.Why, r.Plan, line)
	}
}

// TestAllocatedPodsState: the kubelet's checkpoint of admitted pods, which
// it refuses at its start when corrupt (it panics), is reported so and never
// written; a file it loads, none, or one a kubelet with the gate off does not
// read, gives no result; one hotplugd cannot read is Unknown.
func TestAllocatedPodsState(t *testing.T) {
	valid, err := os.ReadFile("../allocated/testdata/kubelet-1.36.allocated_pods_state")
	if err != nil {
		t.Fatal(err)
	}
	corrupt := []byte(strings.Replace(string(valid), `600m`, `700m`, 1)) // the checksum no longer matches
	if string(corrupt) == string(valid) {
		t.Fatal("the vector has no 600m to change")
	}
	gateOff := kubeletconfig.Default()
	gateOff.FeatureGates = map[string]bool{"InPlacePodVerticalScaling": false}
	for _, tt := range []struct {
		name     string
		file     []byte // nil: none; empty: a directory
		release  *kubeletversion.Release
		config   bool // the 1.34 kubelet runs with the gate off
		want     Verdict
		wantWhy  string
		wantCode bool // NeedsPerson
	}{
		{"none", nil, rel136, false, "", "", false},
		{"valid", valid, rel136, false, "", "", false},
		{"corrupt", corrupt, rel136, false, NeedsPerson, "kubelet 1.36 would refuse it at its start and panic (checkpoint is corrupted)", true},
		{"corrupt, the gate off on 1.34: not read by the kubelet", corrupt, kubeletversion.ByMinor(34), true, "", "", false},
		{"not a regular file", []byte{}, rel136, false, Unknown, "not a regular file", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := Options{RootDir: t.TempDir(), Release: tt.release, Now: time.Now()}
			if tt.config {
				o.Config = gateOff
			}
			path := filepath.Join(o.RootDir, "allocated_pods_state")
			switch {
			case tt.file == nil:
			case len(tt.file) == 0:
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(path, tt.file, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rep := Run(machine(t, 4, 8<<20), o)
			var got *Result
			for i, r := range rep.Results {
				if r.File == "allocated_pods_state" {
					got = &rep.Results[i]
				}
			}
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("a result %+v, want none", *got)
			case tt.want != "" && (got == nil || got.Verdict != tt.want || !strings.Contains(got.Why, tt.wantWhy) || got.Path != path):
				t.Fatalf("result %+v, want %s at %s saying %q", got, tt.want, path, tt.wantWhy)
			}
			if rep.NeedsPerson() != tt.wantCode {
				t.Errorf("NeedsPerson %v, want %v:\n%s", rep.NeedsPerson(), tt.wantCode, rep)
			}
			if len(tt.file) > 0 {
				if now, _ := os.ReadFile(path); string(now) != string(tt.file) {
					t.Error("the file was written")
				}
			}
		})
	}
}
