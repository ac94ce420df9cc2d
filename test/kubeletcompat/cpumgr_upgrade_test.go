package kubeletcompat_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// TestCPUManagerPreflightRepairsKubeletFile is the CPU-upgrade story for the
// kubelet release under test, end to end through `hotplugd preflight`: the
// release's own checkpoint code writes cpu_manager_state for a machine
// (a pinned container on CPU 3, CPU 0 reserved), the machine then gains or
// loses a CPU, that release's CPU manager refuses to start, preflight
// repairs the file, and the release's Start accepts the result without
// rewriting it, byte for byte what its checkpoint code writes for the
// repaired state. Under 1.37 the file is its V4 layout; under 1.36 with
// PodLevelResourceManagers its V3.
func TestCPUManagerPreflightRepairsKubeletFile(t *testing.T) {
	before := cpuLine(4, 1)
	for _, tt := range []struct {
		name    string
		after   fixturegen.Machine
		gates   map[string]bool
		wantDef string
	}{
		{"a CPU added", cpuLine(5, 1), nil, "0-2,4"},
		{"a free CPU removed", cpuLine(4, 1, 2), nil, "0-1"},
		{"a CPU added, pod-level gate", cpuLine(5, 1), map[string]bool{gatePodLevelResourceManagers: true}, "0-2,4"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := cpuKubelet{specific: cpus("0"), gates: tt.gates}
			k.setGates(t)
			rel := hotplugdRelease(t)
			old := newCPUMachine(t, before)
			written := kubeletWrites(t, &cpumgr.State{PolicyName: cpumgr.PolicyStatic, DefaultCPUSet: cpus("0-2"),
				Entries: map[string]map[string]cpuset.CPUSet{"pod-a": {"app": cpus("3")}}})
			// The kubelet starts with its own file on its own machine.
			if _, err := kubeletStartWith(t, old, k, t.TempDir(), written); err != nil {
				t.Fatalf("the kubelet refuses its own file: %v\n%s", err, written)
			}

			// On its unchanged machine, preflight leaves the kubelet's own
			// file alone.
			same := t.TempDir()
			if err := os.WriteFile(filepath.Join(same, cpuStateFile), written, 0o644); err != nil {
				t.Fatal(err)
			}
			unchanged := preflight.Run(old.snap, preflight.Options{RootDir: same, Config: k.kubeletConfig(), Release: rel, Now: time.Now()})
			if r := unchanged.Results[0]; r.Verdict != preflight.Valid || unchanged.NeedsPerson() {
				t.Errorf("preflight on the unchanged machine: %+v", r)
			}
			if b, _ := os.ReadFile(filepath.Join(same, cpuStateFile)); !bytes.Equal(b, written) {
				t.Error("preflight changed a valid file")
			}

			m := newCPUMachine(t, tt.after)
			// Without hotplugd, the kubelet does not start on the new machine.
			if _, err := kubeletStartWith(t, m, k, t.TempDir(), written); err == nil || !strings.Contains(err.Error(), "current set of available CPUs") {
				t.Fatalf("the kubelet on the new machine: %v, want its refusal", err)
			}

			dir := t.TempDir()
			path := filepath.Join(dir, cpuStateFile)
			if err := os.WriteFile(path, written, 0o644); err != nil {
				t.Fatal(err)
			}
			rep := preflight.Run(m.snap, preflight.Options{RootDir: dir, Config: k.kubeletConfig(), Release: rel, Now: time.Now()})
			if r := rep.Results[0]; r.Verdict != preflight.Repaired {
				t.Fatalf("preflight: %+v", r)
			}
			repaired, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s, err := cpumgr.Parse(repaired)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.DefaultCPUSet.String(); got != tt.wantDef || !s.Entries["pod-a"]["app"].Equals(cpus("3")) {
				t.Errorf("repaired state: default %s, pod-a/app %s; want default %s and the pinned CPU 3 kept", got, s.Entries["pod-a"]["app"], tt.wantDef)
			}
			after, err := kubeletStartWith(t, m, k, t.TempDir(), repaired)
			if err != nil {
				t.Fatalf("the kubelet refuses the repaired file: %v\n%s", err, repaired)
			}
			if !bytes.Equal(after, repaired) {
				t.Errorf("the kubelet rewrote the repaired file:\n%s\n->\n%s", repaired, after)
			}
			if diff := cmp.Diff(string(kubeletWrites(t, s)), string(repaired)); diff != "" {
				t.Errorf("the repaired file differs from what kubelet %s writes (-kubelet +hotplugd):\n%s", rel.Tested, diff)
			}
			t.Logf("kubelet %s: %s format %s -> %s", rel.Tested, tt.name, mustFormat(t, written), s.Format)
		})
	}
}

// TestCPUManagerPreflightUnreadableLayout: a layout hotplugd cannot read
// (V1 with assignments keyed by container ID, which only a kubelet can map to
// pods) is left untouched with a warning that says why, whatever the
// machine, and does not fail the kubelet's start (no "needs a person").
func TestCPUManagerPreflightUnreadableLayout(t *testing.T) {
	k := cpuKubelet{specific: cpus("0")}
	k.setGates(t)
	rel := hotplugdRelease(t)
	b := v1Checkpoint(t, "0-2", map[string]string{"containerd://0123": "3"})
	dir := t.TempDir()
	path := filepath.Join(dir, cpuStateFile)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := preflight.Run(newCPUMachine(t, cpuLine(5, 1)).snap, preflight.Options{RootDir: dir, Config: k.kubeletConfig(), Release: rel, Now: time.Now()})
	r := rep.Results[0]
	if r.Verdict != preflight.Unknown || rep.NeedsPerson() || !strings.Contains(r.Why, "keyed by container ID") {
		t.Errorf("kubelet %s: %+v, want unknown with the reason", rel.Tested, r)
	}
	if w := rep.Warnings(); len(w) != 1 || !strings.Contains(w[0], path) {
		t.Errorf("warnings %q, want one naming %s", w, path)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, b) {
		t.Error("the file changed")
	}
}

func mustFormat(t *testing.T, b []byte) cpumgr.Format {
	t.Helper()
	s, err := cpumgr.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return s.Format
}
