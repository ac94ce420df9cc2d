package remedy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
)

// TestBinaryChanged: the binary's change time against the kubelet's start.
func TestBinaryChanged(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubelet")
	if err := os.WriteFile(bin, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	facts := func(argv0 string, started time.Time) *kubeletwatch.Facts {
		return &kubeletwatch.Facts{Kubelet: &kubeletconfig.Kubelet{PID: 7, Cmdline: []string{argv0, "--config=x"}}, Started: started}
	}
	for _, tt := range []struct {
		name string
		f    *kubeletwatch.Facts
		want string // "" or a part of the reason
	}{
		{"unchanged since the start", facts(bin, fi.ModTime().Add(time.Second)), ""},
		{"changed after the start", facts(bin, fi.ModTime().Add(-time.Minute)), "changed at"},
		{"gone", facts(bin+".gone", fi.ModTime().Add(time.Second)), "cannot be looked at"},
		{"relative path", facts("kubelet", fi.ModTime().Add(time.Second)), "not by an absolute path"},
		{"no process: the operator's word", &kubeletwatch.Facts{Kubelet: &kubeletconfig.Kubelet{Cmdline: []string{"--config=x"}}}, ""},
	} {
		got := binaryChanged(tt.f)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: binaryChanged = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestSuperReadOnly(t *testing.T) {
	mount := func(mp string, superRO bool) *procfs.MountInfo {
		super := map[string]string{"rw": ""}
		if superRO {
			super = map[string]string{"ro": ""}
		}
		// The mount's own options are read-only for the kubelet's root
		// dir, as in hotplugd's sandbox: they do not count.
		return &procfs.MountInfo{MountPoint: mp, Options: map[string]string{"ro": ""}, SuperOptions: super}
	}
	mounts := []*procfs.MountInfo{mount("/", false), mount("/var/lib/kubelet", false), mount("/mnt/ro disk", true)}
	for _, tt := range []struct {
		dir  string
		want bool
	}{
		{"/var/lib/kubelet", false}, // a read-only view of a writable file system
		{"/var/lib/kubelet/pods", false},
		{"/mnt/ro disk/x", true},
		{"/mnt/ro", false},
		{"/etc", false},
	} {
		got, err := superReadOnlyIn(mounts, tt.dir)
		if err != nil || got != tt.want {
			t.Errorf("superReadOnly(%q) = %v, %v; want %v", tt.dir, got, err, tt.want)
		}
	}
	// This machine's own mounts are read.
	if _, err := superReadOnly("/"); err != nil {
		t.Errorf("superReadOnly(/): %v", err)
	}
}
