package topology_test

import (
	"testing"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// BenchmarkSnapshot times one full snapshot (every file read and parsed,
// capacity and allocatable computed) on this machine and on the fixtures.
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
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			fs := c.fs(b)
			b.ReportAllocs()
			for b.Loop() {
				s, err := fs.Snapshot()
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
