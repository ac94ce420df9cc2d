package cpumgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

var (
	rel134 = kubeletversion.ByMinor(34)
	rel137 = kubeletversion.ByMinor(37)
)

// v4File is a 1.37 file for 4 CPUs, reserved 0, one pinned container on 3.
func v4File(t *testing.T, edit func(*State)) []byte {
	t.Helper()
	s := &State{Format: FormatV4, PolicyName: PolicyStatic, DefaultCPUSet: set("0-2"),
		Entries: map[string]map[string]cpuset.CPUSet{podA: {"app": set("3")}}}
	if edit != nil {
		edit(s)
	}
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit rewrites one JSON field of a file.
func editJSON(t *testing.T, b []byte, key string, value any) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestV4Layout(t *testing.T) {
	b := v4File(t, nil)
	// The 1.37 layout: the V2 fields for older kubelets, then the payload.
	want := `{"policyName":"static","defaultCpuSet":"0-2","entries":{"` + podA + `":{"app":"3"}},"checksum":`
	if !bytes.HasPrefix(b, []byte(want)) || !bytes.Contains(b, []byte(`"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-2\",\"entries\":{\"`+podA+`\":{\"app\":\"3\"}}}","dataChecksum":`)) {
		t.Fatalf("Marshal() = %s", b)
	}
	s, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != FormatV4 {
		t.Errorf("Format = %s, want V4", s.Format)
	}
	again, err := s.Marshal()
	if err != nil || !bytes.Equal(again, b) {
		t.Errorf("Marshal(Parse(b)) = %s, %v; want the same bytes", again, err)
	}
}

// TestV4Verdicts: which kubelet loads which file, in its words.
func TestV4Verdicts(t *testing.T) {
	snap := snapshot(t, machine(4, 1))
	good := v4File(t, nil)
	var m map[string]any
	if err := json.Unmarshal(good, &m); err != nil {
		t.Fatal(err)
	}
	badData := editJSON(t, good, "dataChecksum", m["dataChecksum"].(float64)+1)
	badOuter := editJSON(t, good, "checksum", m["checksum"].(float64)+1)
	tamperedData := editJSON(t, good, "data", strings.Replace(m["data"].(string), `"0-2"`, `"0-1"`, 1))
	brokenData := editJSON(t, good, "data", `{"policyName":`)
	baseline := v4File(t, func(s *State) {
		s.Baselines = map[string]map[string]cpuset.CPUSet{podA: {"app": set("3")}}
	})
	badBaseline := editJSON(t, baseline, "data", strings.Replace(mustField(t, baseline, "data"), `"baseline":"3"`, `"baseline":"3-1"`, 1))
	badBaseline = fixDataChecksum(t, badBaseline)

	const corrupt137 = "could not load v4 checkpoint: checkpoint is corrupted"
	for _, tt := range []struct {
		name    string
		file    []byte
		rel     *kubeletversion.Release
		gates   map[string]bool
		wantErr string // "" loads and starts
	}{
		{"1.37 reads its own file", good, rel137, nil, ""},
		{"1.37 with the pod-level gate", good, rel137, map[string]bool{"PodLevelResourceManagers": true}, ""},
		{"1.36 reads the V2 fields of a 1.37 file (downgrade)", good, rel136, nil, ""},
		{"1.34 too", good, rel134, nil, ""},
		{"1.37 refuses a payload that does not verify", badData, rel137, nil, corrupt137},
		{"1.37 refuses an edited payload", tamperedData, rel137, nil, corrupt137},
		{"1.37 refuses a payload that is not JSON", fixDataChecksum(t, brokenData), rel137, nil,
			"could not load v4 checkpoint: failed to deserialize cpu manager checkpoint data: unexpected end of JSON input"},
		{"1.36 ignores the payload", badData, rel136, nil, ""},
		{"1.37 ignores the V2 checksum", badOuter, rel137, nil, ""},
		// 1.36 falls back to V1, whose decoder names the entries.
		{"1.36 refuses a bad V2 checksum", badOuter, rel136, nil, "cannot unmarshal object into Go struct field CPUManagerCheckpointV1.entries of type string"},
		{"1.37 reads baselines only with the gate", badBaseline, rel137, nil, ""},
		{"1.37 with the gate refuses a bad baseline", badBaseline, rel137, map[string]bool{"InPlacePodVerticalScalingExclusiveCPUs": true},
			`could not parse Baseline cpuset "3-1" for container "app" in pod "` + podA + `"`},
		{"1.37 reads a 1.36 V2 file", vector(t, "c01-static-4cpu-empty"), rel137, nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.file)
			if err != nil {
				t.Fatalf("Parse() = %v", err)
			}
			kc := kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.FeatureGates = tt.gates })
			cfg, err := NewConfig(kc, snap, "/var/lib/kubelet/cpu_manager_state", tt.rel)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(s, snap, cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want the kubelet to start", err)
				}
				return
			}
			var se *StartError
			if !errors.As(err, &se) || se.Rule != RuleLoad || !strings.Contains(se.Kubelet, tt.wantErr) {
				t.Fatalf("Validate() = %v, want a load refusal with %q", err, tt.wantErr)
			}
		})
	}
}

func mustField(t *testing.T, b []byte, key string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m[key].(string)
}

// fixDataChecksum sets dataChecksum to the payload's, as a writer would.
func fixDataChecksum(t *testing.T, b []byte) []byte {
	t.Helper()
	return editJSON(t, b, "dataChecksum", checksum.Of(dumpString(mustField(t, b, "data"))))
}

// TestV4Rebuild: a 1.37 kubelet's file after a CPU is added: the rebuild
// keeps the pinned container, writes V4 and, with the baselines gate, keeps
// the file's baselines.
func TestV4Rebuild(t *testing.T) {
	snap := snapshot(t, machine(6, 1))
	for _, tt := range []struct {
		name          string
		gates         map[string]bool
		file          []byte
		wantBaselines map[string]map[string]cpuset.CPUSet
	}{
		{"gates off", nil, v4File(t, nil), nil},
		{"baselines from the entries", map[string]bool{"InPlacePodVerticalScalingExclusiveCPUs": true}, v4File(t, nil),
			map[string]map[string]cpuset.CPUSet{podA: {"app": set("3")}}},
		{"the file's baselines", map[string]bool{"InPlacePodVerticalScalingExclusiveCPUs": true},
			v4File(t, func(s *State) {
				s.Baselines = map[string]map[string]cpuset.CPUSet{podA: {"app": set("3")}, podB: {"gone": set("1")}}
			}),
			map[string]map[string]cpuset.CPUSet{podA: {"app": set("3")}, podB: {"gone": set("1")}}},
		{"a 1.36 V2 file becomes V4", nil, vector(t, "c01-static-4cpu-empty"), nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			kc := kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.FeatureGates = tt.gates })
			cfg, err := NewConfig(kc, snap, "", rel137)
			if err != nil {
				t.Fatal(err)
			}
			p, err := PlanRebuild(s, snap, cfg)
			if err != nil {
				t.Fatalf("PlanRebuild() = %v\n%s", err, p)
			}
			if !p.Changed || p.New.Format != FormatV4 {
				t.Fatalf("plan: changed %v, format %s; want a V4 rewrite\n%s", p.Changed, p.New.Format, p)
			}
			if diff := cmp.Diff(tt.wantBaselines, p.New.Baselines, cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
				t.Errorf("baselines (-want +got):\n%s", diff)
			}
			b, err := p.New.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(back, snap, cfg); err != nil {
				t.Errorf("the rebuilt file is refused: %v", err)
			}
		})
	}
}
