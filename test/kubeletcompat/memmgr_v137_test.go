//go:build kubelet_1_37

package kubeletcompat_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/memorymanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// Kubelet 1.37.2's memory_manager_state, by its own code: the V3 layout it
// writes (data/dataChecksum beside the V1 fields), how it verifies and
// migrates the files it finds, and hotplugd's repair of a file it wrote for
// a machine that then gained or lost memory or hugepages.

// v137Time stamps hotplugd's backups.
var v137Time = time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC)

// v137Machine is a machine with the given NUMA nodes (2 CPUs each, 2Mi
// hugepages), as cAdvisor (kubelet 1.37's, github.com/google/cadvisor/lib)
// and hotplugd each read it.
type v137Machine struct {
	info *oracle.MachineInfo
	snap *topology.Snapshot
}

type v137Node struct {
	memGiB uint64
	hp2Mi  int
}

func newV137Machine(t *testing.T, nodes ...v137Node) v137Machine {
	t.Helper()
	m := fixturegen.Machine{Sockets: len(nodes), CoresPerSocket: 2, ThreadsPerCore: 1, HugePageSizesKB: []int{2048}}
	for i, n := range nodes {
		m.Nodes = append(m.Nodes, fixturegen.Node{CPUs: fixturegen.CPUs(2*i, 2*i+1), MemTotalKB: n.memGiB << 20, HugePages: map[int]int{2048: n.hp2Mi}})
	}
	root := t.TempDir()
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	info, err := oracle.MachineInfoFromRoot(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewFS(sys, proc).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return v137Machine{info: info, snap: snap}
}

// v137Kubelet is a kubelet 1.37.2 with the Static memory manager:
// reservedMemory 1Gi on node 0 (systemReserved 924Mi plus the default
// 100Mi hard eviction threshold), or None.
type v137Kubelet struct {
	policy   string
	podLevel bool // PodLevelResourceManagers
}

func (k v137Kubelet) configFile(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: %s\nsystemReserved:\n  memory: 924Mi\n", k.policy)
	if k.policy == memmgr.PolicyStatic {
		b.WriteString("reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n")
	}
	if k.podLevel {
		b.WriteString("featureGates:\n  PodLevelResourceManagers: true\n")
	}
	p := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// setGates sets the kubelet's feature gates for the rest of the test.
func (k v137Kubelet) setGates(t *testing.T) {
	t.Helper()
	featuregatetesting.SetFeatureGatesDuringTest(t, utilfeature.DefaultFeatureGate, featuregatetesting.FeatureOverrides{
		features.PodLevelResourceManagers: k.podLevel,
	})
}

// hotplugd is hotplugd's configuration for the same kubelet, the state file
// in dir.
func (k v137Kubelet) hotplugd(t *testing.T, m v137Machine, dir string) memmgr.Config {
	t.Helper()
	kc, err := kubeletconfig.Load(k.configFile(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := memmgr.NewConfig(kc, m.snap, filepath.Join(dir, memmgr.FileName), kubeletversion.ByMinor(37))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PodLevelResourceManagers != k.podLevel {
		t.Fatalf("hotplugd reads PodLevelResourceManagers %v, the kubelet has %v", cfg.PodLevelResourceManagers, k.podLevel)
	}
	return cfg
}

// newManager is memorymanager.NewManager as the kubelet's container manager
// calls it: the node allocatable reservation from the configuration file
// as the kubelet loads it (systemReserved + kubeReserved + the
// memory.available hard eviction threshold), reservedMemory, the state
// directory.
func (k v137Kubelet) newManager(t *testing.T, m v137Machine, dir string, affinity topologymanager.Store) (memorymanager.Manager, error) {
	t.Helper()
	kc, err := oracle.KubeletConfig(k.configFile(t))
	if err != nil {
		t.Fatal(err)
	}
	reservation := memoryReservation(t, kc.SystemReserved, kc.KubeReserved, kc.EvictionHard, m.info.MemoryCapacity)
	if affinity == nil {
		affinity = topologymanager.NewFakeManager(logr.Discard())
	}
	return memorymanager.NewManager(logr.Discard(), kc.MemoryManagerPolicy, m.info, reservation, kc.ReservedMemory, dir, affinity)
}

// start runs NewManager and Start on machine m with the state file b and
// returns the file afterwards and their error (what the kubelet reports as
// "start memory manager error: ..."). Sources never become ready, so
// nothing is removed as stale.
func (k v137Kubelet) start(t *testing.T, m v137Machine, b []byte) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, memmgr.FileName)
	if b != nil {
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := k.newManager(t, m, dir, nil)
	if err == nil {
		err = v137Start(mgr)
	}
	after, rerr := os.ReadFile(p)
	if rerr != nil && b != nil {
		t.Fatal(rerr)
	}
	return after, err
}

func v137Start(mgr memorymanager.Manager) error {
	ctx := klog.NewContext(context.Background(), logr.Discard())
	return mgr.Start(ctx, func() []*v1.Pod { return nil }, v137SourcesNeverReady{}, v137NoPodStatus{}, v137NoRuntime{}, containermap.NewContainerMap())
}

type v137SourcesNeverReady struct{}

func (v137SourcesNeverReady) AddSource(string) {}
func (v137SourcesNeverReady) AllReady() bool   { return false }

type v137NoPodStatus struct{}

func (v137NoPodStatus) GetPodStatus(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false }

type v137NoRuntime struct{}

func (v137NoRuntime) UpdateContainerResources(context.Context, string, *runtimeapi.ContainerResources) error {
	return nil
}

// v137Pod is a Guaranteed pod placed by the topology manager on nodes: one
// container per entry of memory (bytes of memory, and hugepages-2Mi when
// hp is set), or with podMemory a pod with pod-level resources admitted as
// a whole (AllocatePod).
type v137Pod struct {
	uid       string
	nodes     []int
	memory    []int64
	hp        int64
	podMemory int64
}

func (p v137Pod) pod() *v1.Pod {
	pod := &v1.Pod{}
	pod.UID = types.UID(p.uid)
	pod.Name = "pod-" + p.uid[:8]
	pod.Namespace = "default"
	if p.podMemory > 0 {
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: *resource.NewQuantity(p.podMemory, resource.BinarySI)}
		pod.Spec.Resources = &v1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()}
	}
	for i, mem := range p.memory {
		rl := v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI)}
		if p.hp > 0 {
			rl["hugepages-2Mi"] = *resource.NewQuantity(p.hp, resource.BinarySI)
		}
		pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{
			Name:      fmt.Sprintf("c%d", i),
			Resources: v1.ResourceRequirements{Requests: rl, Limits: rl.DeepCopy()},
		})
	}
	return pod
}

// v137Affinity is the topology manager's decision for each pod.
type v137Affinity map[string]topologymanager.TopologyHint

func (a v137Affinity) GetAffinity(_ klog.Logger, podUID, _ string) topologymanager.TopologyHint {
	return a[podUID]
}
func (a v137Affinity) GetPolicy() topologymanager.Policy { return nil }
func (a v137Affinity) Name() string                      { return "memmgr-v137-oracle" }

// allocate starts kubelet 1.37.2's memory manager on m without a state file,
// admits the pods in order (Allocate per container, or AllocatePod), and
// returns the file its checkpoint code wrote.
func (k v137Kubelet) allocate(t *testing.T, m v137Machine, pods []v137Pod) []byte {
	t.Helper()
	dir := t.TempDir()
	aff := v137Affinity{}
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
	if err := v137Start(mgr); err != nil {
		t.Fatal(err)
	}
	ctx := klog.NewContext(context.Background(), logr.Discard())
	for _, p := range pods {
		pod := p.pod()
		if p.podMemory > 0 {
			if err := mgr.AllocatePod(logr.Discard(), pod, lifecycle.AddOperation); err != nil {
				t.Fatalf("kubelet AllocatePod %s: %v", p.uid, err)
			}
			continue
		}
		for i := range pod.Spec.Containers {
			if err := mgr.Allocate(ctx, pod, &pod.Spec.Containers[i], lifecycle.AddOperation); err != nil {
				t.Fatalf("kubelet Allocate %s/%s: %v", p.uid, pod.Spec.Containers[i].Name, err)
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, memmgr.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v137Writes builds hotplugd's state s with kubelet 1.37.2's state code (a
// new checkpoint, then the machine state, the assignments and, with the
// gate, the pod assignments set through its interface) and returns the file
// it writes.
func v137Writes(t *testing.T, s *memmgr.State) []byte {
	t.Helper()
	dir := t.TempDir()
	st, err := memstate.NewCheckpointState(logr.Discard(), dir, memmgr.FileName, s.PolicyName)
	if err != nil {
		t.Fatal(err)
	}
	var ms memstate.NUMANodeMap
	var entries memstate.ContainerMemoryAssignments
	v137Convert(t, s.MachineState, &ms)
	v137Convert(t, s.Entries, &entries)
	st.SetMachineState(ms)
	st.SetMemoryAssignments(entries)
	if utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResourceManagers) {
		var pods memstate.PodMemoryAssignments
		v137Convert(t, s.PodEntries, &pods)
		st.SetPodMemoryAssignments(pods)
	}
	b, err := os.ReadFile(filepath.Join(dir, memmgr.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// v137Convert copies between hotplugd's and the kubelet's state types,
// which share their JSON form.
func v137Convert(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// v137Says is what hotplugd says the kubelet says: the Kubelet field of a
// memmgr.KubeletError, "" for nil.
func v137Says(t *testing.T, err error) string {
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

func v137ErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// v137Verdicts checks that hotplugd's verdict on file b for kubelet k on
// machine m is kubelet 1.37.2's, word for word, and that a file both accept
// is left as it is by the kubelet. It returns the verdict.
func v137Verdicts(t *testing.T, k v137Kubelet, m v137Machine, b []byte) string {
	t.Helper()
	dir := t.TempDir()
	after, kerr := k.start(t, m, b)
	want := v137ErrText(kerr)
	s, err := memmgr.Parse(b)
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, b)
	}
	cfg := k.hotplugd(t, m, dir)
	// The kubelet names the file in its own directory; hotplugd names the
	// configured path: compare with the directory made equal.
	got := v137Says(t, memmgr.Validate(s, m.snap, cfg))
	got = strings.ReplaceAll(got, dir, "DIR")
	want = v137ReplaceDir(want)
	if got != want {
		t.Errorf("verdicts differ\nhotplugd: %s\nkubelet:  %s\nfile: %s", got, want, b)
	}
	if kerr == nil && !bytes.Equal(after, b) {
		t.Errorf("the kubelet rewrote a file it accepted (hotplugd expects it not to)\nbefore %s\nafter  %s", b, after)
	}
	return want
}

// v137ReplaceDir replaces the kubelet's state directory in its message by
// DIR.
func v137ReplaceDir(msg string) string {
	const marker = `checkpoint file "`
	i := strings.Index(msg, marker)
	if i < 0 {
		return msg
	}
	rest := msg[i+len(marker):]
	j := strings.Index(rest, "/"+memmgr.FileName+`"`)
	if j < 0 {
		return msg
	}
	return msg[:i+len(marker)] + "DIR" + rest[j:]
}

const (
	v137PodA = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	v137PodB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
	v137PodP = "d00dfeed-2222-4333-8444-555566667777"
	v137Gi   = int64(1) << 30
	v137Mi   = int64(1) << 20
)

// TestMemoryManagerV137Repair is the Must-show for
// memory_manager_state: a file written by kubelet 1.37.2's own checkpoint
// code for a machine that then gained or lost memory or hugepages. Kubelet
// 1.37.2 refuses it on the new machine, and hotplugd says so in its words;
// hotplugd preflight repairs it; 1.37.2's memory manager Start accepts the
// result without rewriting it; and the bytes are those 1.37.2 writes for
// that state.
func TestMemoryManagerV137Repair(t *testing.T) {
	oneNode := func(memGiB uint64, hp int) []v137Node { return []v137Node{{memGiB, hp}} }
	twoNodes := func(mem0, mem1 uint64, hp0, hp1 int) []v137Node { return []v137Node{{mem0, hp0}, {mem1, hp1}} }
	pods := []v137Pod{
		{uid: v137PodA, nodes: []int{0}, memory: []int64{v137Gi, 512 * v137Mi}, hp: 64 * v137Mi},
		{uid: v137PodB, nodes: []int{0}, memory: []int64{2 * v137Gi}},
	}
	for _, tc := range []struct {
		name     string
		k        v137Kubelet
		old, new []v137Node
		pods     []v137Pod
	}{
		{"memory added", v137Kubelet{policy: memmgr.PolicyStatic}, oneNode(8, 512), oneNode(16, 512), pods},
		{"memory removed", v137Kubelet{policy: memmgr.PolicyStatic}, oneNode(16, 512), oneNode(8, 512), pods},
		{"hugepages added", v137Kubelet{policy: memmgr.PolicyStatic}, oneNode(8, 512), oneNode(8, 1024), pods},
		{"hugepages removed", v137Kubelet{policy: memmgr.PolicyStatic}, oneNode(8, 512), oneNode(8, 128), pods},
		{"no pods, memory added", v137Kubelet{policy: memmgr.PolicyStatic}, oneNode(8, 512), oneNode(12, 512), nil},
		{"node 1 memory added", v137Kubelet{policy: memmgr.PolicyStatic}, twoNodes(8, 8, 256, 256), twoNodes(8, 16, 256, 256),
			[]v137Pod{{uid: v137PodA, nodes: []int{0, 1}, memory: []int64{3 * v137Gi}, hp: 32 * v137Mi}, {uid: v137PodB, nodes: []int{0, 1}, memory: []int64{9 * v137Gi}}}},
		{"node 0 hugepages removed", v137Kubelet{policy: memmgr.PolicyStatic}, twoNodes(8, 8, 256, 256), twoNodes(8, 8, 64, 256),
			[]v137Pod{{uid: v137PodA, nodes: []int{1}, memory: []int64{v137Gi}, hp: 32 * v137Mi}}},
		{"gate on, memory added", v137Kubelet{policy: memmgr.PolicyStatic, podLevel: true}, oneNode(8, 512), oneNode(16, 512), pods},
		{"gate on, pod-level pod, hugepages added", v137Kubelet{policy: memmgr.PolicyStatic, podLevel: true}, oneNode(8, 512), oneNode(8, 768),
			[]v137Pod{{uid: v137PodP, nodes: []int{0}, memory: []int64{v137Gi}, podMemory: 3 * v137Gi}, pods[1]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.k.setGates(t)
			oldM, newM := newV137Machine(t, tc.old...), newV137Machine(t, tc.new...)
			written := tc.k.allocate(t, oldM, tc.pods)
			if !bytes.Contains(written, []byte(`"data":`)) || !bytes.Contains(written, []byte(`"dataChecksum":`)) {
				t.Fatalf("kubelet 1.37.2 wrote no V3 file: %s", written)
			}

			// hotplugd reads the kubelet's file as V3, valid on its machine.
			old, err := memmgr.Parse(written)
			if err != nil {
				t.Fatal(err)
			}
			if old.Format != memmgr.FormatV3 {
				t.Fatalf("format %s", old.Format)
			}
			if err := memmgr.Validate(old, oldM.snap, tc.k.hotplugd(t, oldM, t.TempDir())); err != nil {
				t.Fatalf("the kubelet's own file on its machine: %v", err)
			}
			if b, err := old.Marshal(); err != nil || !bytes.Equal(b, written) {
				t.Fatalf("Marshal of the kubelet's file: %v\nhotplugd %s\nkubelet  %s", err, b, written)
			}

			// On the new machine both refuse it, in the same words.
			refusal := v137Verdicts(t, tc.k, newM, written)
			if !strings.Contains(refusal, "the expected machine state is different from the real one") {
				t.Fatalf("kubelet 1.37.2 on the changed machine: %q", refusal)
			}

			// hotplugd preflight repairs it.
			root := t.TempDir()
			path := filepath.Join(root, memmgr.FileName)
			if err := os.WriteFile(path, written, 0o600); err != nil {
				t.Fatal(err)
			}
			kc, err := kubeletconfig.Load(tc.k.configFile(t))
			if err != nil {
				t.Fatal(err)
			}
			rep := preflight.Run(newM.snap, preflight.Options{RootDir: root, Config: kc, Release: kubeletversion.ByMinor(37), Version: kubeletversion.MustParse("v1.37.2"), Now: v137Time})
			res := rep.Results[slices.IndexFunc(rep.Results, func(r preflight.Result) bool { return r.File == preflight.MemoryManagerState })]
			if res.Verdict != preflight.Repaired {
				t.Fatalf("preflight: %s", rep)
			}
			repaired, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if backup, err := os.ReadFile(res.Backup); err != nil || !bytes.Equal(backup, written) {
				t.Errorf("backup %s: %v", res.Backup, err)
			}

			// 1.37.2 starts with the result and leaves it as it is.
			after, err := tc.k.start(t, newM, repaired)
			if err != nil {
				t.Fatalf("kubelet 1.37.2 refuses the repaired file: %v\n%s", err, repaired)
			}
			if !bytes.Equal(after, repaired) {
				t.Errorf("kubelet 1.37.2 rewrote the repaired file\nhotplugd %s\nkubelet  %s", repaired, after)
			}

			// The bytes are what 1.37.2 writes for that state.
			s, err := memmgr.Parse(repaired)
			if err != nil {
				t.Fatal(err)
			}
			if s.Format != memmgr.FormatV3 {
				t.Errorf("repaired as %s", s.Format)
			}
			if kb := v137Writes(t, s); !bytes.Equal(kb, repaired) {
				t.Errorf("bytes differ\nhotplugd %s\nkubelet  %s", repaired, kb)
			}
			// Every assignment was kept.
			if got, want := v137EntryCount(s), v137EntryCount(old); got != want || len(s.PodEntries) != len(old.PodEntries) {
				t.Errorf("kept %d entries and %d pod entries of %d and %d", got, len(s.PodEntries), want, len(old.PodEntries))
			}
			t.Logf("%s: repaired; %d bytes; kubelet 1.37.2 accepts them unchanged", tc.name, len(repaired))
		})
	}
}

func v137EntryCount(s *memmgr.State) int {
	n := 0
	for _, c := range s.Entries {
		n += len(c)
	}
	return n
}

// TestMemoryManagerV137Migrates: files of the older layouts on a node
// upgraded to kubelet 1.37 (V1 as kubelets 1.34-1.36 write it, V2 as 1.36
// with PodLevelResourceManagers writes it): 1.37.2 accepts them and does not
// rewrite them, and so does hotplugd; once the machine changed, both refuse
// them in the same words, and hotplugd's repair is a V3 file 1.37.2 accepts
// unchanged, byte for byte what it writes.
func TestMemoryManagerV137Migrates(t *testing.T) {
	for _, tc := range []struct {
		name   string
		format memmgr.Format
		k      v137Kubelet
	}{
		{"V1, gate off", memmgr.FormatV1, v137Kubelet{policy: memmgr.PolicyStatic}},
		{"V1, gate on", memmgr.FormatV1, v137Kubelet{policy: memmgr.PolicyStatic, podLevel: true}},
		{"V2, gate on", memmgr.FormatV2, v137Kubelet{policy: memmgr.PolicyStatic, podLevel: true}},
		{"V2, gate off", memmgr.FormatV2, v137Kubelet{policy: memmgr.PolicyStatic}},
		{"V1, None", memmgr.FormatV1, v137Kubelet{policy: memmgr.PolicyNone}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.k.setGates(t)
			oldM := newV137Machine(t, v137Node{8, 512})
			newM := newV137Machine(t, v137Node{16, 512})
			// The state 1.37.2 has after admitting two pods, in the older
			// layout (hotplugd's V1 and V2 bytes are those kubelet 1.36.3
			// writes: TestMemoryManagerFirstStart and the parity tests).
			s, err := memmgr.Parse(tc.k.allocate(t, oldM, []v137Pod{
				{uid: v137PodA, nodes: []int{0}, memory: []int64{v137Gi}, hp: 64 * v137Mi},
				{uid: v137PodB, nodes: []int{0}, memory: []int64{2 * v137Gi}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			s.Format = tc.format
			older, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if v := v137Verdicts(t, tc.k, oldM, older); v != "" {
				t.Fatalf("kubelet 1.37.2 refuses a %s file: %s", tc.format, v)
			}
			refusal := v137Verdicts(t, tc.k, newM, older)
			if tc.k.policy == memmgr.PolicyNone {
				if refusal != "" {
					t.Fatalf("None refused: %s", refusal)
				}
				return
			}
			if refusal == "" {
				t.Fatal("kubelet 1.37.2 accepts the file on the changed machine")
			}
			read, err := memmgr.Parse(older)
			if err != nil {
				t.Fatal(err)
			}
			p, err := memmgr.PlanRebuild(read, newM.snap, tc.k.hotplugd(t, newM, t.TempDir()))
			if err != nil || !p.Changed || p.Blocked() || p.New.Format != memmgr.FormatV3 {
				t.Fatalf("plan %v: %v", p, err)
			}
			repaired, err := p.New.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			after, err := tc.k.start(t, newM, repaired)
			if err != nil || !bytes.Equal(after, repaired) {
				t.Fatalf("kubelet 1.37.2 on the repair: %v\nhotplugd %s\nkubelet  %s", err, repaired, after)
			}
			if kb := v137Writes(t, p.New); !bytes.Equal(kb, repaired) {
				t.Errorf("bytes differ\nhotplugd %s\nkubelet  %s", repaired, kb)
			}
		})
	}
}

// TestMemoryManagerV137Verdicts: kubelet 1.37.2's verdict on files of every
// layout, damaged in the ways its loader tells apart (which checksum it
// verifies, when it falls back from data to the older fields and when it
// refuses), with and without PodLevelResourceManagers, is hotplugd's, word
// for word.
func TestMemoryManagerV137Verdicts(t *testing.T) {
	for _, podLevel := range []bool{false, true} {
		k := v137Kubelet{policy: memmgr.PolicyStatic, podLevel: podLevel}
		t.Run(fmt.Sprintf("gate %v", podLevel), func(t *testing.T) {
			k.setGates(t)
			m := newV137Machine(t, v137Node{8, 512})
			v3 := k.allocate(t, m, []v137Pod{{uid: v137PodA, nodes: []int{0}, memory: []int64{v137Gi}}})
			s, err := memmgr.Parse(v3)
			if err != nil {
				t.Fatal(err)
			}
			s.Format = memmgr.FormatV1
			v1file, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			s.Format = memmgr.FormatV2
			v2file, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			field := func(b []byte, name, value string) []byte {
				var top map[string]json.RawMessage
				if err := json.Unmarshal(b, &top); err != nil {
					t.Fatal(err)
				}
				if value == "" {
					delete(top, name)
				} else {
					top[name] = json.RawMessage(value)
				}
				out, err := json.Marshal(top)
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			dataOf := func(b []byte) string {
				var top struct{ Data string }
				if err := json.Unmarshal(b, &top); err != nil {
					t.Fatal(err)
				}
				return top.Data
			}
			// data with the dataChecksum kubelet 1.37.2 computes for it.
			jsonString := func(s string) string {
				q, err := json.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				return string(q)
			}
			withData := func(b []byte, data string) []byte {
				return field(field(b, "data", jsonString(data)), "dataChecksum", fmt.Sprint(uint64(checksum.New(data))))
			}
			otherData := strings.Replace(dataOf(v3), `"size":1073741824`, `"size":1073741825`, 1)
			v1zero := bytes.Replace(v1file, []byte(fmt.Sprintf(`"checksum":%d`, s.Checksum)), []byte(`"checksum":0`), 1)
			for _, c := range []struct {
				name string
				file []byte
			}{
				{"V3 as written", v3},
				{"V3 dataChecksum wrong", field(v3, "dataChecksum", "12345")},
				{"V3 dataChecksum 0", field(v3, "dataChecksum", "0")},
				{"V3 checksum wrong", field(v3, "checksum", "12345")},
				{"V3 checksum 0", field(v3, "checksum", "0")},
				{"V3 data edited", field(v3, "data", jsonString(otherData))},
				{"V3 data edited, dataChecksum matching", withData(v3, otherData)},
				{"V3 data not JSON", field(field(v3, "data", `"x"`), "dataChecksum", "0")},
				{"V3 data empty, dataChecksum 0", field(field(v3, "data", `""`), "dataChecksum", "0")},
				{"V3 data a number", field(v3, "data", "5")},
				{"V3 data a number, dataChecksum 0", field(field(v3, "data", "5"), "dataChecksum", "0")},
				{"V3 dataChecksum a string", field(v3, "dataChecksum", `"1"`)},
				{"V3 data null", field(v3, "data", "null")},
				{"V3 data of another policy", withData(v3, strings.Replace(dataOf(v3), `"Static"`, `"None"`, 1))},
				{"V3 without data", field(v3, "data", "")},
				{"V3 policyName a number", field(v3, "policyName", "5")},
				{"V1", v1file},
				{"V1 checksum 0", v1zero},
				{"V1 checksum wrong", field(v1file, "checksum", "12345")},
				{"V1 with data \"\"", field(v1file, "data", `""`)},
				{"V1 with dataChecksum 7", field(v1file, "dataChecksum", "7")},
				{"V2", v2file},
				{"V2 checksum 0", field(v2file, "checksum", "0")},
				{"V2 checksum wrong", field(v2file, "checksum", "12345")},
				{"V2 podEntries a number", field(v2file, "podEntries", "5")},
				{"null", []byte("null")},
				{"truncated", v3[:len(v3)/2]},
			} {
				t.Run(c.name, func(t *testing.T) {
					v := v137Verdicts(t, k, m, c.file)
					t.Logf("kubelet 1.37.2: %q", v)
				})
			}
		})
	}
}

// TestMemoryManagerV137Golden: pkg/memmgr's golden V3 file is what kubelet
// 1.37.2 writes for m04's state (the vectors' machine, one container with
// 1Gi on node 0), and hotplugd's New is what it writes on first start.
func TestMemoryManagerV137Golden(t *testing.T) {
	golden, err := os.ReadFile("../../pkg/memmgr/testdata/m05-static-1-entry-v137.memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	k := v137Kubelet{policy: memmgr.PolicyStatic}
	k.setGates(t)
	m := newV137Machine(t, v137Node{8, 512})
	m4, err := os.ReadFile("../../pkg/memmgr/testdata/m04-static-1-entry.memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	s, err := memmgr.Parse(m4)
	if err != nil {
		t.Fatal(err)
	}
	if kb := v137Writes(t, s); !bytes.Equal(kb, bytes.TrimSuffix(golden, []byte("\n"))) {
		t.Errorf("kubelet 1.37.2 writes\n%s\nthe golden file is\n%s", kb, golden)
	}
	for _, policy := range []string{memmgr.PolicyStatic, memmgr.PolicyNone} {
		for _, podLevel := range []bool{false, true} {
			k := v137Kubelet{policy: policy, podLevel: podLevel}
			k.setGates(t)
			first, err := k.start(t, m, nil)
			if err != nil {
				t.Fatal(err)
			}
			n, err := memmgr.New(m.snap, k.hotplugd(t, m, t.TempDir()))
			if err != nil {
				t.Fatal(err)
			}
			b, err := n.Marshal()
			if err != nil || !bytes.Equal(b, first) {
				t.Errorf("%s gate %v: %v\nhotplugd New %s\nkubelet      %s", policy, podLevel, err, b, first)
			}
		}
	}
}
