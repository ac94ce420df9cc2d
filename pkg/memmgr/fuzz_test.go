package memmgr

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; whatever it accepts Marshal writes in a
// form that reads back to the same state and the same bytes; Validate and
// PlanRebuild never panic on it and a plan's new state validates.
func FuzzParse(f *testing.F) {
	vectors, _ := filepath.Glob("testdata/*.memory_manager_state")
	for _, v := range vectors {
		b, err := os.ReadFile(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"", "null", "{}", "[]", `{"checksum":0}`,
		`{"policyName":"Static","machineState":{"0":null},"checksum":0}`,
		`{"policyName":"Static","machineState":{"0":{"numberOfAssignments":1,"memoryMap":{"memory":null},"cells":[0,1]}},"checksum":0}`,
		`{"policyName":"Static","machineState":{"0":{"numberOfAssignments":0,"memoryMap":{"memory":{"total":1,"systemReserved":2,"allocatable":3,"reserved":0,"free":3}},"cells":[5]}},"entries":{"p":{"c":[{"numaAffinity":[0,7],"type":"memory","size":9}]}},"checksum":0}`,
		`{"policyName":"Static","machineState":{},"entries":{"p":null},"podEntries":{"p":{"memoryBlocks":[{"numaAffinity":[0],"type":"memory","size":1}]}},"checksum":0}`,
		`{"data":"x","dataChecksum":1}`,
	} {
		f.Add([]byte(s))
	}
	machine := snap(
		node{mem: 8 * gi, hugepages: map[uint64]uint64{2048: 512}},
		node{mem: 8 * gi, hugepages: map[uint64]uint64{2048: 512}},
	)
	cfgs := []Config{
		staticCfg(map[int]uint64{0: gi}),
		{Policy: PolicyNone},
	}
	gated := staticCfg(map[int]uint64{0: gi})
	gated.PodLevelResourceManagers = true
	cfgs = append(cfgs, gated)

	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "memmgr: ") {
				t.Fatalf("error without the package: %v", err)
			}
			return
		}
		out, err := s.Clone().Marshal()
		if err != nil {
			// Only a state whose JSON cannot carry it (an empty list
			// omitted by omitempty) may be refused.
			if !strings.Contains(err.Error(), "would not verify") {
				t.Fatalf("Marshal of a parsed state: %v", err)
			}
			return
		}
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("Marshal wrote what Parse refuses: %v\n%s", err, out)
		}
		if back.Format != s.Format {
			t.Fatalf("format %s read back as %s", s.Format, back.Format)
		}
		again, err := back.Marshal()
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("second Marshal differs: %v\n%s\n%s", err, out, again)
		}
		for _, cfg := range cfgs {
			for _, st := range []*State{s, back} {
				_ = Validate(st, machine, cfg)
				p, err := PlanRebuild(st, machine, cfg)
				if err != nil || !p.Changed {
					continue
				}
				_ = p.String()
				if !p.Blocked() {
					if err := Validate(reparse(t, p.New), machine, cfg); err != nil {
						t.Fatalf("plan's state does not validate: %v\n%s", err, p)
					}
				}
			}
		}
	})
}
