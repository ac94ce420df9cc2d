package kubeletversion

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		bad      bool
	}{
		{in: "v1.37.2", want: "v1.37.2"},
		{in: "1.34.4", want: "v1.34.4"},
		{in: "v1.38.0-alpha.0", want: "v1.38.0-alpha.0"},
		{in: "v1.36.3+k3s1", want: "v1.36.3+k3s1"},
		{in: " v1.37.2\n", bad: true},
		{in: "v1.36", bad: true},
		{in: "v1.036.3", bad: true}, // semantic versioning: no leading zero
		{in: "v1.36.3-", bad: true},
		{in: "v1.99999999999.0", bad: true},
		{in: "Kubernetes v1.36.3", bad: true},
		{in: "", bad: true},
	} {
		v, err := Parse(tt.in)
		if tt.bad {
			if !errors.Is(err, ErrParse) {
				t.Errorf("Parse(%q) = %v, %v; want ErrParse", tt.in, v, err)
			}
			continue
		}
		if err != nil || v.String() != tt.want {
			t.Errorf("Parse(%q) = %v, %v; want %s", tt.in, v, err, tt.want)
		}
	}
}

func TestLookup(t *testing.T) {
	for _, tt := range []struct {
		in    string
		minor int // 0: unknown
	}{
		{"v1.34.4", 34},
		{"v1.35.0", 35},
		{"v1.36.3", 36},
		{"v1.37.2", 37},
		{"v1.37.9", 37},        // a newer patch of a known minor is known
		{"v1.36.3+k3s1", 36},   // distribution builds too
		{"v1.38.0-alpha.0", 0}, // the next minor's pre-release
		{"v1.37.0-rc.1", 0},    // a pre-release of a known minor
		{"v1.33.7", 0},         // too old
		{"v1.38.1", 0},         // too new
		{"v2.0.0", 0},
	} {
		r, err := Lookup(MustParse(tt.in))
		switch {
		case tt.minor == 0 && !errors.Is(err, ErrUnknown):
			t.Errorf("Lookup(%s) = %v, %v; want ErrUnknown", tt.in, r, err)
		case tt.minor != 0 && (err != nil || r.Minor != tt.minor):
			t.Errorf("Lookup(%s) = %v, %v; want 1.%d", tt.in, r, err, tt.minor)
		}
	}
	if _, err := Lookup(Version{}); !errors.Is(err, ErrUnknown) {
		t.Errorf("Lookup(zero) = %v, want ErrUnknown", err)
	}
}

func TestEnabled(t *testing.T) {
	r36, r37 := ByMinor(36), ByMinor(37)
	for _, tt := range []struct {
		name  string
		r     *Release
		gates map[string]bool
		gate  string
		want  bool
	}{
		{"default off", r36, nil, GatePodLevelResourceManagers, false},
		{"explicit", r36, map[string]bool{GatePodLevelResourceManagers: true}, GatePodLevelResourceManagers, true},
		{"AllAlpha turns an alpha gate on", r36, map[string]bool{AllAlpha: true}, GatePodLevelResourceManagers, true},
		{"explicit beats AllAlpha", r36, map[string]bool{AllAlpha: true, GatePodLevelResourceManagers: false}, GatePodLevelResourceManagers, false},
		{"AllBeta leaves alpha gates", r36, map[string]bool{AllBeta: true}, GatePodLevelResourceManagers, false},
		{"beta in 1.37: AllBeta", r37, map[string]bool{AllBeta: true}, GatePodLevelResourceManagers, true},
		{"beta in 1.37: AllAlpha does not", r37, map[string]bool{AllAlpha: true}, GatePodLevelResourceManagers, false},
		{"AllBeta=false turns a default-on beta gate off", r36, map[string]bool{AllBeta: false}, GateCPUManagerPolicyBetaOptions, false},
		{"gate the release lacks", ByMinor(34), map[string]bool{GatePodLevelResourceManagers: true}, GatePodLevelResourceManagers, false},
	} {
		if got := tt.r.Enabled(tt.gates, tt.gate); got != tt.want {
			t.Errorf("%s: Enabled(%v, %s) = %v, want %v", tt.name, tt.gates, tt.gate, got, tt.want)
		}
	}
}

func TestResizesInPlaceNoKnownRelease(t *testing.T) {
	for _, r := range Releases() {
		if r.ResizesInPlace(map[string]bool{"InPlaceNodeResourceResize": true, AllAlpha: true, AllBeta: true}) {
			t.Errorf("%s resizes in place; no release up to 1.37 has the gate", r)
		}
	}
}

func TestFromBinary(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n[ \"$1\" = --version ] && echo 'Kubernetes v1.37.2' && exit 0\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := FromBinary(context.Background(), bin)
	if err != nil || v.String() != "v1.37.2" {
		t.Fatalf("FromBinary = %v, %v; want v1.37.2", v, err)
	}
	bad := filepath.Join(dir, "notkubelet")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := FromBinary(context.Background(), bad); !errors.Is(err, ErrParse) {
		t.Errorf("FromBinary(%s) = %v, want ErrParse", bad, err)
	}
	if _, err := FromBinary(context.Background(), filepath.Join(dir, "missing")); err == nil {
		t.Error("FromBinary(missing) succeeded")
	}
}

func TestFromProcess(t *testing.T) {
	// This test's own process is not a kubelet: its --version is not
	// Kubernetes'; a process that does not exist has no exe.
	if _, err := FromProcess(context.Background(), "/proc", 1<<30); err == nil {
		t.Error("FromProcess(no such pid) succeeded")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.35.4'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A fake procfs: <root>/<pid>/exe is a symlink to the binary.
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(filepath.Join(proc, "42"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(proc, "42", "exe")); err != nil {
		t.Fatal(err)
	}
	if v, err := FromProcess(context.Background(), proc, 42); err != nil || v.String() != "v1.35.4" {
		t.Errorf("FromProcess = %v, %v; want v1.35.4", v, err)
	}
	if err := os.MkdirAll(filepath.Join(proc, "43"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin+" (deleted)", filepath.Join(proc, "43", "exe")); err != nil {
		t.Fatal(err)
	}
	if _, err := FromProcess(context.Background(), proc, 43); err == nil || !strings.Contains(err.Error(), "replaced on disk") {
		t.Errorf("FromProcess(deleted binary) = %v, want an error that says it was replaced", err)
	}
}
