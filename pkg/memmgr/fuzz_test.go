package memmgr

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// FuzzParse: Parse never panics and fails only on a layout no known kubelet
// writes; whatever some kubelet accepts Marshal writes in a form that reads
// back to the same state, verdicts and bytes; Validate and PlanRebuild never
// panic, for any known kubelet, and a plan's new state validates.
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
		`{"data":"{}","dataChecksum":0,"checksum":0}`,
		`{"data":5,"dataChecksum":0,"checksum":0}`,
		`{"policyName":"None","data":"{\"policyName\":\"Static\",\"machineState\":{},\"podEntries\":{\"p\":{}}}","dataChecksum":1}`,
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
	for _, minor := range []int{34, 37} {
		for _, c := range []Config{staticCfg(map[int]uint64{0: gi}), gated, {Policy: PolicyNone}} {
			c.Release = kubeletversion.ByMinor(minor)
			cfgs = append(cfgs, c)
		}
	}

	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "memmgr: ") || !errors.Is(err, ErrUnsupportedFormat) {
				t.Fatalf("Parse: %v", err)
			}
			return
		}
		for _, cfg := range cfgs {
			_ = Validate(s, machine, cfg)
			_, _ = PlanRebuild(s, machine, cfg)
		}
		if !s.read.acceptedByAny() {
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
		for r, l := range back.read.loads {
			w := writtenLoads(back.Format)[r]
			if (l.refused == nil) != (w.refused == nil) || l.layout != w.layout || l.pods != w.pods {
				t.Fatalf("%s: %+v on the written file, %+v assumed", reader(r), l, w)
			}
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
