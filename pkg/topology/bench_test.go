package topology_test

import (
	"testing"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// BenchmarkSnapshot times one snapshot (every file read and parsed, capacity
// and allocatable computed) on this machine and on the fixtures: full (with
// the state of every memory block) and capacity (without).
// The large fixture's tree is on tmpfs when /dev/shm exists, as sysfs is in
// memory too.
func BenchmarkSnapshot(b *testing.B) {
	cases := []struct {
		name string
		fs   func(b *testing.B) topology.FS
	}{
		{"this-machine", func(*testing.B) topology.FS { return topology.NewFS("/sys", "/proc") }},
		{"dual-socket-smt2", func(b *testing.B) topology.FS { return extractFixture(b, "dual-socket-smt2") }},
		{"large-448", func(b *testing.B) topology.FS { return extractFixture(b, "large-448") }},
	}
	kinds := []struct {
		name string
		take func(topology.FS) (*topology.Snapshot, error)
	}{
		{"full", topology.FS.Snapshot},
		{"capacity", topology.FS.CapacitySnapshot},
	}
	for _, c := range cases {
		for _, k := range kinds {
			b.Run(c.name+"/"+k.name, func(b *testing.B) {
				fs := c.fs(b)
				b.ReportAllocs()
				for b.Loop() {
					s, err := k.take(fs)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := s.Allocatable(nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
