package memmgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
)

// m05 is m04's state as kubelet 1.37.2 writes it (checked against its own
// code in test/kubeletcompat, TestMemoryManagerV137Golden).
const m05 = "m05-static-1-entry-v137"

// kubeletSays is what hotplugd says the kubelet says: the Kubelet field of
// a KubeletError, "" for nil.
func kubeletSays(t *testing.T, err error) string {
	t.Helper()
	if err == nil {
		return ""
	}
	var ke *KubeletError
	if !errors.As(err, &ke) {
		t.Fatalf("%v is no *KubeletError", err)
	}
	return ke.Kubelet
}

// setField returns the JSON object b with its top-level field name set to
// the JSON value (or removed, for "").
func setField(t *testing.T, b []byte, name, value string) []byte {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if value == "" {
		delete(top, name)
	} else {
		top[name] = json.RawMessage(value)
	}
	out, err := json.Marshal(top)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jsonString(t *testing.T, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReleaseVerdicts: files of every layout, damaged in the ways the
// loaders tell apart, against each known kubelet's loader: which checksum
// it verifies, when 1.37 falls back from data to the older fields and when
// it refuses, in its words.
func TestReleaseVerdicts(t *testing.T) {
	m04 := readVector(t, "m04-static-1-entry")
	v3 := kubeletBytes(readVector(t, m05))
	s, err := Parse(m04)
	if err != nil {
		t.Fatal(err)
	}
	s.Format = FormatV2
	v2, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var data string
	{
		var top struct{ Data string }
		if err := json.Unmarshal(v3, &top); err != nil {
			t.Fatal(err)
		}
		data = top.Data
	}
	machine := vectorMachine(t, 8)
	const (
		corrupt = "checkpoint is corrupted"
		v3c     = "could not load v3 checkpoint: "
	)
	// want maps kubelets to what they say ("" for a start); the ones not
	// named start.
	type want map[string]string
	old := []string{"1.34", "1.35", "1.36", "1.36 gate"}
	all := append(slices.Clone(old), "1.37", "1.37 gate")
	say := func(msg string, who ...string) want {
		w := want{}
		for _, k := range who {
			w[k] = msg
		}
		return w
	}
	for _, tc := range []struct {
		name string
		file []byte
		want want
	}{
		{"1.37 file", v3, nil},
		{"1.37 file, dataChecksum wrong", setField(t, v3, "dataChecksum", "12345"), say(v3c+corrupt, "1.37", "1.37 gate")},
		{"1.37 file, dataChecksum 0", setField(t, v3, "dataChecksum", "0"), say(v3c+corrupt, "1.37", "1.37 gate")},
		{"1.37 file, checksum wrong", setField(t, v3, "checksum", "12345"), say(corrupt, old...)},
		{"1.37 file, checksum 0", setField(t, v3, "checksum", "0"), say(corrupt, "1.34", "1.35")},
		{"1.37 file, data not JSON", setField(t, setField(t, v3, "data", `"x"`), "dataChecksum", fmt.Sprint(hashData("x"))),
			say(v3c+"failed to deserialize memory manager checkpoint data: invalid character 'x' looking for beginning of value", "1.37", "1.37 gate")},
		{"1.37 file, data a number", setField(t, v3, "data", "5"),
			say(v3c+"failed to deserialize memory manager checkpoint: json: cannot unmarshal number into Go struct field MemoryManagerCheckpoint.data of type string", "1.37", "1.37 gate")},
		{"1.37 file, data a number, dataChecksum 0", setField(t, setField(t, v3, "data", "5"), "dataChecksum", "0"), nil},
		{"1.37 file, data empty, dataChecksum 0", setField(t, setField(t, v3, "data", `""`), "dataChecksum", "0"), nil},
		{"1.37 file, data null", setField(t, v3, "data", "null"),
			say(v3c+"failed to deserialize memory manager checkpoint data: unexpected end of JSON input", "1.37", "1.37 gate")},
		{"1.37 file, data of another policy", setField(t, setField(t, v3, "data", jsonString(t, strings.Replace(data, "Static", "None", 1))), "dataChecksum",
			fmt.Sprint(hashData(strings.Replace(data, "Static", "None", 1)))),
			say(`[memorymanager] configured policy "Static" differs from state checkpoint policy "None"`, "1.37", "1.37 gate")},
		{"V1", m04, nil},
		{"V1, checksum 0", setField(t, m04, "checksum", "0"), say(corrupt, "1.34", "1.35")},
		{"V1, checksum wrong", setField(t, m04, "checksum", "12345"), say(corrupt, all...)},
		{"V1 with dataChecksum 7", setField(t, m04, "dataChecksum", "7"),
			say(v3c+"failed to deserialize memory manager checkpoint data: unexpected end of JSON input", "1.37", "1.37 gate")},
		{"V2", v2, say(corrupt, "1.34", "1.35", "1.36")},
		{"V2, checksum 0", setField(t, v2, "checksum", "0"), say(corrupt, "1.34", "1.35")},
		{"V2, podEntries a number", setField(t, v2, "podEntries", "5"), say(corrupt, all...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			for name, cfg := range releaseConfigs(t, machine) {
				msg := tc.want[name]
				if msg != "" {
					msg = "could not restore state from checkpoint: " + msg + `, please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`
				}
				if got := kubeletSays(t, Validate(s, machine, cfg)); got != msg {
					t.Errorf("%s:\n got %s\nwant %s", name, got, msg)
				}
			}
		})
	}
}

// TestV3Migrates: kubelet 1.37 reads the V1 and V2 files older kubelets
// wrote (a node upgraded to 1.37) and does not rewrite them: hotplugd leaves
// a valid one untouched and rebuilds an invalid one in V3, which older
// kubelets still read (their V1 fields beside data).
func TestV3Migrates(t *testing.T) {
	machine := vectorMachine(t, 8)
	grown := vectorMachine(t, 16)
	for _, gate := range []bool{false, true} {
		cfg := vectorConfig(t, PolicyStatic, machine)
		cfg.Release = kubeletversion.ByMinor(37)
		cfg.PodLevelResourceManagers = gate
		for _, f := range []Format{FormatV1, FormatV2} {
			s, err := Parse(readVector(t, "m04-static-1-entry"))
			if err != nil {
				t.Fatal(err)
			}
			s.Format = f
			s = reparse(t, s)
			p, err := PlanRebuild(s, machine, cfg)
			if err != nil || p.Changed {
				t.Fatalf("gate %v %s on its machine: %v\n%s", gate, f, err, p)
			}
			p, err = PlanRebuild(s, grown, cfg)
			if err != nil || !p.Changed || p.Blocked() {
				t.Fatalf("gate %v %s grown: %v\n%s", gate, f, err, p)
			}
			if p.New.Format != FormatV3 || !slices.Contains(p.Changes, fmt.Sprintf("format %s -> V3 (data)", f)) {
				t.Errorf("gate %v %s: %s, changes %q", gate, f, p.New.Format, p.Changes)
			}
			if !strings.Contains(p.Why.Error(), "the expected machine state is different from the real one") {
				t.Errorf("why: %v", p.Why)
			}
			n := reparse(t, p.New)
			for name, c := range releaseConfigs(t, grown) {
				if err := Validate(n, grown, c); err != nil {
					t.Errorf("gate %v %s: the rebuilt V3 file under %s: %v", gate, f, name, err)
				}
			}
		}
	}
}

// TestV3PodLevel: a pod-level assignment in a V2 file (kubelet 1.36 with
// the gate) is restored by kubelet 1.37 only with the gate too: with it the
// file is valid and a rebuild keeps the pod-level entry in data; without it
// the kubelet accounts the containers alone, which differs, and the
// pod-level assignment needs a drain (as for 1.36 without the gate): turned
// into container entries it would lose the pod's reservation.
func TestV3PodLevel(t *testing.T) {
	machine := snap(twoNodes()...)
	on := staticCfg(map[int]uint64{0: gi})
	on.PodLevelResourceManagers = true
	pl, err := New(machine, on)
	if err != nil {
		t.Fatal(err)
	}
	allocate(t, pl, podA, "app", memBlock(gi, 0))
	allocate(t, pl, podA, "side", memBlock(gi, 0))
	pl.MachineState = defaultMachineState(machine, systemReserved{0: {v1.ResourceMemory: gi}})
	pod := unit{PodUID: podA, Blocks: []state.Block{memBlock(3*gi, 0)}}
	if err := replay(pl.MachineState, pod); err != nil {
		t.Fatal(err)
	}
	pl.PodEntries[podA] = state.PodEntry{MemoryBlocks: pod.Blocks}
	pl = reparse(t, pl)
	if pl.Format != FormatV2 {
		t.Fatalf("format %s", pl.Format)
	}

	on37 := on
	on37.Release = kubeletversion.ByMinor(37)
	off37 := on37
	off37.PodLevelResourceManagers = false
	if err := Validate(pl, machine, on37); err != nil {
		t.Errorf("1.37 with the gate: %v", err)
	}
	if err := Validate(pl, machine, off37); !errors.Is(err, ErrMachineState) {
		t.Errorf("1.37 without the gate: %v", err)
	}

	grown := twoNodes()
	grown[0].mem = 20 * gi
	p, err := PlanRebuild(pl, snap(grown...), on37)
	if err != nil || !p.Changed || p.Blocked() || p.New.Format != FormatV3 {
		t.Fatalf("with the gate: %v\n%s", err, p)
	}
	if len(p.New.PodEntries[podA].MemoryBlocks) != 1 || p.New.MachineState[0].MemoryMap[v1.ResourceMemory].Reserved != 3*gi {
		t.Errorf("pod entries %v, machine state %v", p.New.PodEntries, p.New.MachineState[0].MemoryMap[v1.ResourceMemory])
	}
	b, err := p.New.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`\"podEntries\":`)) || bytes.Contains(b, []byte(`"podEntries":`)) {
		t.Errorf("pod entries belong in data only: %s", b)
	}
	back, err := Parse(b)
	if err != nil || len(back.PodEntries) != 1 {
		t.Fatalf("%v %v", err, back)
	}
	if err := Validate(back, snap(grown...), on37); err != nil {
		t.Errorf("rebuilt: %v", err)
	}

	p, err = PlanRebuild(pl, machine, off37)
	if err != nil || !p.Changed || p.New.Format != FormatV3 || len(p.New.PodEntries) != 0 {
		t.Fatalf("without the gate: %v\n%s", err, p)
	}
	checkAssignments(t, "needs drain", []string{podA + "/: a pod-level assignment needs the PodLevelResourceManagers"}, p.NeedsDrain)
	off37.AllowDrop = true
	p, err = PlanRebuild(pl, machine, off37)
	if err != nil || p.Blocked() || len(p.Dropped) != 1 || len(p.New.Entries) != 0 {
		t.Fatalf("without the gate, drop allowed: %v\n%s", err, p)
	}
	if err := Validate(reparse(t, p.New), machine, off37); err != nil {
		t.Errorf("rebuilt without the pod: %v", err)
	}
}

// TestV3Refused: a file kubelet 1.37 refuses (its data does not verify) is
// left to a person, even where older kubelets would read its V1 fields.
func TestV3Refused(t *testing.T) {
	machine := vectorMachine(t, 16)
	cfg := vectorConfig(t, PolicyStatic, machine)
	cfg.Release = kubeletversion.ByMinor(37)
	s, err := Parse(setField(t, kubeletBytes(readVector(t, m05)), "dataChecksum", "1"))
	if err != nil {
		t.Fatal(err)
	}
	if p, err := PlanRebuild(s, machine, cfg); !errors.Is(err, ErrCorrupt) || p != nil {
		t.Errorf("plan %v: %v", p, err)
	}
}

// TestMarshalV3: Marshal writes kubelet 1.37's bytes: the V1 fields in
// their order with the V1 checksum, then data (the compact JSON of the
// payload) and dataChecksum; what it writes reads back to the same state
// and bytes.
func TestMarshalV3(t *testing.T) {
	golden := kubeletBytes(readVector(t, m05))
	s, err := Parse(golden)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != FormatV3 || s.Checksum != 631627110 || s.DataChecksum != 2038072836 {
		t.Fatalf("%s checksum %d dataChecksum %d", s.Format, s.Checksum, s.DataChecksum)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, golden) {
		t.Errorf("Marshal\n got %s\nwant %s", out, golden)
	}
	// The V1 fields are m04, checksum included: what older kubelets read.
	if !bytes.HasPrefix(out, bytes.TrimSuffix(readVector(t, "m04-static-1-entry"), []byte("}"))) {
		t.Errorf("the V1 fields are not m04's: %s", out)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k.(string))
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff([]string{"policyName", "machineState", "entries", "checksum", "data", "dataChecksum"}, keys); diff != "" {
		t.Errorf("key order (-want +got):\n%s", diff)
	}

	// New for kubelet 1.37 is V3, whatever the gate; round trips.
	machine := vectorMachine(t, 8)
	for _, gate := range []bool{false, true} {
		for _, policy := range []string{PolicyNone, PolicyStatic} {
			cfg := vectorConfig(t, policy, machine)
			cfg.Release = kubeletversion.ByMinor(37)
			cfg.PodLevelResourceManagers = gate
			n, err := New(machine, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if n.Format != FormatV3 {
				t.Errorf("New: %s", n.Format)
			}
			b, err := n.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back := reparse(t, n)
			again, err := back.Marshal()
			if err != nil || !bytes.Equal(again, b) {
				t.Errorf("round trip: %v\n%s\n%s", err, b, again)
			}
			if err := Validate(back, machine, cfg); err != nil {
				t.Errorf("%s gate %v: %v", policy, gate, err)
			}
		}
	}
}

// TestWrittenVerdicts: the verdicts Validate assumes for a state built in
// memory (writtenLoads) are those Parse finds on the file Marshal writes.
func TestWrittenVerdicts(t *testing.T) {
	type verdict struct {
		Refused error
		Layout  Format
		Pods    bool
	}
	flat := func(ls [numReaders]load) []verdict {
		var out []verdict
		for _, l := range ls {
			v := verdict{Layout: l.layout, Pods: l.pods}
			if l.refused != nil {
				v = verdict{Refused: l.refused.kind}
			}
			out = append(out, v)
		}
		return out
	}
	base, err := Parse(readVector(t, "m04-static-1-entry"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Format{FormatV1, FormatV2, FormatV3} {
		for _, pods := range []bool{false, true} {
			s := base.Clone()
			s.Format = f
			if pods && f != FormatV1 {
				s.PodEntries = state.PodMemoryAssignments{podA: {MemoryBlocks: []state.Block{memBlock(gi, 0)}}}
			}
			b, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(flat(writtenLoads(f)), flat(parse(b).read.loads), cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("%s pods %v (-assumed +parsed):\n%s", f, pods, diff)
			}
		}
	}
}

// TestNewConfigRelease: NewConfig needs the kubelet's release and enables
// PodLevelResourceManagers as that release's feature gate does, AllAlpha
// and AllBeta included; the layout written follows the release.
func TestNewConfigRelease(t *testing.T) {
	machine := vectorMachine(t, 8)
	kc := &kubeletv1beta1.KubeletConfiguration{MemoryManagerPolicy: PolicyNone}
	if _, err := NewConfig(kc, machine, "", nil); !errors.Is(err, kubeletversion.ErrUnknown) {
		t.Errorf("nil release: %v", err)
	}
	for _, tc := range []struct {
		minor  int
		gates  map[string]bool
		gate   bool
		format Format
	}{
		{34, map[string]bool{"AllAlpha": true, "AllBeta": true}, false, FormatV1},
		{35, map[string]bool{"PodLevelResourceManagers": true}, false, FormatV1},
		{36, nil, false, FormatV1},
		{36, map[string]bool{"AllAlpha": true}, true, FormatV2},
		{36, map[string]bool{"AllAlpha": true, "PodLevelResourceManagers": false}, false, FormatV1},
		{36, map[string]bool{"AllBeta": true}, false, FormatV1},
		{37, nil, false, FormatV3},
		{37, map[string]bool{"AllBeta": true}, true, FormatV3},
		{37, map[string]bool{"AllAlpha": true}, false, FormatV3},
	} {
		kc := kc.DeepCopy()
		kc.FeatureGates = tc.gates
		cfg, err := NewConfig(kc, machine, "", kubeletversion.ByMinor(tc.minor))
		if err != nil {
			t.Fatal(err)
		}
		if cfg.PodLevelResourceManagers != tc.gate || formatFor(cfg) != tc.format || cfg.Release.Minor != tc.minor {
			t.Errorf("1.%d %v: gate %v format %s", tc.minor, tc.gates, cfg.PodLevelResourceManagers, formatFor(cfg))
		}
	}
	// A Config without a release is kubelet 1.36's (callers before 1.37).
	if cfg := (Config{}); cfg.release().Minor != 36 {
		t.Errorf("default release %s", cfg.release())
	}
}
