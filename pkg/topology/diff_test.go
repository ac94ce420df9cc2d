package topology_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

func TestDiff(t *testing.T) {
	base := func() *topology.Snapshot {
		s, err := extractFixture(t, "dual-socket-smt2").CapacitySnapshot()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	tests := []struct {
		name   string
		change func(s *topology.Snapshot)
		want   []topology.Change
	}{
		{name: "same machine", change: func(*topology.Snapshot) {}},
		{
			name: "cpu offline",
			change: func(s *topology.Snapshot) {
				s.CPUs.Online.CPUSet = s.CPUs.Online.Difference(cpus(15))
				s.CPUs.List[15].Online = false
			},
			want: []topology.Change{
				{Resource: "cpu", Node: -1, Old: "16", New: "15"},
				{Resource: "cpus", Node: 1, Old: "4-7,12-15", New: "4-7,12-14"},
			},
		},
		{
			name: "hugepages on one node",
			change: func(s *topology.Snapshot) {
				s.NUMANodes[1].HugePages[0].Pages += 16
				s.HugePages[0].Pages += 16
			},
			want: []topology.Change{
				{Resource: "hugepages-2Mi", Node: -1, Old: "1536Mi", New: "1568Mi"},
				{Resource: "hugepages-2Mi", Node: 1, Old: "512Mi", New: "544Mi"},
			},
		},
		{
			name: "memory hot-add to node 0",
			change: func(s *topology.Snapshot) {
				s.Memory.MemTotalBytes += 1 << 30
				s.NUMANodes[0].MemTotalBytes += 1 << 30
			},
			want: []topology.Change{
				{Resource: "memory", Node: -1, Old: "127936Mi", New: "128960Mi"},
				{Resource: "memory", Node: 0, Old: "64000Mi", New: "65024Mi"},
			},
		},
		{
			name: "a new NUMA node",
			change: func(s *topology.Snapshot) {
				s.NUMANodes = append(s.NUMANodes, topology.NUMANode{ID: 2, MemTotalBytes: 1 << 30, HugePages: []topology.HugePages{{PageSizeKiB: 2048}}})
			},
			want: []topology.Change{
				{Resource: "memory", Node: 2, Old: "", New: "1Gi"},
				{Resource: "hugepages-2Mi", Node: 2, Old: "", New: "0"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			old, new := base(), base()
			tt.change(new)
			got := topology.Diff(old, new)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Diff() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiffFromNothing(t *testing.T) {
	s, err := extractFixture(t, "no-hugepages").CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := topology.Diff(nil, s)
	if len(got) == 0 || got[0] != (topology.Change{Resource: "cpu", Node: -1, Old: "", New: "2"}) {
		t.Errorf("Diff(nil, s) = %v, want cpu first", got)
	}
	if s := got[0].String(); s != "cpu: none -> 2" {
		t.Errorf("String() = %q", s)
	}
}

func TestChangeString(t *testing.T) {
	c := topology.Change{Resource: "hugepages-2Mi", Node: 0, Old: "0", New: "32Mi"}
	if got := c.String(); got != "node 0 hugepages-2Mi: 0 -> 32Mi" {
		t.Errorf("String() = %q", got)
	}
}

func cpus(ids ...int) cpuset.CPUSet { return cpuset.New(ids...) }
