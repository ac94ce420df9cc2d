package memmgr

import (
	"fmt"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
)

// BenchmarkVerifyPlanWrite: parse, validate, plan and marshal the state of
// an 8-node machine with 200 pinned containers (memory and hugepages each)
// after memory was added to every node.
func BenchmarkVerifyPlanWrite(b *testing.B) {
	var nodes []node
	for range 8 {
		nodes = append(nodes, node{mem: 64 * gi, hugepages: map[uint64]uint64{2048: 4096, 1048576: 4}})
	}
	reserved := map[int]uint64{}
	for id := range nodes {
		reserved[id] = gi
	}
	cfg := staticCfg(reserved)
	s, err := New(snap(nodes...), cfg)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 200 {
		u := unit{
			PodUID:    fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i),
			Container: "c",
			Blocks:    []state.Block{memBlock(256*mi, i%8), hpBlock(16*mi, i%8)},
		}
		if err := replay(s.MachineState, u); err != nil {
			b.Fatal(err)
		}
		s.Entries[u.PodUID] = map[string][]state.Block{u.Container: u.Blocks}
	}
	file, err := s.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	for i := range nodes {
		nodes[i].mem += 16 * gi
	}
	grown := snap(nodes...)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		st, err := Parse(file)
		if err != nil {
			b.Fatal(err)
		}
		p, err := PlanRebuild(st, grown, cfg)
		if err != nil || !p.Changed || p.Blocked() {
			b.Fatalf("plan: %v\n%v", err, p)
		}
		if _, err := p.New.Marshal(); err != nil {
			b.Fatal(err)
		}
	}
}
