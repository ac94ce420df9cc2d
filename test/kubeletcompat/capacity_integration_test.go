package kubeletcompat_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"

	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

const (
	globalHP2M    = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	globalHP1G    = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
	node0HP2M     = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
	procHugepages = "/proc/sys/vm/nr_hugepages"
)

// TestIntegrationCapacityMatchesCAdvisor puts this machine in each state
// (restored after each case, also on failure) and compares hotplugd's
// capacity with what cAdvisor's own machine.Info yields under the kubelet's
// CapacityFromMachineInfo, and allocatable with the kubelet's node-status
// code.
func TestIntegrationCapacityMatchesCAdvisor(t *testing.T) {
	m := machinetest.Acquire(t)
	tests := []struct {
		name  string
		apply func(t *testing.T)
	}{
		{"as is", func(*testing.T) {}},
		{"cpu1 offline", func(t *testing.T) { m.SetCPUOnline(t, 1, false) }},
		{"2Mi hugepages via kernel/mm", func(t *testing.T) { m.SetHugePages(t, globalHP2M, 16) }},
		{"2Mi hugepages via node0", func(t *testing.T) { m.SetHugePages(t, node0HP2M, 24) }},
		{"2Mi hugepages via /proc/sys/vm", func(t *testing.T) { m.SetHugePages(t, procHugepages, 8) }},
		{"cpu1 offline and 1Gi hugepages", func(t *testing.T) {
			m.SetCPUOnline(t, 1, false)
			m.SetHugePages(t, globalHP2M, 32)
			m.SetHugePages(t, globalHP1G, 1)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.apply(t)

			info, err := oracle.HostMachineInfo()
			if err != nil {
				t.Fatalf("oracle.HostMachineInfo() error: %v", err)
			}
			snap, err := topology.NewFS("/sys", "/proc").Snapshot()
			if err != nil {
				t.Fatalf("Snapshot() error: %v", err)
			}
			want := quantities(cadvisor.CapacityFromMachineInfo(info))
			if diff := cmp.Diff(want, quantities(snap.Capacity())); diff != "" {
				t.Errorf("capacity differs (-cadvisor +hotplugd):\n%s", diff)
			}
			lean, err := topology.NewFS("/sys", "/proc").CapacitySnapshot()
			if err != nil {
				t.Fatalf("CapacitySnapshot() error: %v", err)
			}
			if diff := cmp.Diff(want, quantities(lean.Capacity())); diff != "" {
				t.Errorf("capacity of the reconcile's snapshot differs (-cadvisor +hotplugd):\n%s", diff)
			}

			_, wantAlloc, err := oracle.NodeStatus(info, "")
			if err != nil {
				t.Fatalf("oracle.NodeStatus() error: %v", err)
			}
			gotAlloc, err := snap.Allocatable(kubeletconfig.Default())
			if err != nil {
				t.Fatalf("Allocatable() error: %v", err)
			}
			if diff := cmp.Diff(quantities(wantAlloc), quantities(gotAlloc)); diff != "" {
				t.Errorf("allocatable without a config file differs (-kubelet +hotplugd):\n%s", diff)
			}
		})
	}
}
