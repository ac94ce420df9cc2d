package kubeletcompat_test

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	utilerrors "k8s.io/apimachinery/pkg/util/errors"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletstart"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// startMachine is a machine as the kubelet (cAdvisor) and hotplugd read it.
type startMachine struct {
	name string
	info *oracle.MachineInfo
	snap *topology.Snapshot
}

// startMachines are machines whose CPUs, NUMA nodes, memory and hugepages
// change what the kubelet accepts: a small one, the same with a CPU
// offline, two NUMA nodes with hugepages, 8 and 9 NUMA nodes (the topology
// manager's limit), two sockets in one NUMA node, and two sockets without
// NUMA nodes.
func startMachines(t *testing.T) []startMachine {
	t.Helper()
	numa := func(nodes, cores int, offline ...int) fixturegen.Machine {
		m := fixturegen.Machine{Sockets: nodes, CoresPerSocket: cores, ThreadsPerCore: 1, OfflineCPUs: offline}
		for i := range nodes {
			m.Nodes = append(m.Nodes, fixturegen.Node{CPUs: fixturegen.CPUs(i*cores, (i+1)*cores-1), MemTotalKB: 4 << 20})
		}
		return m
	}
	hugepages := numa(2, 2)
	hugepages.HugePageSizesKB = []int{2048, 1048576}
	for i := range hugepages.Nodes {
		hugepages.Nodes[i].HugePages = map[int]int{2048: 256}
	}
	specs := []struct {
		name string
		m    fixturegen.Machine
	}{
		{"4 CPUs", numa(1, 4)},
		{"4 CPUs, CPU 3 offline", numa(1, 4, 3)},
		{"2 NUMA nodes with hugepages", hugepages},
		{"8 NUMA nodes", numa(8, 1)},
		{"9 NUMA nodes", numa(9, 1)},
		{"2 sockets in 1 NUMA node", fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1,
			Nodes: []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 3), MemTotalKB: 8 << 20}}}},
		{"2 sockets, no NUMA", fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, NoNUMA: true,
			Nodes: []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 3), MemTotalKB: 8 << 20}}}},
	}
	out := make([]startMachine, len(specs))
	for i, s := range specs {
		info, snap := readTree(t, s.m)
		out[i] = startMachine{name: s.name, info: info, snap: snap}
	}
	return out
}

// startConfig is a kubelet: its config file (none when noFile) and the
// other arguments of its command line.
type startConfig struct {
	name   string
	noFile bool
	yaml   string // after the kind
	args   []string
}

// startConfigs are configurations that each trip (or just pass) one of
// the kubelet's start-up checks on some of startMachines, by release.
func startConfigs() []startConfig {
	static := "cpuManagerPolicy: static\n"
	align := "featureGates: {CPUManagerPolicyAlphaOptions: true}\ncpuManagerPolicyOptions: {align-by-socket: \"true\"}\n"
	restricted := "topologyManagerPolicy: restricted\n"
	return []startConfig{
		{name: "no config file", noFile: true},
		{name: "empty config file"},
		{name: "no config file, static by flag", noFile: true, args: []string{"--cpu-manager-policy=static", "--reserved-cpus=0"}},
		{name: "static by flag", args: []string{"--cpu-manager-policy=static", "--reserved-cpus=0"}},
		{name: "static, CPU 3 reserved", yaml: static + "reservedSystemCPUs: \"3\"\n"},
		{name: "none, CPUs 2-3 reserved", yaml: "reservedSystemCPUs: \"2-3\"\n"},
		{name: "reserved CPUs unparsable", yaml: "reservedSystemCPUs: \"0-x\"\n"},
		{name: "reserved CPUs with a reserved cgroup", yaml: "reservedSystemCPUs: \"0\"\nkubeReservedCgroup: /kube\n"},
		{name: "static without a cpu reservation", yaml: static},
		{name: "static, 1 CPU reserved", yaml: static + "kubeReserved: {cpu: \"1\"}\n"},
		{name: "static, 3.5 CPUs reserved", yaml: static + "kubeReserved: {cpu: 3500m}\nevictionHard: {}\n"},
		{name: "static, 4 CPUs reserved", yaml: static + "systemReserved: {cpu: \"4\"}\nevictionHard: {}\n"},
		{name: "unknown CPU manager policy", yaml: "cpuManagerPolicy: Static\n"},
		{name: "none with options", yaml: "cpuManagerPolicyOptions: {full-pcpus-only: \"true\"}\n"},
		{name: "static, an unknown option", yaml: static + "reservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {pin-harder: \"true\"}\n"},
		{name: "static, an alpha option without its gate", yaml: static + "reservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {distribute-cpus-across-cores: \"true\"}\n"},
		{name: "static, strict-cpu-reservation without the beta gate", yaml: static + "reservedSystemCPUs: \"0\"\nfeatureGates: {CPUManagerPolicyBetaOptions: false}\ncpuManagerPolicyOptions: {strict-cpu-reservation: \"true\"}\n"},
		{name: "static, a bad option value", yaml: static + "reservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {full-pcpus-only: \"yes\"}\n"},
		{name: "static, align-by-socket", yaml: static + "reservedSystemCPUs: \"0\"\n" + align},
		{name: "static, align-by-socket with single-numa-node", yaml: static + "reservedSystemCPUs: \"0\"\ntopologyManagerPolicy: single-numa-node\n" + align},
		{name: "topology restricted", yaml: restricted},
		{name: "topology single-numa-node, pod scope", yaml: "topologyManagerPolicy: single-numa-node\ntopologyManagerScope: pod\n"},
		{name: "topology best-effort by flag", args: []string{"--topology-manager-policy=best-effort"}},
		{name: "topology max 16", yaml: restricted + "topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"16\"}\n"},
		{name: "topology max 4", yaml: restricted + "topologyManagerPolicyOptions: {max-allowable-numa-nodes: \"4\"}\n"},
		{name: "topology max not a number", yaml: restricted + "topologyManagerPolicyOptions: {max-allowable-numa-nodes: many}\n"},
		{name: "topology max without the beta gate", yaml: restricted + "featureGates: {TopologyManagerPolicyBetaOptions: false}\ntopologyManagerPolicyOptions: {max-allowable-numa-nodes: \"9\"}\n"},
		{name: "topology options without their gate", yaml: restricted + "featureGates: {TopologyManagerPolicyOptions: false}\ntopologyManagerPolicyOptions: {prefer-closest-numa-nodes: \"true\"}\n"},
		{name: "topology prefer-closest bad value", yaml: restricted + "topologyManagerPolicyOptions: {prefer-closest-numa-nodes: maybe}\n"},
		{name: "topology unknown option", yaml: restricted + "topologyManagerPolicyOptions: {closest: \"true\"}\n"},
		{name: "topology policy unknown", yaml: "topologyManagerPolicy: numa\n"},
		{name: "topology scope unknown", yaml: "topologyManagerScope: node\n"},
		{name: "healthzPort out of range", yaml: "healthzPort: 70000\n"},
		{name: "maxPods and podsPerCore negative", yaml: "maxPods: -1\npodsPerCore: -2\n"},
		{name: "memory Static, 100Mi reserved", yaml: "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n"},
		{name: "memory Static, reservedMemory short", yaml: "memoryManagerPolicy: Static\nsystemReserved: {memory: 1Gi}\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n"},
		{name: "memory Static, node 1", yaml: "memoryManagerPolicy: Static\nreservedMemory: [{numaNode: 1, limits: {memory: 100Mi}}]\n"},
		{name: "memory Static without reservedMemory", yaml: "memoryManagerPolicy: Static\n"},
		{name: "memory Static, hugepages reserved", yaml: "memoryManagerPolicy: Static\nevictionHard: {}\nreservedMemory: [{numaNode: 0, limits: {memory: 64Mi, hugepages-2Mi: 64Mi}}]\nkubeReserved: {memory: 64Mi}\n"},
		{name: "memory Static, ignoring eviction", yaml: "memoryManagerPolicy: Static\nsystemReserved: {memory: 100Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 100Mi}}]\n",
			args: []string{"--experimental-allocatable-ignore-eviction"}},
		{name: "memory BestEffort", yaml: "memoryManagerPolicy: BestEffort\n"},
		{name: "memory unknown policy", yaml: "memoryManagerPolicy: static\n"},
		{name: "reservedMemory invalid", yaml: "reservedMemory:\n- {numaNode: 0, limits: {memory: \"0\", cpu: \"1\"}}\n- {numaNode: 0, limits: {memory: 1Gi}}\n"},
		{name: "memory reserved above capacity", yaml: "systemReserved: {memory: 10Gi}\n"},
		{name: "memory reserved above capacity, eviction ignored", yaml: "systemReserved: {memory: 4Gi}\nkubeReserved: {memory: 3994Mi}\n",
			args: []string{"--experimental-allocatable-ignore-eviction"}},
		{name: "cpu reserved above capacity", yaml: "kubeReserved: {cpu: \"5\"}\n"},
		{name: "negative reservation", yaml: "kubeReserved: {memory: -1Gi}\n"},
		{name: "hugepage reservation", yaml: "systemReserved: {hugepages-2Mi: 1Gi}\n"},
		{name: "unparsable reservation", yaml: "kubeReserved: {cpu: lots}\n"},
		{name: "reservation by flag", yaml: "kubeReserved: {memory: 1Gi}\n", args: []string{"--system-reserved=memory=9Gi"}},
		{name: "eviction unknown signal", yaml: "evictionHard: {foo.available: 1Gi}\n"},
		{name: "eviction above 100%", yaml: "evictionHard: {memory.available: 150%}\n"},
		{name: "eviction zero", yaml: "evictionHard: {memory.available: \"0\"}\n"},
		{name: "eviction unparsable percentage", yaml: "evictionHard: {memory.available: x%}\n"},
		{name: "eviction negative, ignored for allocatable", yaml: "evictionHard: {memory.available: \"-1\"}\n", args: []string{"--experimental-allocatable-ignore-eviction"}},
		{name: "unknown gate", yaml: "featureGates: {NoSuchGate: true}\n"},
		{name: "unknown gate by flag", args: []string{"--feature-gates=NoSuchGate=true"}},
		{name: "locked gate against its lock", yaml: "featureGates: {AnyVolumeDataSource: false}\n"},
		{name: "PodLevelResourceManagers", yaml: "featureGates: {PodLevelResourceManagers: true}\n"},
		{name: "PodLevelResourceManagers without PodLevelResources", yaml: "featureGates: {PodLevelResourceManagers: true, PodLevelResources: false}\n"},
		{name: "AllAlpha", args: []string{"--feature-gates=AllAlpha=true"}},
		{name: "AllAlpha and GenericWorkload", args: []string{"--feature-gates=AllAlpha=true,GenericWorkload=true"}},
		{name: "AllBeta", args: []string{"--feature-gates=AllBeta=true"}},
		{name: "AllBeta off", args: []string{"--feature-gates=AllBeta=false"}},
		{name: "AllAlpha, static with options", yaml: static + "reservedSystemCPUs: \"0\"\ncpuManagerPolicyOptions: {distribute-cpus-across-cores: \"true\", full-pcpus-only: \"false\"}\n",
			args: []string{"--feature-gates=AllAlpha=true,AllBeta=true"}},
		{name: "everything at once", yaml: "topologyManagerPolicy: best-effort\nreservedSystemCPUs: \"0-1\"\ncpuManagerPolicy: static\nmemoryManagerPolicy: Static\nsystemReserved: {memory: 40Gi}\n"},
	}
}

// kubeletArgs writes the case's config file (unless noFile) and returns the
// kubelet's arguments.
func (c startConfig) kubeletArgs(t *testing.T) []string {
	t.Helper()
	if c.noFile {
		return c.args
	}
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte(header+c.yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return append([]string{"--config", p}, c.args...)
}

// stepComponent maps the kubelet's start-up steps (oracle.Step*) to the
// components kubeletstart names; a step missing here is one kubeletstart
// does not judge.
var stepComponent = map[string]kubeletstart.Component{
	oracle.StepFeatureGates:    kubeletstart.FeatureGates,
	oracle.StepValidation:      kubeletstart.Configuration,
	oracle.StepReservedCPUs:    kubeletstart.ReservedCPUs,
	oracle.StepReservations:    kubeletstart.Reservations,
	oracle.StepTopologyOptions: kubeletstart.TopologyManager,
	oracle.StepTopologyManager: kubeletstart.TopologyManager,
	oracle.StepCPUManager:      kubeletstart.CPUManager,
	oracle.StepMemoryManager:   kubeletstart.MemoryManager,
	oracle.StepEviction:        kubeletstart.Reservations,
	oracle.StepNodeAllocatable: kubeletstart.NodeAllocatable,
}

// validatedFields are the beginnings of the validation errors kubeletstart
// covers (the fields hotplugd reads).
var validatedFields = []string{
	"invalid configuration: healthzPort ", "invalid configuration: maxPods ", "invalid configuration: podsPerCore ",
	"invalid configuration: topologyManagerPolicy ", "invalid configuration: topologyManagerScope ",
	"invalid configuration: can't use reservedSystemCPUs ", "invalid configuration: unable to parse reservedSystemCPUs ",
	"invalid configuration: the limit type ", "invalid configuration: reserved memory may not be zero ",
	"invalid configuration: the reserved memory has a duplicate value ",
}

// kubeletWords are the messages of the kubelet's refusal err at a step
// kubeletstart judges: one, or for an aggregate (feature gates, validation)
// each of its messages, sorted; for validation only those kubeletstart
// covers. nil when the step is not judged.
func kubeletWords(serr *oracle.StartError) []string {
	if _, ok := stepComponent[serr.Step]; !ok {
		return nil
	}
	var msgs []string
	var agg utilerrors.Aggregate
	if errors.As(serr.Err, &agg) {
		for _, e := range agg.Errors() {
			msgs = append(msgs, e.Error())
		}
	} else {
		msgs = []string{serr.Err.Error()}
	}
	if serr.Step == oracle.StepValidation {
		msgs = slices.DeleteFunc(msgs, func(m string) bool {
			return !slices.ContainsFunc(validatedFields, func(p string) bool { return strings.HasPrefix(m, p) })
		})
		if len(msgs) == 0 {
			return nil
		}
	}
	slices.Sort(msgs)
	return msgs
}

// kubeletStartVerdict runs the kubelet's own start-up (its command line,
// configuration, managers and container manager Start with an empty state
// directory) on machine m.
func kubeletStartVerdict(t *testing.T, args []string, m startMachine) *oracle.StartError {
	t.Helper()
	k, err := oracle.KubeletFromArgs(t, args)
	if err == nil {
		k.ApplyFeatureGates(t)
		err = k.Start(m.info, t.TempDir())
	}
	if err == nil {
		return nil
	}
	var serr *oracle.StartError
	if !errors.As(err, &serr) {
		t.Fatalf("the oracle: %v", err)
	}
	return serr
}

// TestKubeletStartMatchesKubelet runs, for every machine and kubelet
// configuration of the tables, the kubelet's own start-up (the release
// under test: its flags, feature gates, configuration validation,
// getReservedCPUs, reservation and eviction parsing, topology, CPU and
// memory managers' NewManager and Start, node allocatable validation) and
// kubeletstart.Check on the same command line read by kubeletconfig.FromArgs,
// and checks that kubeletstart refuses exactly where the kubelet refuses at
// a step it judges, first with the kubelet's own words (for feature gates
// and validation, the same messages), and never where the kubelet starts.
func TestKubeletStartMatchesKubelet(t *testing.T) {
	rel := hotplugdRelease(t)
	machines := startMachines(t)
	refusedBy := map[string]int{}
	cases, agreed := 0, 0
	for _, c := range startConfigs() {
		t.Run(c.name, func(t *testing.T) {
			for _, m := range machines {
				t.Run(m.name, func(t *testing.T) {
					cases++
					args := c.kubeletArgs(t)
					serr := kubeletStartVerdict(t, args, m)
					k, err := kubeletconfig.FromArgs(args, "/")
					if err != nil {
						if serr == nil || serr.Step != oracle.StepFlags {
							t.Fatalf("kubeletconfig.FromArgs: %v; the kubelet: %v", err, serr)
						}
						return
					}
					cerr := kubeletstart.Check(kubeletstart.Input{Config: k.Config, AllocatableIgnoresEviction: k.AllocatableIgnoresEviction, Release: rel, Snapshot: m.snap})
					refusals := kubeletstart.Refusals(cerr)
					if cerr != nil && refusals == nil {
						t.Fatalf("kubeletstart.Check: %v", cerr)
					}
					for _, r := range refusals {
						if r.Paraphrase {
							t.Errorf("a paraphrase: %s", r)
						}
					}
					switch {
					case serr == nil && refusals != nil:
						t.Fatalf("the kubelet starts; kubeletstart says it refuses: %v", cerr)
					case serr == nil:
						agreed++
						return
					}
					want := kubeletWords(serr)
					if want == nil {
						// A step kubeletstart does not judge: any verdict
						// goes, the kubelet refuses anyway.
						t.Logf("the kubelet refuses at a step kubeletstart does not judge: %v (kubeletstart: %v)", serr, cerr)
						agreed++
						return
					}
					if refusals == nil {
						t.Fatalf("the kubelet refuses (%v); kubeletstart says it starts", serr)
					}
					first := refusals[0]
					var got []string
					for _, r := range refusals {
						if r.Component == first.Component {
							got = append(got, r.Kubelet)
						}
					}
					slices.Sort(got)
					if first.Component != stepComponent[serr.Step] || !slices.Equal(got, want) {
						t.Fatalf("the kubelet refuses at %s:\n  %q\nkubeletstart at %s:\n  %q", serr.Step, want, first.Component, got)
					}
					refusedBy[string(first.Component)]++
					agreed++
				})
			}
		})
	}
	var parts []string
	for _, c := range slices.Sorted(maps.Keys(refusedBy)) {
		parts = append(parts, fmt.Sprintf("%s %d", c, refusedBy[c]))
	}
	t.Logf("casecount: kubeletstart: %d cases, %d agree with kubelet %s; refused by %s", cases, agreed, rel.Tested, strings.Join(parts, ", "))
}
