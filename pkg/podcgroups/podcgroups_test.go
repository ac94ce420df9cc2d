package podcgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	uidG  = "0b1c2d3e-0000-4000-8000-000000000001"
	uidBu = "0b1c2d3e-0000-4000-8000-000000000002"
	uidBE = "0b1c2d3e-0000-4000-8000-000000000003"
)

// tree makes dirs (and files, names ending in "=") under a new root.
func tree(t *testing.T, paths ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if name, ok := strings.CutSuffix(full, "="); ok {
			if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(name, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(full, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestRunning(t *testing.T) {
	perQOS := Config{CgroupsPerQOS: true}
	systemd := Config{CgroupsPerQOS: true, CgroupDriver: DriverSystemd}
	all := map[string]bool{uidG: true, uidBu: true, uidBE: true}
	for _, tc := range []struct {
		name    string
		cfg     Config
		paths   []string
		want    map[string]bool
		wantErr error
	}{
		{
			name: "v2, cgroupfs driver",
			cfg:  perQOS,
			paths: []string{"cgroup.controllers=",
				"kubepods/pod" + uidG + "/c1",
				"kubepods/burstable/pod" + uidBu,
				"kubepods/besteffort/pod" + uidBE,
				"kubepods/besteffort/not-a-pod",
				"kubepods/burstable/podfile=",
			},
			want: all,
		},
		{
			name: "v2, systemd driver",
			cfg:  systemd,
			paths: []string{"cgroup.controllers=",
				"kubepods.slice/kubepods-pod0b1c2d3e_0000_4000_8000_000000000001.slice/cri-containerd-abc.scope",
				"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_0000_4000_8000_000000000002.slice",
				"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0b1c2d3e_0000_4000_8000_000000000003.slice",
			},
			want: all,
		},
		{
			name: "v1: a pod in any hierarchy",
			cfg:  systemd,
			paths: []string{
				"memory/kubepods.slice/kubepods-pod0b1c2d3e_0000_4000_8000_000000000001.slice",
				"cpu,cpuacct/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b1c2d3e_0000_4000_8000_000000000002.slice",
				"pids/kubepods.slice/kubepods-besteffort.slice",
			},
			want: map[string]bool{uidG: true, uidBu: true},
		},
		{
			name:  "custom cgroupRoot",
			cfg:   Config{CgroupsPerQOS: true, CgroupRoot: "/k8s/node"},
			paths: []string{"cgroup.controllers=", "k8s/node/kubepods/burstable/pod" + uidBu, "kubepods/pod" + uidG},
			want:  map[string]bool{uidBu: true},
		},
		{
			name:  "no pods running",
			cfg:   perQOS,
			paths: []string{"cgroup.controllers=", "kubepods/burstable", "kubepods/besteffort"},
			want:  map[string]bool{},
		},
		{
			name:    "no kubepods",
			cfg:     perQOS,
			paths:   []string{"cgroup.controllers=", "system.slice"},
			wantErr: ErrNoPodCgroups,
		},
		{
			name:    "the other driver's names",
			cfg:     perQOS,
			paths:   []string{"cgroup.controllers=", "kubepods.slice/kubepods-burstable.slice"},
			wantErr: ErrNoPodCgroups,
		},
		{
			name:    "cgroupsPerQOS false",
			cfg:     Config{},
			paths:   []string{"cgroup.controllers=", "kubepods/burstable/pod" + uidBu},
			wantErr: ErrNoPodCgroups,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Running(tree(t, tc.paths...), tc.cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Running = %v, %v; want %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("unexpected pods (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunningV1SymlinkedHierarchy(t *testing.T) {
	root := tree(t, "cpu,cpuacct/kubepods/burstable/pod"+uidBu)
	if err := os.Symlink("cpu,cpuacct", filepath.Join(root, "cpu")); err != nil {
		t.Fatal(err)
	}
	got, err := Running(root, Config{CgroupsPerQOS: true})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]bool{uidBu: true}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestRunningBadDriver(t *testing.T) {
	if _, err := Running(t.TempDir(), Config{CgroupsPerQOS: true, CgroupDriver: "other"}); err == nil {
		t.Error("an unknown driver is an error")
	}
}
