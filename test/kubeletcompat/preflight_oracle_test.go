package kubeletcompat_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// pfKubelet is a kubelet's CPU and memory manager settings, to be carried
// by its command line in one of the ways an operator writes it (see
// pfVariants).
type pfKubelet struct {
	cpuPolicy       string // "" is none
	reservedCPUs    string
	kubeReservedCPU string
	cpuOptions      map[string]string
	memPolicy       string // "" is None
	systemReserved  string // memory
	reservedMemory  map[int]string
	gates           map[string]bool
}

// fromCPU is the kubelet of a CPU manager case.
func fromCPU(k cpuKubelet) pfKubelet {
	p := pfKubelet{cpuPolicy: k.policy, cpuOptions: k.options, gates: k.gates}
	if p.cpuPolicy == "" {
		p.cpuPolicy = cpumgr.PolicyStatic
	}
	if k.specific.Size() > 0 {
		p.reservedCPUs = k.specific.String()
	} else {
		p.kubeReservedCPU = k.reserved
	}
	return p
}

// fromMem is the kubelet of a memory manager case.
func fromMem(k memKubelet) pfKubelet {
	p := pfKubelet{memPolicy: k.policy, systemReserved: k.systemReserved, reservedMemory: k.reserved}
	if k.podLevel {
		p.gates = map[string]bool{gatePodLevelResourceManagers: true, "PodLevelResources": true}
	}
	return p
}

func (k pfKubelet) gatesList(sep, kv string) string {
	var s []string
	for _, name := range slices.Sorted(maps.Keys(k.gates)) {
		s = append(s, fmt.Sprintf("%s%s%v", name, kv, k.gates[name]))
	}
	return strings.Join(s, sep)
}

func (k pfKubelet) reservedMemoryFlag() string {
	var s []string
	for _, n := range slices.Sorted(maps.Keys(k.reservedMemory)) {
		s = append(s, fmt.Sprintf("%d:memory=%s", n, k.reservedMemory[n]))
	}
	return strings.Join(s, ";")
}

// yaml is the settings as configuration file fields.
func (k pfKubelet) yaml(withGates bool) string {
	var b strings.Builder
	if k.cpuPolicy != "" {
		fmt.Fprintf(&b, "cpuManagerPolicy: %s\n", k.cpuPolicy)
	}
	if k.reservedCPUs != "" {
		fmt.Fprintf(&b, "reservedSystemCPUs: %q\n", k.reservedCPUs)
	}
	if k.kubeReservedCPU != "" {
		fmt.Fprintf(&b, "kubeReserved: {cpu: %q}\n", k.kubeReservedCPU)
	}
	if len(k.cpuOptions) > 0 {
		b.WriteString("cpuManagerPolicyOptions:\n")
		for _, name := range slices.Sorted(maps.Keys(k.cpuOptions)) {
			fmt.Fprintf(&b, "  %s: %q\n", name, k.cpuOptions[name])
		}
	}
	if k.memPolicy != "" {
		fmt.Fprintf(&b, "memoryManagerPolicy: %s\n", k.memPolicy)
	}
	if k.systemReserved != "" {
		fmt.Fprintf(&b, "systemReserved: {memory: %s}\n", k.systemReserved)
	}
	if len(k.reservedMemory) > 0 {
		b.WriteString("reservedMemory:\n")
		for _, n := range slices.Sorted(maps.Keys(k.reservedMemory)) {
			fmt.Fprintf(&b, "- {numaNode: %d, limits: {memory: %s}}\n", n, k.reservedMemory[n])
		}
	}
	if withGates && len(k.gates) > 0 {
		fmt.Fprintf(&b, "featureGates: {%s}\n", k.gatesList(", ", ": "))
	}
	return b.String()
}

// flags is the settings as kubelet flags.
func (k pfKubelet) flags() []string {
	var a []string
	if k.cpuPolicy != "" {
		a = append(a, "--cpu-manager-policy="+k.cpuPolicy)
	}
	if k.reservedCPUs != "" {
		a = append(a, "--reserved-cpus="+k.reservedCPUs)
	}
	if k.kubeReservedCPU != "" {
		a = append(a, "--kube-reserved=cpu="+k.kubeReservedCPU)
	}
	for _, name := range slices.Sorted(maps.Keys(k.cpuOptions)) {
		a = append(a, "--cpu-manager-policy-options="+name+"="+k.cpuOptions[name])
	}
	if k.memPolicy != "" {
		a = append(a, "--memory-manager-policy="+k.memPolicy)
	}
	if k.systemReserved != "" {
		a = append(a, "--system-reserved=memory="+k.systemReserved)
	}
	if len(k.reservedMemory) > 0 {
		a = append(a, "--reserved-memory", k.reservedMemoryFlag())
	}
	if len(k.gates) > 0 {
		a = append(a, "--feature-gates="+k.gatesList(",", "="))
	}
	return a
}

// pfVariant carries a kubelet's settings on its command line: args writes
// what it needs into dir and returns the arguments (without --root-dir).
type pfVariant struct {
	name string
	args func(t *testing.T, k pfKubelet, dir string) []string
}

func pfWrite(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(header+body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// pfVariants are the ways a kubelet's command line carries its settings:
// all in its config file; by flags (kubeadm's KUBELET_EXTRA_ARGS) over a
// config file that sets none of them; in a --config-dir drop-in; and in the
// file with every alpha or every beta gate on by flag.
func pfVariants(all bool) []pfVariant {
	file := func(t *testing.T, k pfKubelet, dir string) []string {
		p := filepath.Join(dir, "config.yaml")
		pfWrite(t, p, k.yaml(true))
		return []string{"--config", p}
	}
	vs := []pfVariant{
		{"in the config file", file},
		{"by flags", func(t *testing.T, k pfKubelet, dir string) []string {
			p := filepath.Join(dir, "config.yaml")
			pfWrite(t, p, "")
			return append([]string{"--config=" + p}, k.flags()...)
		}},
	}
	if !all {
		return vs
	}
	return append(vs,
		pfVariant{"in a drop-in", func(t *testing.T, k pfKubelet, dir string) []string {
			p := filepath.Join(dir, "config.yaml")
			pfWrite(t, p, "")
			pfWrite(t, filepath.Join(dir, "kubelet.conf.d", "10-managers.conf"), k.yaml(true))
			return []string{"--config", p, "--config-dir", filepath.Join(dir, "kubelet.conf.d")}
		}},
		pfVariant{"with AllAlpha", func(t *testing.T, k pfKubelet, dir string) []string {
			return append(file(t, k, dir), "--feature-gates=AllAlpha=true")
		}},
		pfVariant{"with AllBeta", func(t *testing.T, k pfKubelet, dir string) []string {
			return append(file(t, k, dir), "--feature-gates", "AllBeta=true")
		}},
	)
}

// pfCount counts, for one source of cases, the cases, those where
// preflight exits 2 and those where the kubelet refuses too.
type pfCount struct {
	mu                       sync.Mutex
	cases, exit2, refused2   int
	repaired, repairedStarts int
}

// pfOutcome is what one case gave.
type pfOutcome struct {
	exit2, kubeletRefuses, repaired, startsAfter bool
}

// pfMachine is a machine as the kubelet and hotplugd read it.
type pfMachine struct {
	info *oracle.MachineInfo
	snap *topology.Snapshot
}

// checkPreflight runs one case: the kubelet's root dir holds cpuState and
// memState (nil: absent); args is its command line but --root-dir. It runs
// preflight as the kubelet's ExecStartPre would (its options read from the
// same command line by kubeletconfig.FromArgs and preflight.OptionsFor),
// and the kubelet's own start-up (oracle: command line, feature gates,
// validation, managers' NewManager and Start on the files, node allocatable)
// on the files as they were and after preflight. It checks that preflight
// exits 2 (NeedsPerson) only where the kubelet refuses to start, and that
// where preflight repaired the files and saw nothing it could not judge,
// the kubelet's managers start on the result.
func checkPreflight(t *testing.T, m pfMachine, args []string, cpuState, memState []byte) pfOutcome {
	t.Helper()
	rel := hotplugdRelease(t)
	root := t.TempDir()
	before := t.TempDir()
	for _, f := range []struct {
		name string
		b    []byte
	}{{cpuStateFile, cpuState}, {memStateFile, memState}} {
		if f.b == nil {
			continue
		}
		for _, dir := range []string{root, before} {
			if err := os.WriteFile(filepath.Join(dir, f.name), f.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	args = append(slices.Clone(args), "--root-dir", root)

	// preflight, as the kubelet's ExecStartPre.
	k, err := kubeletconfig.FromArgs(args, "/")
	if err != nil {
		t.Fatalf("kubeletconfig.FromArgs(%q): %v", args, err)
	}
	o, err := preflight.OptionsFor(k)
	if err != nil {
		t.Fatal(err)
	}
	if o.RootDir != root {
		t.Fatalf("preflight would check %s, the kubelet's root dir is %s", o.RootDir, root)
	}
	o.Release = rel
	o.Now = time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)
	rep := preflight.Run(m.snap, o)

	// The kubelet, on the files as they were.
	ko, kerr := oracle.KubeletFromArgs(t, args)
	if kerr == nil {
		ko.ApplyFeatureGates(t)
		if ko.Flags.RootDirectory != root {
			t.Fatalf("the oracle's kubelet root dir %s, want %s", ko.Flags.RootDirectory, root)
		}
		kerr = ko.Start(m.info, before)
	}
	out := pfOutcome{exit2: rep.NeedsPerson(), kubeletRefuses: kerr != nil}
	if out.exit2 && kerr == nil {
		t.Fatalf("preflight exits 2, the kubelet starts:\n%s", rep)
	}
	unknown := false
	for _, r := range rep.Results {
		switch r.Verdict {
		case preflight.Repaired:
			out.repaired = true
		case preflight.Unknown:
			unknown = true
		}
	}
	if out.exit2 || ko == nil {
		return out
	}
	// The kubelet, on what preflight left in its root dir.
	aerr := ko.Start(m.info, ko.Flags.RootDirectory)
	out.startsAfter = aerr == nil
	var serr *oracle.StartError
	if aerr != nil && errors.As(aerr, &serr) && !unknown &&
		(serr.Step == oracle.StepCPUManagerStart || serr.Step == oracle.StepMemoryManagerStart) {
		t.Fatalf("after preflight (exit 0, every file judged), the kubelet refuses its state: %v\nbefore: %v\n%s", aerr, kerr, rep)
	}
	if out.repaired && aerr != nil {
		t.Logf("repaired, the kubelet still refuses at a step preflight does not judge: %v", aerr)
	}
	return out
}

func (c *pfCount) add(o pfOutcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cases++
	if o.exit2 {
		c.exit2++
		if o.kubeletRefuses {
			c.refused2++
		}
	}
	if o.repaired {
		c.repaired++
		if o.startsAfter {
			c.repairedStarts++
		}
	}
}

func (c *pfCount) log(t *testing.T, source string) {
	t.Helper()
	verdict := "all refused by kubelet " + oracle.KubeletVersion()
	if c.refused2 != c.exit2 {
		verdict = fmt.Sprintf("only %d refused by kubelet %s", c.refused2, oracle.KubeletVersion())
	}
	t.Logf("casecount: preflight %s: %d cases, %d exit 2, %s; %d repaired, the kubelet starts after %d", source, c.cases, c.exit2, verdict, c.repaired, c.repairedStarts)
}

// TestPreflightExit2OnlyWhereKubeletRefuses is the rule preflight lives by,
// against the kubelet's own code, over every case of the oracle tables:
// CPU topology changes (cpuRebuildCases), the CPU manager's golden files
// and mutated files (cpuLoadInputs), memory topology changes
// (memRebuildCases, the kubelet's own files), mutated memory files
// (memLoadInputs), and the kubelet configurations of the start-up tables
// (startConfigs on startMachines), each kubelet's settings carried by its
// config file, by flags over a file that sets none of them
// (--cpu-manager-policy=static --reserved-cpus=0 ...), by a --config-dir
// drop-in, and with --feature-gates=AllAlpha=true or AllBeta=true, its
// state files in a --root-dir elsewhere: preflight exits 2 only where the
// kubelet refuses to start, and after preflight the kubelet's managers
// start on the files it judged.
func TestPreflightExit2OnlyWhereKubeletRefuses(t *testing.T) {
	t.Run("cpu topology changes", func(t *testing.T) {
		var c pfCount
		for _, tt := range cpuRebuildCases() {
			b, err := tt.state.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range pfVariants(true) {
				t.Run(tt.name+"/"+v.name, func(t *testing.T) {
					cm := newCPUMachine(t, tt.new)
					k := fromCPU(tt.kubelet)
					c.add(checkPreflight(t, pfMachine(cm), v.args(t, k, t.TempDir()), b, nil))
				})
			}
		}
		c.log(t, "cpu topology changes")
	})

	t.Run("cpu state files", func(t *testing.T) {
		var c pfCount
		inputs := cpuLoadInputs(t)
		for _, name := range slices.Sorted(maps.Keys(inputs)) {
			for _, gate := range []bool{false, true} {
				k := cpuKubelet{reserved: "1"}
				if gate {
					k.gates = map[string]bool{gatePodLevelResourceManagers: true}
				}
				for _, v := range pfVariants(false) {
					t.Run(fmt.Sprintf("%s/gate %v/%s", name, gate, v.name), func(t *testing.T) {
						cm := newCPUMachine(t, cpuLine(8, 1))
						c.add(checkPreflight(t, pfMachine(cm), v.args(t, fromCPU(k), t.TempDir()), inputs[name], nil))
					})
				}
			}
		}
		c.log(t, "cpu state files")
	})

	t.Run("memory topology changes", func(t *testing.T) {
		var c pfCount
		for _, tc := range memRebuildCases() {
			t.Run(tc.name, func(t *testing.T) {
				// The kubelet that admitted the pods, with its gates for
				// the time it takes.
				var oldBytes []byte
				t.Run("admitted", func(t *testing.T) {
					k := tc.kubelet
					k.setGates(t)
					oldM := newMemMachine(t, 2, []int{2048, 1048576}, tc.old...)
					oldBytes = k.allocate(t, oldM, tc.pods)
				})
				if oldBytes == nil {
					t.Skip("the kubelet under test cannot admit them")
				}
				after := tc.kubelet
				if tc.after != nil {
					after = *tc.after
				}
				for _, v := range pfVariants(true) {
					t.Run(v.name, func(t *testing.T) {
						newM := newMemMachine(t, 2, []int{2048, 1048576}, tc.new...)
						c.add(checkPreflight(t, pfMachine(newM), v.args(t, fromMem(after), t.TempDir()), nil, oldBytes))
					})
				}
			})
		}
		c.log(t, "memory topology changes")
	})

	t.Run("memory state files", func(t *testing.T) {
		var c pfCount
		inputs := memLoadInputs(t)
		for _, name := range slices.Sorted(maps.Keys(inputs)) {
			for _, k := range []memKubelet{
				{policy: memmgr.PolicyNone},
				{policy: memmgr.PolicyNone, podLevel: true},
				memVectorKubelet(memmgr.PolicyStatic),
			} {
				for _, v := range pfVariants(false) {
					t.Run(fmt.Sprintf("%s/%s gate %v/%s", name, k.policy, k.podLevel, v.name), func(t *testing.T) {
						m := memVectorMachine(t, 8)
						c.add(checkPreflight(t, pfMachine(m), v.args(t, fromMem(k), t.TempDir()), nil, inputs[name]))
					})
				}
			}
		}
		c.log(t, "memory state files")
	})

	t.Run("kubelet configurations", func(t *testing.T) {
		var c pfCount
		machines := startMachines(t)
		for _, sc := range startConfigs() {
			for _, m := range machines {
				t.Run(sc.name+"/"+m.name, func(t *testing.T) {
					c.add(checkPreflight(t, pfMachine{m.info, m.snap}, sc.kubeletArgs(t), nil, nil))
				})
			}
		}
		c.log(t, "kubelet configurations")
	})
}
