package kubeletstart

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// stage is a feature gate's maturity at its release's own version, as the
// kubelet's feature gate (k8s.io/component-base/featuregate) judges it.
type stage uint8

const (
	alpha stage = iota + 1
	beta
	ga
	deprecated
	// preAlpha is a gate registered for a later release: known, but not
	// settable.
	preAlpha
)

// gateSpec is one feature gate of a release.
type gateSpec struct {
	stage  stage
	def    bool
	locked bool
}

// gateTable is every feature gate of one release's kubelet binary, as the
// generated files (zz_generated_gates_*.go) hold them: read off each
// release's own feature gate by test/kubeletcompat, which checks them there
// too (TestKubeletStartGateTable).
type gateTable struct {
	// release is the kubelet release the table was read from.
	release string
	// emulation is the version its feature gate judges at ("1.36").
	emulation string
	gates     map[string]gateSpec
	// deps are the gates each gate needs enabled when it is enabled (from
	// 1.35).
	deps map[string][]string
}

// gateTableFor returns the table of the release 1.<minor>, nil for one
// without.
func gateTableFor(minor int) *gateTable {
	switch minor {
	case 34:
		return &gates134
	case 35:
		return &gates135
	case 36:
		return &gates136
	case 37:
		return &gates137
	}
	return nil
}

// The meta-gates.
const (
	allAlpha = "AllAlpha"
	allBeta  = "AllBeta"
)

// featureGates is a kubelet's feature gate after its configuration's gates
// were set.
type featureGates struct {
	t       *gateTable
	enabled map[string]bool
}

// set sets the gates m as the kubelet's feature gate does at start
// (featureGate.SetFromMap, on a gate nothing was set on before) and returns
// the gate and, when the kubelet refuses m, its errors in its words (which
// it joins as one, in brackets when there are several) and order but one: the kubelet meets the gates (and, from 1.35, the
// dependencies) in Go's map order, set takes them in name order. Of several
// unknown gates the kubelet names the first it meets and stops; so does set.
func (t *gateTable) set(m map[string]bool) (*featureGates, []string) {
	enabled := map[string]bool{}
	var errs []string
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		v := m[k]
		spec, ok := t.gates[k]
		if !ok {
			return nil, []string{"unrecognized feature gate: " + k}
		}
		if spec.locked && spec.def != v {
			errs = append(errs, fmt.Sprintf("cannot set feature gate %v to %v, feature is locked to %v", k, v, spec.def))
			continue
		}
		if k == allAlpha || k == allBeta {
			// Every gate of the stage not set yet; gates set later in
			// the loop override it, so explicit settings always win.
			want := alpha
			if k == allBeta {
				want = beta
			}
			for name, s := range t.gates {
				if name == allAlpha || name == allBeta || s.stage != want {
					continue
				}
				if _, set := enabled[name]; !set {
					enabled[name] = v
				}
			}
			enabled[k] = v
			continue
		}
		if spec.stage == preAlpha {
			errs = append(errs, fmt.Sprintf("cannot set feature gate %v to %v, feature is PreAlpha at emulated version %s", k, v, t.emulation))
			continue
		}
		enabled[k] = v
	}
	// An explicit setting met before AllAlpha/AllBeta was kept by it; one
	// met after replaced its value: either way the explicit one holds.
	for _, k := range names {
		if k != allAlpha && k != allBeta && t.gates[k].stage != preAlpha && !(t.gates[k].locked && t.gates[k].def != m[k]) {
			enabled[k] = m[k]
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	fg := &featureGates{t: t, enabled: enabled}
	for _, name := range sortedKeys(t.deps) {
		if !fg.Enabled(name) {
			continue
		}
		var off []string
		for _, d := range t.deps[name] {
			if !fg.Enabled(d) {
				off = append(off, d)
			}
		}
		if len(off) > 0 {
			errs = append(errs, fmt.Sprintf("%s is enabled, but depends on features that are disabled: [%s]", name, strings.Join(off, " ")))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return fg, nil
}

// Enabled says whether the gate name is on: as set, else its default. A
// gate the release does not have is off.
func (f *featureGates) Enabled(name string) bool {
	if v, ok := f.enabled[name]; ok {
		return v
	}
	return f.t.gates[name].def
}

func sortedKeys[K ~string, V any](m map[K]V) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
