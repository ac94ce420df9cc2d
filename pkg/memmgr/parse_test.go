package memmgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// releaseConfigs are the vectors' Static kubelet as each known kubelet
// loader: every release, with and without PodLevelResourceManagers where
// the release has it.
func releaseConfigs(t *testing.T, snap *topology.Snapshot) map[string]Config {
	t.Helper()
	out := map[string]Config{}
	for _, rel := range kubeletversion.Releases() {
		cfg := vectorConfig(t, PolicyStatic, snap)
		cfg.Release = rel
		name := fmt.Sprintf("1.%d", rel.Minor)
		out[name] = cfg
		if _, ok := rel.Gates[kubeletversion.GatePodLevelResourceManagers]; ok {
			cfg.PodLevelResourceManagers = true
			out[name+" gate"] = cfg
		}
	}
	return out
}

// restoreMsg is the kubelet's message when it cannot restore its state from
// the vectors' file.
func restoreMsg(reason string) string {
	return "could not restore state from checkpoint: " + reason +
		`, please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`
}

// TestParseBadInput: a malformed file is no Parse error; every kubelet
// refuses it at restore, in its own words, which Validate gives. Kubelets
// 1.34 and 1.35 name their struct MemoryManagerCheckpoint where later ones
// say MemoryManagerCheckpointV1; 1.34 and 1.35 verify checksum 0.
func TestParseBadInput(t *testing.T) {
	m04 := readVector(t, "m04-static-1-entry")
	machine := vectorMachine(t, 8)
	for _, tc := range []struct {
		name    string
		in      []byte
		want    error
		kubelet string
		// old is what kubelets 1.34 and 1.35 say, when it differs.
		old string
	}{
		{name: "empty", in: nil, want: ErrInvalid, kubelet: "unexpected end of JSON input"},
		{name: "truncated", in: m04[:len(m04)/2], want: ErrInvalid, kubelet: "unexpected end of JSON input"},
		{name: "not JSON", in: []byte("policyName: Static\n"), want: ErrInvalid, kubelet: "invalid character 'p' looking for beginning of value"},
		{name: "trailing garbage", in: append(append([]byte{}, m04...), "}"...), want: ErrInvalid, kubelet: "invalid character '}' after top-level value"},
		{name: "policyName a number", in: []byte(`{"policyName":5,"machineState":{},"checksum":0}`), want: ErrInvalid,
			kubelet: "json: cannot unmarshal number into Go struct field MemoryManagerCheckpointV1.policyName of type string",
			old:     "json: cannot unmarshal number into Go struct field MemoryManagerCheckpoint.policyName of type string"},
		{name: "total a string", in: bytes.Replace(m04, []byte(`"total":8589934592`), []byte(`"total":"8Gi"`), 1), want: ErrInvalid,
			kubelet: "json: cannot unmarshal string into Go struct field MemoryTable.machineState.memoryMap.total of type uint64"},
		{name: "negative size", in: bytes.Replace(m04, []byte(`"size":1073741824`), []byte(`"size":-1`), 1), want: ErrInvalid,
			kubelet: "json: cannot unmarshal number -1 into Go struct field Block.entries.size of type uint64"},
		{name: "NUMA id not a number", in: bytes.Replace(m04, []byte(`"machineState":{"0"`), []byte(`"machineState":{"zero"`), 1), want: ErrInvalid,
			kubelet: `json: cannot unmarshal number zero into Go struct field MemoryManagerCheckpointV1.machineState of type int`,
			old:     `json: cannot unmarshal number zero into Go struct field MemoryManagerCheckpoint.machineState of type int`},
		{name: "checksum a string", in: bytes.Replace(m04, []byte(`"checksum":631627110`), []byte(`"checksum":"631627110"`), 1), want: ErrInvalid,
			kubelet: "json: cannot unmarshal string into Go struct field MemoryManagerCheckpointV1.checksum of type checksum.Checksum",
			old:     "json: cannot unmarshal string into Go struct field MemoryManagerCheckpoint.checksum of type checksum.Checksum"},
		{name: "entry edited", in: bytes.Replace(m04, []byte(`"size":1073741824`), []byte(`"size":1073741825`), 1), want: ErrCorrupt, kubelet: "checkpoint is corrupted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			for name, cfg := range releaseConfigs(t, machine) {
				want := tc.kubelet
				if tc.old != "" && cfg.Release.Minor < 36 {
					want = tc.old
				}
				err := Validate(s, machine, cfg)
				if !errors.Is(err, tc.want) {
					t.Fatalf("%s: Validate = %v; want %v", name, err, tc.want)
				}
				if got := kubeletSays(t, err); got != restoreMsg(want) {
					t.Errorf("%s: kubelet message\n got %s\nwant %s", name, got, restoreMsg(want))
				}
				if !strings.HasPrefix(err.Error(), "memmgr: ") {
					t.Errorf("error %q does not name the package", err)
				}
				if p, err := PlanRebuild(s, machine, cfg); !errors.Is(err, tc.want) {
					t.Errorf("%s: PlanRebuild = %v, %v; a damaged file is left to a person", name, p, err)
				}
			}
		})
	}
}

// TestParseUnsupported: a file no known kubelet accepts, with a field none
// of them writes, is a layout hotplugd does not know: ErrUnsupportedFormat,
// naming the field. Without such a field it is a refusal every kubelet
// makes (above); with it but accepted, the field is ignored as the kubelets
// ignore it (TestParseLenient).
func TestParseUnsupported(t *testing.T) {
	_, err := Parse([]byte(`{"policyName":"Static","machineState":{},"dataV4":"{}","dataV4Checksum":7,"checksum":12345}`))
	if !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), `"dataV4"`) || !strings.HasPrefix(err.Error(), "memmgr: ") {
		t.Errorf("Parse: %v", err)
	}
}

// TestParseLenient: what the kubelet's decoder accepts, Parse accepts:
// keys in any case, unknown fields, other whitespace.
func TestParseLenient(t *testing.T) {
	m04 := readVector(t, "m04-static-1-entry")
	var v map[string]any
	if err := json.Unmarshal(m04, &v); err != nil {
		t.Fatal(err)
	}
	v["POLICYNAME"] = v["policyName"]
	delete(v, "policyName")
	v["somethingNew"] = []int{1}
	pretty, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(pretty)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, m04) {
		t.Errorf("got %s", out)
	}
}

// TestParseNull: "null" and "{}" decode (the kubelet's decoder accepts
// them, with checksum 0) to a state without a policy, which the kubelet
// refuses as a policy change.
func TestParseNull(t *testing.T) {
	for _, in := range []string{"null", "{}"} {
		s, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		snap := vectorMachine(t, 8)
		if err := Validate(s, snap, vectorConfig(t, PolicyStatic, snap)); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: Validate %v", in, err)
		}
	}
}

// TestParseHuge: more than statefile.MaxSize is refused before decoding.
func TestParseHuge(t *testing.T) {
	b := make([]byte, statefile.MaxSize+1)
	for i := range b {
		b[i] = ' '
	}
	if _, err := Parse(b); !errors.Is(err, statefile.ErrTooLarge) {
		t.Errorf("Parse: %v", err)
	}
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); !errors.Is(err, statefile.ErrTooLarge) || !strings.Contains(err.Error(), path) {
		t.Errorf("ReadFile: %v", err)
	}
}

// TestReadFile: the path is in every error; a symlink in place of the file
// is refused, not followed; a missing file is fs.ErrNotExist.
func TestReadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "real")
	if err := os.WriteFile(good, readVector(t, "m04-static-1-entry"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(good); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, FileName)
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(link); !errors.Is(err, statefile.ErrNotRegular) || !strings.Contains(err.Error(), link) {
		t.Errorf("symlink: %v", err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing: %v", err)
	}
	// A file the kubelet refuses reads; Validate refuses it, naming the
	// configured path.
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ReadFile(bad)
	if err != nil {
		t.Fatal(err)
	}
	machine := vectorMachine(t, 8)
	cfg := vectorConfig(t, PolicyStatic, machine)
	cfg.Path = bad
	err = Validate(s, machine, cfg)
	var ke *KubeletError
	if !errors.As(err, &ke) || !strings.Contains(ke.Kubelet, `checkpoint file "`+bad+`"`) {
		t.Errorf("bad file: %v", err)
	}
	if err := os.WriteFile(bad, []byte(`{"v4":1,"checksum":5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(bad); !errors.Is(err, ErrUnsupportedFormat) || !strings.Contains(err.Error(), bad) {
		t.Errorf("unsupported file: %v", err)
	}
}

// TestMarshalRefusesUnverifiable: a state whose JSON would not read back to
// the same checksum (an empty pod-level block list is omitted from the
// JSON) is not written.
func TestMarshalRefusesUnverifiable(t *testing.T) {
	s, err := Parse([]byte(`{"policyName":"Static","machineState":{},"podEntries":{"p":{"memoryBlocks":[]}},"checksum":0}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.Format != FormatV1 || len(s.PodEntries) != 0 {
		t.Fatalf("checksum 0 is read as V1 (podEntries ignored), got %s %v", s.Format, s.PodEntries)
	}
	s.Format = FormatV2
	s.PodEntries = state.PodMemoryAssignments{"p": {MemoryBlocks: []state.Block{}}}
	if _, err := s.Marshal(); err == nil || !strings.Contains(err.Error(), "would not verify") {
		t.Errorf("Marshal: %v", err)
	}
}
