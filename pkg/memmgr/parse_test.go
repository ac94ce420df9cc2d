package memmgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// TestParseBadInput: every malformed file is a clear error; the kubelet's
// own message where the kubelet reads the file.
func TestParseBadInput(t *testing.T) {
	m04 := readVector(t, "m04-static-1-entry")
	restore := func(reason string) string {
		return "could not restore state from checkpoint: " + reason +
			`, please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`
	}
	for _, tc := range []struct {
		name    string
		in      []byte
		want    error
		kubelet string
	}{
		{"empty", nil, ErrInvalid, restore("unexpected end of JSON input")},
		{"truncated", m04[:len(m04)/2], ErrInvalid, restore("unexpected end of JSON input")},
		{"not JSON", []byte("policyName: Static\n"), ErrInvalid, restore("invalid character 'p' looking for beginning of value")},
		{"trailing garbage", append(append([]byte{}, m04...), "}"...), ErrInvalid, restore("invalid character '}' after top-level value")},
		{"policyName a number", []byte(`{"policyName":5,"machineState":{},"checksum":0}`), ErrInvalid,
			restore("json: cannot unmarshal number into Go struct field MemoryManagerCheckpointV1.policyName of type string")},
		{"total a string", bytes.Replace(m04, []byte(`"total":8589934592`), []byte(`"total":"8Gi"`), 1), ErrInvalid,
			restore("json: cannot unmarshal string into Go struct field MemoryTable.machineState.memoryMap.total of type uint64")},
		{"negative size", bytes.Replace(m04, []byte(`"size":1073741824`), []byte(`"size":-1`), 1), ErrInvalid,
			restore("json: cannot unmarshal number -1 into Go struct field Block.entries.size of type uint64")},
		{"NUMA id not a number", bytes.Replace(m04, []byte(`"machineState":{"0"`), []byte(`"machineState":{"zero"`), 1), ErrInvalid,
			restore(`json: cannot unmarshal number zero into Go struct field MemoryManagerCheckpointV1.machineState of type int`)},
		{"checksum a string", bytes.Replace(m04, []byte(`"checksum":631627110`), []byte(`"checksum":"631627110"`), 1), ErrInvalid,
			restore("json: cannot unmarshal string into Go struct field MemoryManagerCheckpointV1.checksum of type checksum.Checksum")},
		{"entry edited", bytes.Replace(m04, []byte(`"size":1073741824`), []byte(`"size":1073741825`), 1), ErrCorrupt, restore("checkpoint is corrupted")},
		{"1.37 data layout", []byte(`{"data":"{}","dataChecksum":1,"policyName":"Static","machineState":{},"checksum":0}`), ErrUnsupportedFormat, "(kubelet 1.37 or later layout)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse = %v, %v; want %v", s, err, tc.want)
			}
			var ke *KubeletError
			if !errors.As(err, &ke) {
				t.Fatalf("%v is no KubeletError", err)
			}
			if ke.Kubelet != tc.kubelet {
				t.Errorf("kubelet message\n got %s\nwant %s", ke.Kubelet, tc.kubelet)
			}
			if !strings.HasPrefix(err.Error(), "memmgr: ") {
				t.Errorf("error %q does not name the package", err)
			}
		})
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
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(bad)
	var ke *KubeletError
	if !errors.As(err, &ke) || !strings.Contains(ke.Kubelet, `checkpoint file "`+bad+`"`) {
		t.Errorf("bad file: %v", err)
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
