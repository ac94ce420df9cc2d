package kubeletstart

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// numaMachine is nodes NUMA nodes (and sockets) of cores CPUs each, 8 GiB
// per node, some CPUs offline.
func numaMachine(nodes, cores int, offline ...int) fixturegen.Machine {
	m := fixturegen.Machine{Sockets: nodes, CoresPerSocket: cores, ThreadsPerCore: 1, OfflineCPUs: offline, MemTotalKB: uint64(nodes) * 8 << 20}
	for i := range nodes {
		m.Nodes = append(m.Nodes, fixturegen.Node{CPUs: fixturegen.CPUs(i*cores, (i+1)*cores-1), MemTotalKB: 8 << 20})
	}
	return m
}

func snapshot(t *testing.T, m fixturegen.Machine) *topology.Snapshot {
	t.Helper()
	root := t.TempDir()
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	s, err := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc")).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// config parses a KubeletConfiguration file's body (after its kind).
func config(t *testing.T, body string) *kubeletv1beta1.KubeletConfiguration {
	t.Helper()
	kc, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + body))
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// refusal is a Refusal as the tests spell it.
type refusal struct {
	Component Component
	Kubelet   string
}

func TestCheck(t *testing.T) {
	four := numaMachine(1, 4)
	fourOneOffline := numaMachine(1, 4, 3)
	nine := numaMachine(9, 2)
	// Two sockets in one NUMA node.
	twoSockets := fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, Nodes: []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 3), MemTotalKB: 8 << 20}}}
	tests := []struct {
		name    string
		machine fixturegen.Machine
		config  string // "-" is no config file
		ignore  bool   // --experimental-allocatable-ignore-eviction
		minor   int    // 0: 36
		want    []refusal
	}{
		{name: "no config file", machine: four, config: "-"},
		{name: "an empty config file", machine: four},
		{name: "static, reserved CPU online", machine: four, config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"},

		// Feature gates.
		{name: "unknown gate", machine: four, config: "featureGates: {NoSuchGate: true, CPUManagerPolicyAlphaOptions: true}\n",
			want: []refusal{{FeatureGates, "unrecognized feature gate: NoSuchGate"}}},
		{name: "unknown gates: the first by name", machine: four, config: "featureGates: {Zzz: true, Aaa: false}\n",
			want: []refusal{{FeatureGates, "unrecognized feature gate: Aaa"}}},
		{name: "a locked gate against its lock", machine: four, config: "featureGates: {AnyVolumeDataSource: false}\n",
			want: []refusal{{FeatureGates, "cannot set feature gate AnyVolumeDataSource to false, feature is locked to true"}}},
		{name: "a locked gate at its lock", machine: four, config: "featureGates: {AnyVolumeDataSource: true}\n"},
		{name: "two locked gates", machine: four, config: "featureGates: {AnyVolumeDataSource: false, APIServerTracing: false}\n",
			want: []refusal{
				{FeatureGates, "cannot set feature gate APIServerTracing to false, feature is locked to true"},
				{FeatureGates, "cannot set feature gate AnyVolumeDataSource to false, feature is locked to true"},
			}},
		{name: "a gate 1.34 does not have", machine: four, minor: 34, config: "featureGates: {PodLevelResourceManagers: false}\n",
			want: []refusal{{FeatureGates, "unrecognized feature gate: PodLevelResourceManagers"}}},
		{name: "a dependency off", machine: four, config: "featureGates: {PodLevelResourceManagers: true, PodLevelResources: false}\n",
			want: []refusal{
				{FeatureGates, "InPlacePodLevelResourcesVerticalScaling is enabled, but depends on features that are disabled: [PodLevelResources]"},
				{FeatureGates, "PodLevelResourceManagers is enabled, but depends on features that are disabled: [PodLevelResources]"},
			}},
		{name: "AllAlpha, 1.36", machine: four, config: "featureGates: {AllAlpha: true}\n"},
		{name: "AllAlpha, 1.37: alpha gates that need a beta one that is off", machine: four, minor: 37, config: "featureGates: {AllAlpha: true}\n",
			want: []refusal{
				{FeatureGates, "CompositePodGroup is enabled, but depends on features that are disabled: [GenericWorkload]"},
				{FeatureGates, "PodGroupPreemptionPolicy is enabled, but depends on features that are disabled: [GenericWorkload]"},
				{FeatureGates, "TopologyAwareWorkloadScheduling is enabled, but depends on features that are disabled: [GenericWorkload]"},
				{FeatureGates, "WorkloadWithJob is enabled, but depends on features that are disabled: [GenericWorkload]"},
			}},
		{name: "AllAlpha with the beta gate, 1.37", machine: four, minor: 37, config: "featureGates: {AllAlpha: true, GenericWorkload: true}\n"},
		{name: "AllAlpha and AllBeta, 1.37", machine: four, minor: 37, config: "featureGates: {AllAlpha: true, AllBeta: true}\n"},
		{name: "AllBeta=false, 1.36", machine: four, config: "featureGates: {AllBeta: false}\n"},

		// The configuration's validation.
		{name: "topology policy", machine: four, config: "topologyManagerPolicy: numa\n",
			want: []refusal{{Configuration, `invalid configuration: topologyManagerPolicy (--topology-manager-policy) "numa" must be one of: ["none" "best-effort" "restricted" "single-numa-node"]`}}},
		{name: "topology scope", machine: four, config: "topologyManagerScope: node\n",
			want: []refusal{{Configuration, `invalid configuration: topologyManagerScope (--topology-manager-scope) "node" must be one of: "container", or "pod"`}}},
		{name: "healthzPort and maxPods", machine: four, config: "healthzPort: 70000\nmaxPods: -1\n",
			want: []refusal{
				{Configuration, "invalid configuration: healthzPort (--healthz-port) 70000 must be between 1 and 65535, inclusive"},
				{Configuration, "invalid configuration: maxPods (--max-pods) -1 must not be a negative number"},
			}},
		{name: "reservedSystemCPUs unparsable", machine: four, config: "reservedSystemCPUs: \"0-x\"\n",
			want: []refusal{{Configuration, `invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-x, error: strconv.Atoi: parsing "x": invalid syntax`}}},
		{name: "reservedSystemCPUs with a reserved cgroup", machine: four, config: "reservedSystemCPUs: \"0\"\nsystemReservedCgroup: /system\n",
			want: []refusal{{Configuration, "invalid configuration: can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)"}}},
		{name: "reservedMemory", machine: four, config: "reservedMemory:\n- {numaNode: 0, limits: {memory: 1Gi, cpu: \"1\"}}\n- {numaNode: 0, limits: {memory: \"0\"}}\n",
			want: []refusal{
				{Configuration, `invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted`},
				{Configuration, `invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"`},
				{Configuration, `invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory"`},
			}},

		// reservedSystemCPUs offline: any CPU manager policy.
		{name: "reservedSystemCPUs offline, policy none", machine: fourOneOffline, config: "reservedSystemCPUs: \"2-3\"\n",
			want: []refusal{{ReservedCPUs, "reserved-cpus: 2-3 is not a subset of online-cpus: 0-2"}}},

		// Reservations.
		{name: "a negative reservation", machine: four, config: "kubeReserved: {memory: -1Gi}\n",
			want: []refusal{{Reservations, `--kube-reserved value failed to parse: resource quantity for "memory" cannot be negative: -1Gi`}}},
		{name: "a hugepage reservation", machine: four, config: "systemReserved: {hugepages-2Mi: 1Gi}\n",
			want: []refusal{{Reservations, `--system-reserved value failed to parse: cannot reserve "hugepages-2Mi" resource`}}},
		{name: "an unparsable reservation", machine: four, config: "kubeReserved: {cpu: lots}\n",
			want: []refusal{{Reservations, `--kube-reserved value failed to parse: failed to parse quantity "lots" for "cpu" resource: quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`}}},
		{name: "an unknown eviction signal", machine: four, config: "evictionHard: {foo.available: 1Gi}\n",
			want: []refusal{{Reservations, "unsupported eviction signal foo.available"}}},
		{name: "an eviction percentage over 100", machine: four, config: "evictionHard: {memory.available: 150%}\n",
			want: []refusal{{Reservations, "eviction percentage threshold memory.available must be <= 100%: 150%"}}},
		{name: "a zero eviction threshold", machine: four, config: "evictionHard: {memory.available: \"0\"}\n",
			want: []refusal{{Reservations, "eviction threshold memory.available must be positive: 0"}}},
		{name: "an eviction threshold the flag leaves out of allocatable", machine: four, ignore: true, config: "evictionHard: {memory.available: \"-1\"}\n",
			want: []refusal{{Reservations, "eviction threshold memory.available must be positive: -1"}}},

		// Node allocatable.
		{name: "memory reserved above capacity", machine: four, config: "systemReserved: {memory: 9Gi}\n",
			want: []refusal{{NodeAllocatable, `invalid Node Allocatable configuration. Resource "memory" has a reservation of 9316Mi but capacity of 8Gi. Expected capacity >= reservation.`}}},
		{name: "the same without the eviction threshold", machine: four, ignore: true, config: "systemReserved: {memory: 8Gi}\n"},
		{name: "cpu and memory above capacity", machine: four, config: "kubeReserved: {cpu: \"5\", memory: 16Gi}\nevictionHard: {}\n",
			want: []refusal{{NodeAllocatable, `invalid Node Allocatable configuration. Resource "cpu" has a reservation of 5 but capacity of 4. Expected capacity >= reservation. Resource "memory" has a reservation of 16Gi but capacity of 8Gi. Expected capacity >= reservation.`}}},
		{name: "reserved CPUs above capacity after CPUs went offline", machine: fourOneOffline, config: "kubeReserved: {cpu: \"3500m\"}\n",
			want: []refusal{{NodeAllocatable, `invalid Node Allocatable configuration. Resource "cpu" has a reservation of 3500m but capacity of 3. Expected capacity >= reservation.`}}},

		// The topology manager.
		{name: "8 NUMA nodes or fewer", machine: numaMachine(8, 1), config: "topologyManagerPolicy: single-numa-node\n"},
		{name: "9 NUMA nodes, policy none", machine: nine},
		{name: "9 NUMA nodes", machine: nine, config: "topologyManagerPolicy: best-effort\n",
			want: []refusal{{TopologyManager, "unsupported on machines with more than 8 NUMA Nodes"}}},
		{name: "9 NUMA nodes, max-allowable-numa-nodes 16", machine: nine, config: "topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"16\"}\n"},
		{name: "max-allowable-numa-nodes below 8", machine: four, config: "topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}\n",
			want: []refusal{{TopologyManager, `the minimum value of "max-allowable-numa-nodes" should not be less than 8`}}},
		{name: "max-allowable-numa-nodes not a number", machine: four, config: "topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: many}\n",
			want: []refusal{{TopologyManager, `unable to convert policy option to integer "max-allowable-numa-nodes": strconv.Atoi: parsing "many": invalid syntax`}}},
		{name: "max-allowable-numa-nodes, beta in 1.34, its gate off", machine: four, minor: 34,
			config: "topologyManagerPolicy: restricted\nfeatureGates: {TopologyManagerPolicyBetaOptions: false}\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"8\"}\n",
			want:   []refusal{{TopologyManager, `topology manager policy beta-level options not enabled, but option "max-allowable-numa-nodes" provided`}}},
		{name: "max-allowable-numa-nodes, GA in 1.35", machine: four, minor: 35,
			config: "topologyManagerPolicy: restricted\nfeatureGates: {TopologyManagerPolicyBetaOptions: false}\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"8\"}\n"},
		{name: "an unknown topology option", machine: four, config: "topologyManagerPolicy: restricted\ntopologyManagerPolicyOptions: {closest: \"true\"}\n",
			want: []refusal{{TopologyManager, `unknown Topology Manager Policy option: "closest"`}}},
		{name: "an unknown topology option, policy none", machine: four, config: "topologyManagerPolicyOptions: {closest: \"true\"}\n"},

		// The CPU and memory managers.
		{name: "static without a cpu reservation", machine: four, config: "cpuManagerPolicy: static\n",
			want: []refusal{{CPUManager, "[cpumanager] unable to determine reserved CPU resources for static policy"}}},
		{name: "an unknown CPU manager policy", machine: four, config: "cpuManagerPolicy: Static\n",
			want: []refusal{{CPUManager, `unknown policy: "Static"`}}},
		{name: "align-by-socket on more sockets than NUMA nodes", machine: twoSockets,
			config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nfeatureGates: {CPUManagerPolicyAlphaOptions: true}\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n",
			want:   []refusal{{CPUManager, "new static policy error: Align by socket is not compatible with hardware where number of sockets are more than number of NUMA"}}},
		{name: "align-by-socket, a socket per NUMA node", machine: numaMachine(2, 2),
			config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nfeatureGates: {CPUManagerPolicyAlphaOptions: true}\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n"},
		{name: "align-by-socket with single-numa-node", machine: four,
			config: "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\nfeatureGates: {CPUManagerPolicyAlphaOptions: true}\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n",
			want:   []refusal{{CPUManager, "new static policy error: Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option"}}},
		{name: "more reserved CPUs than online", machine: fourOneOffline, config: "cpuManagerPolicy: static\nkubeReserved: {cpu: \"3\"}\nevictionHard: {}\n"},
		{name: "Static memory manager without reservedMemory", machine: four, config: "memoryManagerPolicy: Static\n",
			want: []refusal{{MemoryManager, `the total amount "0" of type "memory" is not equal to the value "100Mi" determined by Node Allocatable feature`}}},
		{name: "reservedMemory on a NUMA node gone", machine: four, config: "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 1, limits: {memory: 100Mi}}]\n",
			want: []refusal{{MemoryManager, "the reserved memory configuration references a NUMA node 1 that does not exist on this machine"}}},
		{name: "BestEffort memory manager", machine: four, config: "memoryManagerPolicy: BestEffort\n",
			want: []refusal{{MemoryManager, `policy "BestEffort" is not available for platform "linux"`}}},

		// Several at once, in the kubelet's order.
		{name: "everything at once", machine: nine,
			config: "topologyManagerPolicy: best-effort\nreservedSystemCPUs: \"0-1\"\ncpuManagerPolicy: static\nmemoryManagerPolicy: Static\nsystemReserved: {memory: 80Gi}\n",
			want: []refusal{
				{TopologyManager, "unsupported on machines with more than 8 NUMA Nodes"},
				{MemoryManager, `the total amount "0" of type "memory" is not equal to the value "82020Mi" determined by Node Allocatable feature`},
				{NodeAllocatable, `invalid Node Allocatable configuration. Resource "memory" has a reservation of 82020Mi but capacity of 72Gi. Expected capacity >= reservation.`},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			minor := tt.minor
			if minor == 0 {
				minor = 36
			}
			var kc *kubeletv1beta1.KubeletConfiguration
			if tt.config != "-" {
				kc = config(t, tt.config)
			}
			err := Check(Input{Config: kc, AllocatableIgnoresEviction: tt.ignore, Release: kubeletversion.ByMinor(minor), Snapshot: snapshot(t, tt.machine)})
			var got []refusal
			for _, r := range Refusals(err) {
				got = append(got, refusal{r.Component, r.Kubelet})
				if r.Paraphrase {
					t.Errorf("%s: paraphrased: %s", r.Component, r.Kubelet)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("refusals (-want +got):\n%s", diff)
			}
			if (err != nil) != (len(tt.want) > 0) || (err != nil && !errors.Is(err, ErrRefused)) {
				t.Errorf("Check() = %v", err)
			}
		})
	}
}

func TestCheckUnknownRelease(t *testing.T) {
	err := Check(Input{Snapshot: snapshot(t, numaMachine(1, 2))})
	if !errors.Is(err, kubeletversion.ErrUnknown) || errors.Is(err, ErrRefused) {
		t.Errorf("Check() without a release = %v, want ErrUnknown", err)
	}
}

func TestErrorMessage(t *testing.T) {
	err := Check(Input{Config: config(t, "featureGates: {Nope: true}\n"), Release: kubeletversion.ByMinor(35), Snapshot: snapshot(t, numaMachine(1, 2))})
	const want = "kubeletstart: kubelet 1.35 would refuse to start: feature gates: unrecognized feature gate: Nope"
	if err == nil || err.Error() != want {
		t.Errorf("Check() = %v, want %q", err, want)
	}
}

// TestEveryReleaseHasGates: every release hotplugd knows has its gate
// table, and the table knows the gates the release row names.
func TestEveryReleaseHasGates(t *testing.T) {
	for _, r := range kubeletversion.Releases() {
		tab := gateTableFor(r.Minor)
		if tab == nil {
			t.Errorf("%s: no gate table", r)
			continue
		}
		if tab.release != r.Tested.String() {
			t.Errorf("%s: table read off %s", r, tab.release)
		}
		for name, g := range r.Gates {
			spec, ok := tab.gates[name]
			if !ok {
				t.Errorf("%s: gate %s not in the table", r, name)
				continue
			}
			if spec.def != g.Default || spec.locked != g.Locked || !strings.EqualFold(stageName(spec.stage), string(g.Stage)) {
				t.Errorf("%s: gate %s: table %+v, row %+v", r, name, spec, g)
			}
		}
	}
}

func stageName(s stage) string {
	return map[stage]string{alpha: "alpha", beta: "beta", ga: "ga", deprecated: "deprecated", preAlpha: "prealpha"}[s]
}

// TestGatesEnabled: explicit settings win over AllAlpha/AllBeta, which set
// the gates of their stage; unset gates keep their default.
func TestGatesEnabled(t *testing.T) {
	tab := gateTableFor(36)
	for _, tt := range []struct {
		set  map[string]bool
		name string
		want bool
	}{
		{nil, "PodLevelResourceManagers", false},
		{map[string]bool{"AllAlpha": true}, "PodLevelResourceManagers", true},
		{map[string]bool{"AllAlpha": true, "PodLevelResourceManagers": false}, "PodLevelResourceManagers", false},
		{map[string]bool{"AllBeta": false}, "PodLevelResources", false},
		{map[string]bool{"AllBeta": false, "PodLevelResources": true}, "PodLevelResources", true},
		{nil, "PodLevelResources", true},
	} {
		fg, errs := tab.set(tt.set)
		if errs != nil {
			t.Errorf("set(%v): %v", tt.set, errs)
			continue
		}
		if got := fg.Enabled(tt.name); got != tt.want {
			t.Errorf("set(%v).Enabled(%s) = %v, want %v", tt.set, tt.name, got, tt.want)
		}
	}
}
