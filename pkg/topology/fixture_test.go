package topology_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
)

// TestFixtureCapacity checks, independently of the golden files, the values
// each synthetic machine is built to have (internal/fixturegen).
func TestFixtureCapacity(t *testing.T) {
	tests := []struct {
		name        string
		capacity    map[string]string // the entries to check; absent keys must be absent
		allocatable map[string]string // nil: not checked
		onlineCPUs  int
	}{
		{
			name: "dual-socket-smt2",
			capacity: map[string]string{
				"cpu": "16", "memory": "127936Mi", "hugepages-2Mi": "1536Mi", "hugepages-1Gi": "6Gi",
			},
			// 127936Mi (MemTotal 131006464 kB) - 1536Mi - 6Gi of hugepages;
			// a kubelet without a config file has no eviction threshold.
			allocatable: map[string]string{
				"cpu": "16", "memory": "120256Mi", "hugepages-2Mi": "1536Mi", "hugepages-1Gi": "6Gi",
			},
			onlineCPUs: 16,
		},
		{
			name:       "offline-cpus",
			capacity:   map[string]string{"cpu": "4", "hugepages-2Mi": "0", "hugepages-1Gi": "0"},
			onlineCPUs: 4,
		},
		{
			name: "large-448",
			capacity: map[string]string{
				"cpu": "448", "memory": "6258176Mi", "hugepages-2Mi": "16Gi", "hugepages-1Gi": "128Gi",
			},
			onlineCPUs: 448,
		},
		{
			// cAdvisor counts every cpuN directory on a kernel without
			// NUMA, so the offline cpu3 is still in the kubelet's capacity.
			name:       "no-numa",
			capacity:   map[string]string{"cpu": "4", "hugepages-2Mi": "256Mi"},
			onlineCPUs: 3,
		},
		{
			name:       "no-hugepages",
			capacity:   map[string]string{"cpu": "2"},
			onlineCPUs: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap, err := extractFixture(t, tt.name).Snapshot()
			if err != nil {
				t.Fatalf("Snapshot() error: %v", err)
			}
			check := func(what string, want map[string]string, got v1.ResourceList) {
				t.Helper()
				gotS := map[string]string{}
				for k, v := range got {
					if _, ok := want[string(k)]; ok || k != v1.ResourceMemory {
						gotS[string(k)] = v.String()
					}
				}
				if diff := cmp.Diff(want, gotS); diff != "" {
					t.Errorf("unexpected %s (-want +got):\n%s", what, diff)
				}
			}
			check("capacity", tt.capacity, snap.Capacity())
			if tt.allocatable != nil {
				alloc, err := snap.Allocatable(nil)
				if err != nil {
					t.Fatalf("Allocatable() error: %v", err)
				}
				check("allocatable", tt.allocatable, alloc)
			}
			if got := len(snap.OnlineCPUs()); got != tt.onlineCPUs && len(snap.NUMANodes) > 0 {
				t.Errorf("len(OnlineCPUs()) = %d, want %d", got, tt.onlineCPUs)
			}
			if got := snap.CPUs.Online.Size(); got != tt.onlineCPUs {
				t.Errorf("CPUs.Online.Size() = %d, want %d", got, tt.onlineCPUs)
			}
		})
	}
}

// TestCapacitySnapshotAgrees checks that the reconcile's lean snapshot gives
// the same capacity, allocatable and online-CPU topology as the full one on
// every fixture.
func TestCapacitySnapshotAgrees(t *testing.T) {
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			fs := extractFixture(t, name)
			full, err := fs.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			lean, err := fs.CapacitySnapshot()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(quantityStrings(full.Capacity()), quantityStrings(lean.Capacity())); diff != "" {
				t.Errorf("capacity (-Snapshot +CapacitySnapshot):\n%s", diff)
			}
			fa, err := full.Allocatable(nil)
			if err != nil {
				t.Fatal(err)
			}
			la, err := lean.Allocatable(nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(quantityStrings(fa), quantityStrings(la)); diff != "" {
				t.Errorf("allocatable (-Snapshot +CapacitySnapshot):\n%s", diff)
			}
			if diff := cmp.Diff(full.OnlineCPUs(), lean.OnlineCPUs()); diff != "" {
				t.Errorf("online CPUs (-Snapshot +CapacitySnapshot):\n%s", diff)
			}
			if lean.Memory.Blocks != nil || lean.Memory.BlockCount != 0 {
				t.Errorf("CapacitySnapshot read memory blocks: %+v", lean.Memory)
			}
		})
	}
}

func quantityStrings(l v1.ResourceList) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}
