package cpumgr

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

// TestVectors reads every golden file of ../shared/vectors (copied to
// testdata) and checks the verdict its README lists, with the kubelet's
// words. Machines: N CPUs, one thread per core, one socket, one NUMA node,
// the static policy with a reservation of 1 CPU, unless stated.
func TestVectors(t *testing.T) {
	const path = "/var/lib/kubelet/cpu_manager_state"
	restore := func(reason string) string {
		return "could not restore state from checkpoint: " + reason + `, please drain this node and delete the CPU manager checkpoint file "` + path + `" before restarting Kubelet`
	}
	podLevel := func(kc *kubeletv1beta1.KubeletConfiguration) {
		kc.FeatureGates = map[string]bool{"PodLevelResourceManagers": true}
	}
	none := func(kc *kubeletv1beta1.KubeletConfiguration) { kc.CPUManagerPolicy = PolicyNone }

	tests := []struct {
		file    string
		machine fixturegen.Machine
		kc      *kubeletv1beta1.KubeletConfiguration
		format  Format
		// want is the kubelet's Start error, "" for a start.
		want string
	}{
		{file: "c01-static-4cpu-empty", machine: machine(4, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c03-static-8cpu-2entries", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c03-static-8cpu-2entries", machine: machine(4, 1), kc: kubelet("1"), format: FormatV2,
			want: `current set of available CPUs "0-3" doesn't match with CPUs in state "0-7"`},
		{file: "c01-static-4cpu-empty", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2,
			want: `current set of available CPUs "0-7" doesn't match with CPUs in state "0-3"`},
		{file: "c07-checksum-zero", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c08-pretty-reordered", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c10-entries-empty-object", machine: machine(4, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c12-entry-overlaps-default", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2,
			want: `pod: ` + podA + `, container: app cpuset: "2-3" overlaps with default cpuset "0-3,6-7"`},
		{file: "c13-reserved-cpu-not-in-default", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2,
			want: `not all reserved cpus: "0" are present in defaultCpuSet: "1,6-7"`},
		{file: "c15-empty-default-no-entries", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2},
		{file: "c16-policy-none", machine: machine(8, 1), kc: kubelet("", none), format: FormatV2},
		{file: "c16-policy-none", machine: machine(8, 1), kc: kubelet("1"), format: FormatV2,
			want: restore(`configured policy "static" differs from state checkpoint policy "none"`)},
		{file: "c18-reserved-2-smt", machine: machine(4, 2), kc: kubelet("2"), format: FormatV2},
		{file: "c19-v3-podentries", machine: machine(8, 1), kc: kubelet("1", podLevel), format: FormatV3},
		{file: "c19-v3-podentries", machine: machine(8, 1), kc: kubelet("1"), format: FormatV3,
			want: restore(`json: cannot unmarshal object into Go struct field CPUManagerCheckpointV1.entries of type string`)},
	}
	for _, tt := range tests {
		name := fmt.Sprintf("%s/%dx%d/%s", tt.file, tt.machine.CoresPerSocket, tt.machine.ThreadsPerCore, tt.kc.CPUManagerPolicy)
		if tt.kc.FeatureGates["PodLevelResourceManagers"] {
			name += "+podlevel"
		}
		t.Run(name, func(t *testing.T) {
			s, err := Parse(vector(t, tt.file))
			if err != nil {
				t.Fatalf("Parse() error: %v", err)
			}
			if s.Format != tt.format {
				t.Errorf("Format = %s, want %s", s.Format, tt.format)
			}
			snap := snapshot(t, tt.machine)
			cfg, err := NewConfig(tt.kc, snap, path, rel136)
			if err != nil {
				t.Fatalf("NewConfig() error: %v", err)
			}
			err = Validate(s, snap, cfg)
			var got string
			if err != nil {
				var se *StartError
				if !errors.As(err, &se) || !errors.Is(err, ErrInvalidState) {
					t.Fatalf("Validate() error %v is not a *StartError", err)
				}
				got = se.Kubelet
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestVectorsRefused checks the files the kubelet refuses to load: the
// README's rule that a file that does not verify falls back to V1 and
// reports V1's error, and "entries":null.
func TestVectorsRefused(t *testing.T) {
	c03 := vector(t, "c03-static-8cpu-2entries")
	c01 := vector(t, "c01-static-4cpu-empty")
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"entries null", bytes.Replace(vector(t, "c10-entries-empty-object"), []byte(`"entries":{}`), []byte(`"entries":null`), 1),
			"checkpoint is corrupted"},
		{"bad checksum with entries", bytes.Replace(c03, []byte("3413913315"), []byte("3413913316"), 1),
			"json: cannot unmarshal object into Go struct field CPUManagerCheckpointV1.entries of type string"},
		{"bad checksum without entries", bytes.Replace(c01, []byte("611748604"), []byte("611748605"), 1),
			"checkpoint is corrupted"},
		{"edited default", bytes.Replace(c03, []byte(`"0-1,6-7"`), []byte(`"0-1,6"`), 1),
			"json: cannot unmarshal object into Go struct field CPUManagerCheckpointV1.entries of type string"},
		{"unparsable default with checksum 0", []byte(`{"policyName":"static","defaultCpuSet":"0-x","checksum":0}`),
			`could not parse default cpu set "0-x": strconv.Atoi: parsing "x": invalid syntax`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(tt.in)
			var le *LoadError
			if !errors.As(err, &le) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Parse() error = %v, want a *LoadError", err)
			}
			if le.Kubelet != tt.want {
				t.Errorf("kubelet says %q, want %q", le.Kubelet, tt.want)
			}
		})
	}
}

// TestVectorsMarshal checks Marshal against the kubelet's bytes: every
// golden file the kubelet wrote as is round-trips byte for byte, and c15
// becomes what the kubelet rewrites it to.
func TestVectorsMarshal(t *testing.T) {
	for _, file := range []string{
		"c01-static-4cpu-empty",
		"c03-static-8cpu-2entries",
		"c12-entry-overlaps-default",
		"c13-reserved-cpu-not-in-default",
		"c15-empty-default-no-entries",
		"c16-policy-none",
		"c18-reserved-2-smt",
		"c19-v3-podentries",
	} {
		t.Run(file, func(t *testing.T) {
			in := vector(t, file)
			s, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(in), string(out)); diff != "" {
				t.Errorf("Marshal() differs from the kubelet's bytes (-kubelet +hotplugd):\n%s", diff)
			}
		})
	}
	t.Run("rewrites", func(t *testing.T) {
		for _, tt := range []struct{ file, want string }{
			// c07, c08, c10 were edited by hand; the kubelet writes them so.
			{"c07-checksum-zero", string(vector(t, "c03-static-8cpu-2entries"))},
			{"c08-pretty-reordered", string(vector(t, "c03-static-8cpu-2entries"))},
			{"c10-entries-empty-object", string(vector(t, "c01-static-4cpu-empty"))},
		} {
			s, err := Parse(vector(t, tt.file))
			if err != nil {
				t.Fatal(err)
			}
			out, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("%s: Marshal() = %s, want %s", tt.file, out, tt.want)
			}
		}
	})
	t.Run("c15 after the kubelet's start", func(t *testing.T) {
		s, err := Parse(vector(t, "c15-empty-default-no-entries"))
		if err != nil {
			t.Fatal(err)
		}
		s.DefaultCPUSet = set("0-7")
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		const want = `{"policyName":"static","defaultCpuSet":"0-7","checksum":14413152}`
		if string(out) != want {
			t.Errorf("Marshal() = %s, want %s", out, want)
		}
	})
}

// TestReservedCPUs checks the kubelet's choice of reserved CPUs.
func TestReservedCPUs(t *testing.T) {
	tests := []struct {
		name    string
		machine fixturegen.Machine
		kc      *kubeletv1beta1.KubeletConfiguration
		want    string
		wantErr string
	}{
		{"1 of 8", machine(8, 1), kubelet("1"), "0", ""},
		{"fraction rounds up", machine(8, 1), kubelet("1500m"), "0-1", ""},
		{"c18: 2 on 4 cores x 2 threads", machine(4, 2), kubelet("2"), "0,4", ""},
		{"3 on 4 cores x 2 threads", machine(4, 2), kubelet("3"), "0-1,4", ""},
		{"spread: 2 on 4 cores x 2 threads", machine(4, 2), kubelet("2", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"CPUManagerPolicyAlphaOptions": true}
			kc.CPUManagerPolicyOptions = map[string]string{"distribute-cpus-across-cores": "true"}
		}), "0-1", ""},
		{"kube and system reserved add up", machine(4, 2), kubelet("500m", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.SystemReserved = map[string]string{"cpu": "1"}
		}), "0,4", ""},
		{"reservedSystemCPUs wins", machine(4, 2), kubelet("2", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ReservedSystemCPUs = "3,7"
		}), "3,7", ""},
		{"two sockets: the whole first socket", fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2,
			Nodes: []fixturegen.Node{{CPUs: []int{0, 1, 4, 5}, MemTotalKB: 1 << 20}, {CPUs: []int{2, 3, 6, 7}, MemTotalKB: 1 << 20}}},
			kubelet("4"), "0-1,4-5", ""},
		{"offline CPU: the smaller socket first", fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 2, OfflineCPUs: []int{7},
			Nodes: []fixturegen.Node{{CPUs: []int{0, 1, 4, 5}, MemTotalKB: 1 << 20}, {CPUs: []int{2, 3, 6, 7}, MemTotalKB: 1 << 20}}},
			kubelet("1"), "3", ""},
		{"no reservation", machine(4, 1), kubelet(""), "", "[cpumanager] unable to determine reserved CPU resources for static policy"},
		{"reservedSystemCPUs offline", machine(4, 1, 3), kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ReservedSystemCPUs = "3"
		}), "", "not a subset of online-cpus"},
		{"more than there are", machine(2, 1), kubelet("3"), "", "unable to reserve the required amount of CPUs"},
		{"uncore option", machine(4, 1), kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"prefer-align-cpus-by-uncorecache": "true"}
		}), "", "set reservedSystemCPUs"},
		{"alpha option without its gate", machine(4, 1), kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"distribute-cpus-across-cores": "true"}
		}), "", "Alpha-level Options not enabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshot(t, tt.machine)
			got, err := ReservedCPUs(tt.kc, snap, rel136)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ReservedCPUs() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReservedCPUs() error: %v", err)
			}
			if got.String() != tt.want {
				t.Errorf("ReservedCPUs() = %q, want %q", got, tt.want)
			}
		})
	}
}
