package cpumgr

import (
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"os"
	"path/filepath"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Pod UIDs of the golden files.
const (
	podA = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	podB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
)

// machine is one socket, one NUMA node, cores x threads CPUs numbered the
// Intel way (siblings n and n+cores), some of them offline.
func machine(cores, threads int, offline ...int) fixturegen.Machine {
	n := cores * threads
	return fixturegen.Machine{
		Sockets:        1,
		CoresPerSocket: cores,
		ThreadsPerCore: threads,
		OfflineCPUs:    offline,
		Nodes:          []fixturegen.Node{{CPUs: fixturegen.CPUs(0, n-1), MemTotalKB: 8 << 20}},
	}
}

// snapshot renders m as a fixture tree and reads it back.
func snapshot(tb testing.TB, m fixturegen.Machine) *topology.Snapshot {
	tb.Helper()
	dir := tb.TempDir()
	if err := m.WriteDir(dir); err != nil {
		tb.Fatal(err)
	}
	s, err := topology.NewFS(filepath.Join(dir, "sys"), filepath.Join(dir, "proc")).CapacitySnapshot()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// kubelet is a kubelet configuration: the static policy with kubeReserved
// cpu, plus any edits.
func kubelet(reservedCPU string, edit ...func(*kubeletv1beta1.KubeletConfiguration)) *kubeletv1beta1.KubeletConfiguration {
	kc := kubeletconfig.Default()
	kc.CPUManagerPolicy = PolicyStatic
	if reservedCPU != "" {
		kc.KubeReserved = map[string]string{"cpu": reservedCPU}
	}
	for _, e := range edit {
		e(kc)
	}
	return kc
}

func vector(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name+".cpu_manager_state"))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// set parses a CPU list; it panics on a typo in a test table.
func set(list string) cpuset.CPUSet {
	s, err := cpuset.Parse(list)
	if err != nil {
		panic(err)
	}
	return s
}

// rel136 is the release the vectors and most tables were made with.
var rel136 = kubeletversion.ByMinor(36)
