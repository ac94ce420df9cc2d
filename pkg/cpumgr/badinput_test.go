package cpumgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/cpumgr/internal/state"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// v1File is a V1 checkpoint as a kubelet before 1.18 wrote it, with its
// checksum.
func v1File(t *testing.T, def string, entries map[string]string) []byte {
	t.Helper()
	if entries == nil {
		// A kubelet's checkpoint always has the map, empty or not.
		entries = map[string]string{}
	}
	cp := &state.CPUManagerCheckpointV1{PolicyName: "static", DefaultCPUSet: def, Entries: entries}
	cp.Checksum = checksum.Checksum(checksum.Of(strings.Replace(dump.ForHash(cp), "CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)))
	b, err := jsonMarshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReadFileBadInput checks that every kind of bad file gives an error
// that says what is wrong and where, matches the right sentinel, and leaves
// the file as it was.
func TestReadFileBadInput(t *testing.T) {
	c03 := vector(t, "c03-static-8cpu-2entries")
	huge := append(bytes.Repeat([]byte(" "), statefile.MaxSize), c03...)
	tests := []struct {
		name string
		// setup creates the state file at path.
		setup   func(t *testing.T, path string)
		wantIs  error
		wantMsg string
	}{
		{"truncated", contents(c03[:40]), ErrCorrupt, "corrupt checkpoint: unexpected end of JSON input"},
		{"empty", contents(nil), ErrCorrupt, "corrupt checkpoint: unexpected end of JSON input"},
		{"not JSON", contents([]byte("policyName: static\n")), ErrCorrupt, "corrupt checkpoint: invalid character 'p'"},
		{"binary", contents([]byte{0, 1, 2, 0xff}), ErrCorrupt, "corrupt checkpoint: invalid character"},
		{"policy a number", contents([]byte(`{"policyName":1,"defaultCpuSet":"0-3","checksum":0}`)), ErrCorrupt,
			"corrupt checkpoint: json: cannot unmarshal number into Go struct field CPUManagerCheckpointV1.policyName of type string"},
		{"entries a list", contents([]byte(`{"policyName":"static","defaultCpuSet":"0-3","entries":[],"checksum":0}`)), ErrCorrupt,
			"corrupt checkpoint: json: cannot unmarshal array into Go struct field CPUManagerCheckpointV1.entries of type map[string]string"},
		{"checksum a string", contents([]byte(`{"policyName":"static","defaultCpuSet":"0-3","checksum":"611748604"}`)), ErrCorrupt,
			"corrupt checkpoint: json: cannot unmarshal string into Go struct field CPUManagerCheckpointV1.checksum of type checksum.Checksum"},
		{"bad CPU list", contents([]byte(`{"policyName":"static","defaultCpuSet":"3-0","checksum":0}`)), ErrCorrupt,
			`corrupt checkpoint: could not parse default cpu set "3-0"`},
		{"bad checksum", contents(bytes.Replace(vector(t, "c01-static-4cpu-empty"), []byte("611748604"), []byte("611748600"), 1)), ErrCorrupt,
			"corrupt checkpoint: checkpoint is corrupted"},
		{"a JSON list", contents([]byte(`[{"policyName":"static"}]`)), ErrUnknownFormat, "not a cpu_manager_state checkpoint: the file is JSON but not an object"},
		{"null", contents([]byte(`null`)), ErrUnknownFormat, "not a cpu_manager_state checkpoint"},
		{"no policy", contents([]byte(`{"defaultCpuSet":"0-3","checksum":0}`)), ErrUnknownFormat, "not a cpu_manager_state checkpoint: no policyName"},
		{"V4 no release loads", contents([]byte(`{"policyName":"static","defaultCpuSet":"0-7","checksum":1,"data":"{}","dataChecksum":1}`)), ErrCorrupt,
			"corrupt checkpoint: checkpoint is corrupted"},
		{"V1 with assignments", contents(v1File(t, "0-1", map[string]string{"containerd://0123": "2-3"})), ErrUnsupportedFormat,
			"unsupported cpu_manager_state format V1: its assignments are keyed by container ID"},
		{"huge", contents(huge), statefile.ErrTooLarge, "larger than"},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "elsewhere")
			if err := os.WriteFile(target, c03, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, statefile.ErrNotRegular, "symlink"},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}, statefile.ErrNotRegular, "not a regular file"},
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, statefile.ErrNotRegular, "not a regular file"},
		{"missing", func(*testing.T, string) {}, fs.ErrNotExist, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cpu_manager_state")
			tt.setup(t, path)
			before := snapshotFile(t, path)
			_, err := ReadFile(path)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("ReadFile() error = %v, want %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) || !strings.Contains(err.Error(), path) || !strings.HasPrefix(err.Error(), "cpumgr: ") {
				t.Errorf("ReadFile() error = %q, want the package, the path and %q", err, tt.wantMsg)
			}
			if after := snapshotFile(t, path); after != before {
				t.Errorf("the file changed: %q -> %q", before, after)
			}
		})
	}
}

func contents(b []byte) func(*testing.T, string) {
	return func(t *testing.T, path string) {
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotFile describes the file at path: its type, mode, size, mtime and
// contents (regular files only).
func snapshotFile(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		return err.Error()
	}
	desc := fi.Mode().String() + " " + fi.ModTime().String()
	if fi.Mode().IsRegular() {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		desc += " " + string(b)
	}
	return desc
}

func TestParseV1(t *testing.T) {
	s, err := Parse(v1File(t, "0-7", nil))
	if err != nil {
		t.Fatalf("Parse(V1 without assignments) error: %v", err)
	}
	if s.Format != FormatV1 || s.DefaultCPUSet.String() != "0-7" {
		t.Errorf("Parse() = %s %s, want V1 0-7", s.Format, s.DefaultCPUSet)
	}
	// Written back as the kubelet would: V2.
	b, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"policyName":"static","defaultCpuSet":"0-7","checksum":14413152}`; string(b) != want {
		t.Errorf("Marshal() = %s, want %s", b, want)
	}
	// A V1 file that does not verify is corrupt.
	bad := bytes.Replace(v1File(t, "0-7", nil), []byte(`"checksum":`), []byte(`"checksum":1`), 1)
	if _, err := Parse(bad); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Parse(V1 with a bad checksum) error = %v, want ErrCorrupt", err)
	}
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
