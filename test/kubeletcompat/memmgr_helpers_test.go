package kubeletcompat_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	hpstate "github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// memStateFile is the kubelet's checkpoint name (memoryManagerStateFileName).
const memStateFile = "memory_manager_state"

const (
	memGi = int64(1) << 30
	memMi = int64(1) << 20
)

// memMachine is a machine rendered as a fixture tree, as cAdvisor (the
// kubelet) and hotplugd each read it.
type memMachine struct {
	info *oracle.MachineInfo
	snap *topology.Snapshot
}

// memNode is one NUMA node of a test machine: memory in GiB and hugepages
// by size in KiB.
type memNode struct {
	memGiB    uint64
	hugepages map[int]int
}

// newMemMachine writes a machine with the given NUMA nodes (one socket of
// cpusPerNode cores each, the hugepage sizes in sizesKB) as a sysfs/procfs
// tree and reads it with cAdvisor's code and with hotplugd's.
func newMemMachine(t *testing.T, cpusPerNode int, sizesKB []int, nodes ...memNode) memMachine {
	t.Helper()
	m := fixturegen.Machine{
		Sockets: len(nodes), CoresPerSocket: cpusPerNode, ThreadsPerCore: 1,
		HugePageSizesKB: sizesKB,
	}
	for i, n := range nodes {
		m.Nodes = append(m.Nodes, fixturegen.Node{CPUs: fixturegen.CPUs(i*cpusPerNode, (i+1)*cpusPerNode-1), MemTotalKB: n.memGiB << 20, HugePages: n.hugepages})
	}
	info, snap := readTree(t, m)
	return memMachine{info: info, snap: snap}
}

// memKubelet is a kubelet's memory manager setup.
type memKubelet struct {
	policy string
	// reserved is reservedMemory: memory per NUMA node, as quantities.
	reserved map[int]string
	// systemReserved is systemReserved.memory; with the default 100Mi hard
	// eviction threshold it must add up to the sum of reserved.
	systemReserved string
	// podLevel is the PodLevelResourceManagers feature gate.
	podLevel bool
}

// configFile writes the kubelet's configuration file.
func (k memKubelet) configFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: %s\n", k.policy)
	if k.systemReserved != "" {
		fmt.Fprintf(&b, "systemReserved:\n  memory: %s\n", k.systemReserved)
	}
	if len(k.reserved) > 0 {
		b.WriteString("reservedMemory:\n")
		ids := make([]int, 0, len(k.reserved))
		for id := range k.reserved {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			fmt.Fprintf(&b, "- numaNode: %d\n  limits:\n    memory: %s\n", id, k.reserved[id])
		}
	}
	if k.podLevel {
		b.WriteString("featureGates:\n  PodLevelResourceManagers: true\n  PodLevelResources: true\n")
	}
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// setGates sets the kubelet's feature gates for the rest of the test.
func (k memKubelet) setGates(t *testing.T) {
	t.Helper()
	setKubeletGates(t, map[string]bool{gatePodLevelResourceManagers: k.podLevel})
}

// hotplugdConfig is hotplugd's view of the same kubelet on machine m.
func (k memKubelet) hotplugdConfig(t *testing.T, m memMachine, dir string) memmgr.Config {
	t.Helper()
	kc, err := kubeletconfig.Load(k.configFile(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := memmgr.NewConfig(kc, m.snap, filepath.Join(dir, memStateFile), hotplugdRelease(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// newManager runs memorymanager.NewManager as the kubelet's container
// manager does (NewContainerManager): the policy, cAdvisor's machine info,
// the node allocatable reservation (GetNodeAllocatableReservation:
// systemReserved + kubeReserved + the hard eviction thresholds, from the
// configuration file as the kubelet loads it), reservedMemory and the state
// directory.
func (k memKubelet) newManager(t *testing.T, m memMachine, dir string, affinity topologymanager.Store) (memorymanager.Manager, error) {
	t.Helper()
	kc, err := oracle.KubeletConfig(k.configFile(t))
	if err != nil {
		t.Fatal(err)
	}
	reservation := memoryReservation(t, kc.SystemReserved, kc.KubeReserved, kc.EvictionHard, m.info.MemoryCapacity)
	if affinity == nil {
		affinity = oracle.NoTopologyManager()
	}
	return oracle.NewMemoryManager(kc.MemoryManagerPolicy, m.info, reservation, kc.ReservedMemory, dir, affinity)
}

// start runs NewManager and Start for machine m with the state directory
// dir and returns their error: what the kubelet reports as "start memory
// manager error: ...". Sources never become ready, so nothing is cleaned up
// as stale.
func (k memKubelet) start(t *testing.T, m memMachine, dir string) error {
	t.Helper()
	mgr, err := k.newManager(t, m, dir, nil)
	if err != nil {
		return err
	}
	return oracle.StartMemoryManager(mgr)
}

// startWith writes b as the state file in a new directory, runs start and
// returns the file afterwards and the error.
func (k memKubelet) startWith(t *testing.T, m memMachine, b []byte) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, memStateFile)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err := k.start(t, m, dir)
	after, rerr := os.ReadFile(p)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return after, err
}

// memPod is a Guaranteed pod with one container per entry of containers,
// placed by the topology manager on nodes. With podMemory it has pod-level
// resources (cpu 2, podMemory of memory) and is admitted as a whole
// (AllocatePod, PodLevelResourceManagers); a container without memory then
// runs in the pod's shared pool.
type memPod struct {
	uid        string
	nodes      []int
	podMemory  int64
	containers []memContainer
}

type memContainer struct {
	name      string
	memory    int64
	hugepages int64 // hugepages-2Mi
}

func (p memPod) pod() *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(p.uid)
	pod.Name = "pod-" + p.uid[:8]
	pod.Namespace = "default"
	if p.podMemory > 0 {
		rl := v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("2"),
			v1.ResourceMemory: *resource.NewQuantity(p.podMemory, resource.BinarySI),
		}
		pod.Spec.Resources = &v1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
	}
	for _, c := range p.containers {
		if c.memory == 0 {
			pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: c.name})
			continue
		}
		rl := v1.ResourceList{
			v1.ResourceCPU:    resource.MustParse("1"),
			v1.ResourceMemory: *resource.NewQuantity(c.memory, resource.BinarySI),
		}
		if c.hugepages > 0 {
			rl["hugepages-2Mi"] = *resource.NewQuantity(c.hugepages, resource.BinarySI)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name:      c.name,
			Resources: v1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		})
	}
	return pod
}

// allocate starts the kubelet's memory manager on machine m without a state
// file and admits the pods in order (Allocate for each container, or
// AllocatePod for a pod with pod-level resources, as pod admission does),
// and returns the state file it wrote.
func (k memKubelet) allocate(t *testing.T, m memMachine, pods []memPod) []byte {
	t.Helper()
	dir := t.TempDir()
	aff := oracle.Affinity{}
	for _, p := range pods {
		mask, err := bitmask.NewBitMask(p.nodes...)
		if err != nil {
			t.Fatal(err)
		}
		aff[p.uid] = topologymanager.TopologyHint{NUMANodeAffinity: mask, Preferred: true}
	}
	mgr, err := k.newManager(t, m, dir, aff)
	if err != nil {
		t.Fatal(err)
	}
	if err := oracle.StartMemoryManager(mgr); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		pod := p.pod()
		if p.podMemory > 0 {
			if err := oracle.AllocateMemoryPod(mgr, pod); err != nil {
				t.Fatalf("kubelet AllocatePod %s: %v", p.uid, err)
			}
			continue
		}
		for i := range pod.Spec.Containers {
			if err := oracle.AllocateMemory(mgr, pod, &pod.Spec.Containers[i]); err != nil {
				t.Fatalf("kubelet Allocate %s/%s: %v", p.uid, pod.Spec.Containers[i].Name, err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, memStateFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// loadAndStore loads the state file b with the kubelet's checkpoint code
// (state.NewCheckpointState, the gates as set) and has it store what it
// loaded; it returns the bytes the kubelet writes for that state.
func memLoadAndStore(t *testing.T, policy string, b []byte) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, memStateFile)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := memstate.NewCheckpointState(logr.Discard(), dir, memStateFile, policy)
	if err != nil {
		return nil, err
	}
	st.SetMachineState(st.GetMachineState())
	out, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return out, nil
}

// memKubeletWrites builds hotplugd's state s with the kubelet's own state
// code (a new checkpoint, then the machine state, assignments and, with the
// gate, pod assignments set through its interface) and returns the file it
// writes.
func memKubeletWrites(t *testing.T, s *memmgr.State) []byte {
	t.Helper()
	dir := t.TempDir()
	st, err := memstate.NewCheckpointState(logr.Discard(), dir, memStateFile, s.PolicyName)
	if err != nil {
		t.Fatal(err)
	}
	var ms memstate.NUMANodeMap
	var entries memstate.ContainerMemoryAssignments
	convert(t, s.MachineState, &ms)
	convert(t, s.Entries, &entries)
	st.SetMachineState(ms)
	st.SetMemoryAssignments(entries)
	if kubeletGateEnabled(gatePodLevelResourceManagers) {
		if err := oracle.SetPodMemoryAssignments(st, s.PodEntries); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, memStateFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// convert copies between hotplugd's and the kubelet's state types, which
// share their JSON form.
func convert(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// memNormalized re-marshals a state with each container's blocks sorted by
// resource, for comparing files whose block order came from the kubelet's
// map iteration.
func memNormalized(t *testing.T, b []byte) string {
	t.Helper()
	s, err := memmgr.Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	for _, containers := range s.Entries {
		for _, blocks := range containers {
			slices.SortFunc(blocks, func(x, y hpstate.Block) int { return strings.Compare(string(x.Type), string(y.Type)) })
		}
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// memErrText is an error's text, "" for nil.
func memErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// memKubeletMessage is what hotplugd says the kubelet says: the Kubelet
// field of a memmgr.KubeletError, "" for nil.
func memKubeletMessage(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var ke *memmgr.KubeletError
	if !errors.As(err, &ke) {
		t.Fatalf("%v is no *memmgr.KubeletError", err)
	}
	return ke.Kubelet
}

// memoryReservation is the node allocatable reservation of memory the
// kubelet's container manager hands its memory manager
// (GetNodeAllocatableReservation): systemReserved + kubeReserved + the
// memory.available hard eviction threshold, parsed by the kubelet's own
// eviction code.
func memoryReservation(t *testing.T, systemReserved, kubeReserved, evictionHard map[string]string, memoryCapacity uint64) v1.ResourceList {
	t.Helper()
	reservation := v1.ResourceList{}
	add := func(q resource.Quantity) {
		v := reservation[v1.ResourceMemory]
		v.Add(q)
		reservation[v1.ResourceMemory] = v
	}
	for _, r := range []map[string]string{systemReserved, kubeReserved} {
		if s, ok := r[string(v1.ResourceMemory)]; ok {
			add(resource.MustParse(s))
		}
	}
	thresholds, err := eviction.ParseThresholdConfig([]string{}, evictionHard, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	capacity := resource.NewQuantity(int64(memoryCapacity), resource.BinarySI)
	for _, th := range thresholds {
		if th.Signal == evictionapi.SignalMemoryAvailable && th.Operator == evictionapi.OpLessThan {
			add(*evictionapi.GetThresholdQuantity(th.Value, capacity))
		}
	}
	return reservation
}
