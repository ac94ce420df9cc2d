package memmgr

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// readVector reads a golden file copied from ../shared/vectors.
func readVector(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name + ".memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kubeletBytes is a golden file as the kubelet wrote it: the kubelet writes
// json.Marshal's output, without a newline; m01 and m02 were saved with one.
func kubeletBytes(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\n")) }

// TestVectors reads every memory_manager_state golden file with the verdict
// the kubelet gave it (../shared/vectors/README.md).
func TestVectors(t *testing.T) {
	m04 := readVector(t, "m04-static-1-entry")
	m04bad := bytes.Replace(m04, []byte(`"checksum":631627110`), []byte(`"checksum":12345`), 1)
	if bytes.Equal(m04, m04bad) {
		t.Fatal("m04 has no checksum 631627110")
	}
	for _, tc := range []struct {
		name    string
		file    []byte
		policy  string
		memGiB  uint64
		wantErr error  // nil: the kubelet starts
		kubelet string // the kubelet's message
	}{
		{name: "m01 None", file: readVector(t, "m01-none-firststart"), policy: PolicyNone, memGiB: 8},
		{name: "m02 Static 8Gi", file: readVector(t, "m02-static-1numa-8Gi-hp2Mi"), policy: PolicyStatic, memGiB: 8},
		{name: "m02 Static 16Gi", file: readVector(t, "m02-static-1numa-8Gi-hp2Mi"), policy: PolicyStatic, memGiB: 16,
			wantErr: ErrMachineState, kubelet: "[memorymanager] the expected machine state is different from the real one"},
		{name: "m04 Static 8Gi", file: m04, policy: PolicyStatic, memGiB: 8},
		{name: "m04 checksum 12345", file: m04bad, policy: PolicyStatic, memGiB: 8,
			wantErr: ErrCorrupt, kubelet: `could not restore state from checkpoint: checkpoint is corrupted, please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`},
		{name: "m01 under Static", file: readVector(t, "m01-none-firststart"), policy: PolicyStatic, memGiB: 8,
			wantErr: ErrPolicy, kubelet: `could not restore state from checkpoint: [memorymanager] configured policy "Static" differs from state checkpoint policy "None", please drain this node and delete the memory manager checkpoint file "/var/lib/kubelet/memory_manager_state" before restarting Kubelet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snap := vectorMachine(t, tc.memGiB)
			cfg := vectorConfig(t, tc.policy, snap)
			s, err := Parse(tc.file)
			if err == nil {
				err = Validate(s, snap, cfg)
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				return
			}
			var ke *KubeletError
			if !errors.As(err, &ke) {
				t.Fatalf("%v is no KubeletError", err)
			}
			if ke.Kubelet != tc.kubelet {
				t.Errorf("kubelet message\n got %s\nwant %s", ke.Kubelet, tc.kubelet)
			}
			t.Logf("%v", err)
		})
	}
}

// TestVectorsRoundTrip: the files the kubelet wrote are written back byte
// for byte.
func TestVectorsRoundTrip(t *testing.T) {
	for _, name := range []string{"m01-none-firststart", "m02-static-1numa-8Gi-hp2Mi", "m04-static-1-entry"} {
		t.Run(name, func(t *testing.T) {
			b := readVector(t, name)
			s, err := Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if s.Format != FormatV1 {
				t.Errorf("format %s, want V1", s.Format)
			}
			out, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, kubeletBytes(b)) {
				t.Errorf("round trip differs\n got %s\nwant %s", out, b)
			}
		})
	}
}

// TestNewIsFirstStart: the state a kubelet writes on first start is New's.
func TestNewIsFirstStart(t *testing.T) {
	snap := vectorMachine(t, 8)
	for _, tc := range []struct{ policy, vector string }{
		{PolicyNone, "m01-none-firststart"},
		{PolicyStatic, "m02-static-1numa-8Gi-hp2Mi"},
	} {
		s, err := New(snap, vectorConfig(t, tc.policy, snap))
		if err != nil {
			t.Fatal(err)
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if want := kubeletBytes(readVector(t, tc.vector)); !bytes.Equal(out, want) {
			t.Errorf("%s: New\n got %s\nwant %s", tc.policy, out, want)
		}
	}
}

// TestValidateExplains: the mismatch names the node, the resource and the
// numbers.
func TestValidateExplains(t *testing.T) {
	snap := vectorMachine(t, 16)
	s, err := Parse(readVector(t, "m02-static-1numa-8Gi-hp2Mi"))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(s, snap, vectorConfig(t, PolicyStatic, snap))
	for _, want := range []string{
		"NUMA node 0 memory: total 8Gi in the state, 16Gi on the machine (memory added or removed)",
		"NUMA node 0 memory: allocatable 6Gi in the state, 14Gi on the machine",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
}
