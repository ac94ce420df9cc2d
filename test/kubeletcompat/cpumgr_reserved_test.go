package kubeletcompat_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
)

// randomCPUMachine is a machine of 1, 2 or 4 sockets, 1 to 8 cores per
// socket, 1, 2 or 4 threads per core, with one NUMA node per socket, two per
// socket (sub-NUMA clustering), one for every two sockets, or no NUMA
// support at all, and about an eighth of its CPUs offline.
func randomCPUMachine(r *rand.Rand) fixturegen.Machine {
	m := fixturegen.Machine{
		Sockets:        []int{1, 2, 4}[r.IntN(3)],
		CoresPerSocket: 1 + r.IntN(8),
		ThreadsPerCore: []int{1, 2, 4}[r.IntN(3)],
	}
	n := m.NumCPUs()
	socketOf := func(cpu int) int { return (cpu % (m.Sockets * m.CoresPerSocket)) / m.CoresPerSocket }
	coreOf := func(cpu int) int { return cpu % m.CoresPerSocket }
	var nodeOf func(cpu int) int
	switch layout := r.IntN(4); {
	case layout == 3:
		// No NUMA support: cAdvisor makes a node of each socket.
		m.NoNUMA = true
		nodeOf = func(int) int { return 0 }
	case layout == 1 && m.CoresPerSocket%2 == 0:
		nodeOf = func(cpu int) int { return 2*socketOf(cpu) + coreOf(cpu)/(m.CoresPerSocket/2) }
	case layout == 2 && m.Sockets%2 == 0:
		nodeOf = func(cpu int) int { return socketOf(cpu) / 2 }
	default:
		nodeOf = socketOf
	}
	for cpu := range n {
		id := nodeOf(cpu)
		for len(m.Nodes) <= id {
			m.Nodes = append(m.Nodes, fixturegen.Node{MemTotalKB: 1 << 20})
		}
		m.Nodes[id].CPUs = append(m.Nodes[id].CPUs, cpu)
	}
	for cpu := 1; cpu < n; cpu++ {
		if r.IntN(8) == 0 {
			m.OfflineCPUs = append(m.OfflineCPUs, cpu)
		}
	}
	return m
}

// TestCPUManagerReservedMatchesKubelet compares hotplugd's prediction of the
// CPUs the static policy reserves (ReservedCPUs) with the kubelet's own
// choice (all CPUs minus the manager's allocatable CPUs after Start) on
// random machines, reservations and CPU orders (packed, and spread with
// distribute-cpus-across-cores).
func TestCPUManagerReservedMatchesKubelet(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 2))
	for i := range 120 {
		m := randomCPUMachine(r)
		online := m.NumCPUs() - len(m.OfflineCPUs)
		reserved := 1 + r.IntN(online)
		if r.IntN(5) == 0 {
			reserved = online + 1
		}
		k := cpuKubelet{reserved: strconv.Itoa(reserved)}
		if r.IntN(3) == 0 {
			k.options = map[string]string{"distribute-cpus-across-cores": "true"}
			k.gates = map[string]bool{"CPUManagerPolicyAlphaOptions": true}
		}
		if r.IntN(4) == 0 {
			// A fraction rounds up.
			k.reserved = fmt.Sprintf("%dm", reserved*1000-500)
		}
		name := fmt.Sprintf("%d/%ds%dc%dt-nodes%d-offline%v-reserve%s-%v", i, m.Sockets, m.CoresPerSocket, m.ThreadsPerCore, len(m.Nodes), m.OfflineCPUs, k.reserved, k.options)
		t.Run(name, func(t *testing.T) {
			k.setGates(t)
			cm := newCPUMachine(t, m)
			want, kerr := kubeletReserved(t, cm, k)
			got, err := cpumgr.ReservedCPUs(k.kubeletConfig(), cm.snap, hotplugdRelease(t))
			if (err != nil) != (kerr != nil) {
				t.Fatalf("hotplugd: %v, %v; the kubelet: %v, %v", got, err, want, kerr)
			}
			if err == nil && !got.Equals(want) {
				t.Errorf("hotplugd reserves %s, the kubelet %s", got, want)
			}
		})
	}
}

// kubeletReserved starts the kubelet's CPU manager on an empty state
// directory and returns the CPUs it reserves.
func kubeletReserved(t *testing.T, m cpuMachine, k cpuKubelet) (cpuset.CPUSet, error) {
	t.Helper()
	mgr, err := newCPUManager(m, k, t.TempDir())
	if err != nil {
		return cpuset.New(), err
	}
	return mgr.GetAllCPUs().Difference(mgr.GetAllocatableCPUs()), nil
}

// randomRebuildCase is a random machine whose online CPUs change (CPUs
// added, removed, or both), a kubelet with 1 or 2 reserved CPUs, maybe the
// strict-cpu-reservation option and the PodLevelResourceManagers gate, and a
// state valid on the old machine with up to 5 pinned containers (and, with
// the gate, pod-level sets).
func randomRebuildCase(t *testing.T, r *rand.Rand) cpuRebuildCase {
	t.Helper()
	layout := randomCPUMachine(r)
	layout.OfflineCPUs = nil
	offline := func() []int {
		var o []int
		for cpu := 1; cpu < layout.NumCPUs(); cpu++ {
			if r.IntN(5) == 0 {
				o = append(o, cpu)
			}
		}
		return o
	}
	tc := cpuRebuildCase{old: layout, new: layout}
	tc.old.OfflineCPUs, tc.new.OfflineCPUs = offline(), offline()
	tc.kubelet = cpuKubelet{reserved: strconv.Itoa(1 + r.IntN(2))}
	if r.IntN(4) == 0 {
		tc.kubelet.options = map[string]string{"strict-cpu-reservation": "true"}
	}
	gate := r.IntN(4) == 0
	if gate {
		tc.kubelet.gates = map[string]bool{"PodLevelResourceManagers": true}
	}
	tc.name = fmt.Sprintf("%ds%dc%dt-nodes%d-offline%v-to%v-reserve%s-%v-%v", layout.Sockets, layout.CoresPerSocket, layout.ThreadsPerCore,
		len(layout.Nodes), tc.old.OfflineCPUs, tc.new.OfflineCPUs, tc.kubelet.reserved, tc.kubelet.options, tc.kubelet.gates)

	oldM := newCPUMachine(t, tc.old)
	reserved, err := cpumgr.ReservedCPUs(tc.kubelet.kubeletConfig(), oldM.snap, hotplugdRelease(t))
	if err != nil {
		return cpuRebuildCase{}
	}
	var online []int
	for _, c := range oldM.snap.OnlineCPUs() {
		online = append(online, c.ID)
	}
	all := cpuset.New(online...)
	free := all.Difference(reserved).List()
	r.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	format := cpumgr.FormatV2
	if gate {
		format = cpumgr.FormatV3
	}
	s := &cpumgr.State{Format: format, PolicyName: cpumgr.PolicyStatic, Entries: map[string]map[string]cpuset.CPUSet{}}
	strict := tc.kubelet.options != nil
	for c := range r.IntN(6) {
		n := 1 + r.IntN(3)
		// Leave a CPU to the default set under strict reservation.
		if n > len(free) || (strict && n == len(free)) {
			break
		}
		pod := fmt.Sprintf("pod-%d", r.IntN(3))
		if s.Entries[pod] == nil {
			s.Entries[pod] = map[string]cpuset.CPUSet{}
		}
		s.Entries[pod][fmt.Sprintf("c%d", c)] = cpuset.New(free[:n]...)
		free = free[n:]
	}
	if gate && len(s.Entries) > 0 && r.IntN(2) == 0 {
		s.PodEntries = map[string]cpuset.CPUSet{}
		for pod, containers := range s.Entries {
			set := cpuset.New()
			for _, cs := range containers {
				set = set.Union(cs)
			}
			s.PodEntries[pod] = set
		}
	}
	def := cpuset.New(free...)
	if !strict {
		def = def.Union(reserved)
	}
	s.DefaultCPUSet = def
	tc.state = s
	return tc
}

// TestCPUManagerRebuildRandom runs the invariants of
// TestCPUManagerRebuildMatchesKubelet over random machines whose CPUs
// change: hotplugd's verdict is the kubelet's; what it writes the kubelet
// loads, starts with and would write itself; what it refuses the kubelet
// refuses or would cost a pinned CPU.
func TestCPUManagerRebuildRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 36))
	outcomes := map[string]int{}
	for i := range 80 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			tc := randomRebuildCase(t, r)
			if tc.state == nil {
				outcomes["no valid configuration"]++
				return
			}
			t.Log(tc.name)
			o := checkRebuild(t, tc, false)
			if len(o) > 8 && o[:8] == "refused:" {
				o = "refused"
			}
			outcomes[o]++
		})
	}
	t.Logf("outcomes: %v", outcomes)
}
