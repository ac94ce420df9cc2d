package kubeletcompat_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
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

// memKubeletStart starts the kubelet's memory manager (NewManager, then
// Start with the state directory dir) on machine m as a kubelet started
// with --config=configPath and the other args does, and returns the error
// it exits with, in the kubelet's order:
//   - the flags parsed by the kubelet's own options.KubeletFlags;
//   - cmd/kubelet/app/server.go run(): the configuration loaded and
//     validated, then evictionHard parsed into
//     NodeAllocatableConfig.HardEvictionThresholds only without
//     --experimental-allocatable-ignore-eviction;
//   - NewContainerManager: NewManager with GetNodeAllocatableReservation
//     (node_container_manager_linux.go: systemReserved + kubeReserved +
//     hardEvictionReservation of those thresholds, helpers.go, for each
//     resource of cadvisor.CapacityFromMachineInfo, zeros left out);
//   - NewMainKubelet: evictionHard parsed again for the eviction manager,
//     whatever the flag;
//   - the container manager's Start: the memory manager's Start.
//
// GetNodeAllocatableReservation and hardEvictionReservation are
// unexported upstream and rewritten here; everything else is the
// kubelet's code.
func memKubeletStart(t *testing.T, m memMachine, configPath string, args []string, dir string) error {
	t.Helper()
	flags := options.NewKubeletFlags()
	fs := pflag.NewFlagSet("kubelet", pflag.ContinueOnError)
	flags.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	kc, err := oracle.KubeletConfig(configPath)
	if err != nil {
		t.Fatal(err)
	}
	var thresholds []evictionapi.Threshold
	if !flags.ExperimentalNodeAllocatableIgnoreEvictionThreshold {
		if thresholds, err = eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil); err != nil {
			return err
		}
	}
	capacity := cadvisor.CapacityFromMachineInfo(m.info)
	evictionReservation := v1.ResourceList{}
	for _, th := range thresholds {
		if th.Operator == evictionapi.OpLessThan && th.Signal == evictionapi.SignalMemoryAvailable {
			c := capacity[v1.ResourceMemory]
			evictionReservation[v1.ResourceMemory] = *evictionapi.GetThresholdQuantity(th.Value, &c)
		}
	}
	reservation := v1.ResourceList{}
	for name := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		for _, r := range []map[string]string{kc.SystemReserved, kc.KubeReserved} {
			if q, ok := r[string(name)]; ok {
				value.Add(resource.MustParse(q))
			}
		}
		value.Add(evictionReservation[name])
		if !value.IsZero() {
			reservation[name] = *value
		}
	}
	mgr, err := oracle.NewMemoryManager(kc.MemoryManagerPolicy, m.info, reservation, kc.ReservedMemory, dir, oracle.NoTopologyManager())
	if err != nil {
		return err
	}
	if _, err := eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil); err != nil {
		return err
	}
	return oracle.StartMemoryManager(mgr)
}

// memConfigFile writes a Static kubelet's configuration file with body
// after its kind.
func memConfigFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: Static\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// hotplugdMemConfig is hotplugd's view of a kubelet started with
// --config=configPath and args: its command line read as hotplugd reads a
// running kubelet's (kubeletconfig.FromArgs), the flags handed to
// memmgr.NewConfigWithFlags.
func hotplugdMemConfig(t *testing.T, m memMachine, configPath string, args []string, dir string) (memmgr.Config, error) {
	t.Helper()
	k, err := kubeletconfig.FromArgs(append([]string{"--config", configPath}, args...), "/")
	if err != nil {
		t.Fatal(err)
	}
	return memmgr.NewConfigWithFlags(k.Config, memmgr.KubeletFlags{AllocatableIgnoresEviction: k.AllocatableIgnoresEviction}, m.snap, filepath.Join(dir, memStateFile), hotplugdRelease(t))
}

// TestMemoryManagerParityIgnoreEviction: with and without
// --experimental-allocatable-ignore-eviction, the kubelet's memory manager
// and hotplugd agree on whether reservedMemory adds up to the node
// allocatable reservation (with the flag it holds no hard eviction
// threshold), word for word, and on the state file of a first start, byte
// for byte. A configuration the kubelet refuses before its memory manager
// (an evictionHard it cannot parse) is refused by NewConfigWithFlags.
func TestMemoryManagerParityIgnoreEviction(t *testing.T) {
	const ignore = "--experimental-allocatable-ignore-eviction"
	for _, tc := range []struct {
		name    string
		config  string
		args    []string
		wantErr bool // the kubelet's verdict, as a check on the case
	}{
		{name: "default threshold, reservedMemory with it",
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n"},
		{name: "default threshold ignored, reservedMemory with it", args: []string{ignore}, wantErr: true,
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n"},
		{name: "default threshold ignored, reservedMemory without it", args: []string{ignore},
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n"},
		{name: "default threshold, reservedMemory without it", wantErr: true,
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n"},
		{name: "flag given as =true", args: []string{ignore + "=true"},
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n"},
		{name: "flag given as =false", args: []string{ignore + "=false"},
			config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n"},
		{name: "percentage threshold ignored", args: []string{ignore},
			config: "systemReserved: {memory: 512Mi}\nkubeReserved: {memory: 256Mi}\nevictionHard: {memory.available: 5%}\nreservedMemory: [{numaNode: 0, limits: {memory: 768Mi}}]\n"},
		{name: "percentage threshold", wantErr: true,
			config: "systemReserved: {memory: 512Mi}\nkubeReserved: {memory: 256Mi}\nevictionHard: {memory.available: 5%}\nreservedMemory: [{numaNode: 0, limits: {memory: 768Mi}}]\n"},
		{name: "threshold ignored, nothing reserved", args: []string{ignore}, wantErr: true,
			config: "reservedMemory: []\n"},
		{name: "threshold ignored, evictionHard unparsable", args: []string{ignore}, wantErr: true,
			config: "systemReserved: {memory: 924Mi}\nevictionHard: {memory.available: -1Gi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			memKubelet{policy: memmgr.PolicyStatic}.setGates(t)
			m := memVectorMachine(t, 8)
			path := memConfigFile(t, tc.config)
			dir := t.TempDir()
			kerr := memKubeletStart(t, m, path, tc.args, dir)
			if (kerr != nil) != tc.wantErr {
				t.Fatalf("the kubelet says %v", kerr)
			}
			cfg, err := hotplugdMemConfig(t, m, path, tc.args, dir)
			var ke *memmgr.KubeletError
			switch {
			case err != nil && kerr != nil && !errors.As(err, &ke):
				// Refused before the memory manager, as the kubelet's
				// threshold parsing refuses it.
				return
			case err != nil:
				t.Fatalf("hotplugd: %v; the kubelet: %v", err, kerr)
			}
			s, err := memmgr.New(m.snap, cfg)
			if got, want := memKubeletMessage(t, err), memErrText(kerr); got != want {
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
			if !bytes.Equal(got, kubelet) {
				t.Errorf("state files differ\nhotplugd: %s\nkubelet:  %s", got, kubelet)
			}
		})
	}
}

// TestMemoryManagerParityIgnoreEvictionAdded: a kubelet admits pods, then
// is restarted with --experimental-allocatable-ignore-eviction and
// reservedMemory lowered by the hard eviction threshold to match. The
// kubelet refuses its old file (systemReserved changed); hotplugd says so
// too, and the kubelet starts on the file hotplugd's plan writes, leaving
// it as it is.
func TestMemoryManagerParityIgnoreEvictionAdded(t *testing.T) {
	before := memKubelet{policy: memmgr.PolicyStatic, systemReserved: "924Mi", reserved: map[int]string{0: "1Gi"}}
	before.setGates(t)
	m := memVectorMachine(t, 8)
	oldBytes := before.allocate(t, m, []memPod{{uid: memPodA, nodes: []int{0}, containers: []memContainer{{name: "app", memory: 2 * memGi, hugepages: 256 * memMi}}}})
	old, err := memmgr.Parse(oldBytes)
	if err != nil {
		t.Fatal(err)
	}

	path := memConfigFile(t, "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n")
	args := []string{"--experimental-allocatable-ignore-eviction"}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, memStateFile), oldBytes, 0o644); err != nil {
		t.Fatal(err)
	}
	kerr := memKubeletStart(t, m, path, args, dir)
	if kerr == nil {
		t.Fatal("the kubelet accepts its old file")
	}
	cfg, err := hotplugdMemConfig(t, m, path, args, dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := memKubeletMessage(t, memmgr.Validate(old, m.snap, cfg)); got != kerr.Error() {
		t.Errorf("verdicts differ\nhotplugd: %s\nkubelet:  %s", got, kerr)
	}
	plan, err := memmgr.PlanRebuild(old, m.snap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !plan.Changed || plan.Blocked() {
		t.Fatalf("plan changed %v, blocked %v:\n%s", plan.Changed, plan.Blocked(), plan)
	}
	b, err := plan.New.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	p := filepath.Join(dir, memStateFile)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := memKubeletStart(t, m, path, args, dir); err != nil {
		t.Fatalf("the kubelet refuses hotplugd's file: %v\n%s", err, b)
	}
	after, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(b), string(after)); diff != "" {
		t.Errorf("the kubelet rewrote hotplugd's file (-hotplugd +kubelet):\n%s", diff)
	}
}
