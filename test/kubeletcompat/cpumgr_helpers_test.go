package kubeletcompat_test

import (
	"maps"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// cpuStateFile is the kubelet's checkpoint name (cpuManagerStateFileName).
const cpuStateFile = "cpu_manager_state"

// cpuMachine is a machine rendered as a fixture tree, as cAdvisor and
// hotplugd each read it.
type cpuMachine struct {
	info *oracle.MachineInfo
	snap *topology.Snapshot
}

// newCPUMachine writes m as a sysfs/procfs tree and reads it with cAdvisor's
// code (the kubelet's machine info) and with hotplugd's.
func newCPUMachine(t *testing.T, m fixturegen.Machine) cpuMachine {
	t.Helper()
	info, snap := readTree(t, m)
	return cpuMachine{info: info, snap: snap}
}

// cpuKubelet is how a kubelet's CPU manager is set up: the arguments
// cmd/kubelet and the container manager pass to cpumanager.NewManager.
type cpuKubelet struct {
	policy string
	// reserved is systemReserved.cpu + kubeReserved.cpu, in CPUs.
	reserved string
	// specific is reservedSystemCPUs.
	specific cpuset.CPUSet
	options  map[string]string
	// gates are feature gates to set for the test.
	gates map[string]bool
}

// setGates sets the kubelet's feature gates for the rest of the test (see
// setKubeletGates).
func (k cpuKubelet) setGates(t *testing.T) {
	t.Helper()
	gates := map[string]bool{gatePodLevelResourceManagers: false}
	maps.Copy(gates, k.gates)
	setKubeletGates(t, gates)
}

// kubeletConfig is the same kubelet as hotplugd reads it.
func (k cpuKubelet) kubeletConfig() *kubeletv1beta1.KubeletConfiguration {
	kc := kubeletconfig.Default()
	if k.policy != "" {
		kc.CPUManagerPolicy = k.policy
	} else {
		kc.CPUManagerPolicy = cpumgr.PolicyStatic
	}
	if k.specific.Size() > 0 {
		kc.ReservedSystemCPUs = k.specific.String()
	} else if k.reserved != "" {
		kc.KubeReserved = map[string]string{"cpu": k.reserved}
	}
	kc.CPUManagerPolicyOptions = k.options
	kc.FeatureGates = k.gates
	return kc
}

// kubeletStart runs the kubelet's CPU manager NewManager and Start for the
// machine with its state directory dir, and returns their error: what the
// kubelet reports as "start cpu manager error: ...".
func kubeletStart(t *testing.T, m cpuMachine, k cpuKubelet, dir string) error {
	t.Helper()
	_, err := newCPUManager(m, k, dir)
	return err
}

// newCPUManager returns the kubelet's CPU manager for the machine, started
// with its state directory dir. Its reconcile loop is left idle (sources
// never ready, no active pods), so the state file changes only if Start
// itself writes it.
func newCPUManager(m cpuMachine, k cpuKubelet, dir string) (cpumanager.Manager, error) {
	reservation := v1.ResourceList{}
	switch {
	case k.specific.Size() > 0:
		// reservedSystemCPUs replaces the cpu reservations by its size.
		reservation[v1.ResourceCPU] = *resource.NewQuantity(int64(k.specific.Size()), resource.DecimalSI)
	case k.reserved != "":
		reservation[v1.ResourceCPU] = resource.MustParse(k.reserved)
	}
	policy := k.policy
	if policy == "" {
		policy = cpumgr.PolicyStatic
	}
	mgr, err := oracle.NewCPUManager(policy, k.options, m.info, k.specific, reservation, dir, oracle.NoTopologyManager())
	if err != nil {
		return nil, err
	}
	if err := oracle.StartCPUManager(mgr); err != nil {
		return nil, err
	}
	return mgr, nil
}

// kubeletStartWith writes b as the state file in the state directory dir
// and runs kubeletStart; it returns the file afterwards and Start's error.
func kubeletStartWith(t *testing.T, m cpuMachine, k cpuKubelet, dir string, b []byte) ([]byte, error) {
	t.Helper()
	p := filepath.Join(dir, cpuStateFile)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	err := kubeletStart(t, m, k, dir)
	after, rerr := os.ReadFile(p)
	if rerr != nil {
		t.Fatal(rerr)
	}
	return after, err
}

// kubeletLoads loads the state file in dir with the kubelet's checkpoint code
// (state.NewCheckpointState) for the policy.
func kubeletLoads(dir, policy string) error {
	_, err := oracle.CPUCheckpointState(dir, cpuStateFile, policy)
	return err
}

// kubeletWrites returns the bytes the kubelet's checkpoint code writes for
// the state s: a new checkpoint for s's policy, then s's assignments, pod
// assignments (with the PodLevelResourceManagers gate) and default set, set
// through the kubelet's state interface. Gates must be set as for s.
func kubeletWrites(t *testing.T, s *cpumgr.State) []byte {
	t.Helper()
	dir := t.TempDir()
	st, err := oracle.CPUCheckpointState(dir, cpuStateFile, s.PolicyName)
	if err != nil {
		t.Fatal(err)
	}
	a := cpustate.ContainerCPUAssignments{}
	for pod, containers := range s.Entries {
		a[pod] = map[string]cpuset.CPUSet{}
		for c, set := range containers {
			a[pod][c] = set
		}
	}
	st.SetCPUAssignments(a)
	if kubeletGateEnabled(gatePodLevelResourceManagers) {
		if err := oracle.SetPodCPUAssignments(st, s.PodEntries); err != nil {
			t.Fatal(err)
		}
	}
	st.SetDefaultCPUSet(s.DefaultCPUSet)
	b, err := os.ReadFile(filepath.Join(dir, cpuStateFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
