package topology_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// smallMachine is a 2-CPU, 1-node machine with 2Mi hugepages.
func smallMachine() fixturegen.Machine {
	return fixturegen.OneNode(2, 4194304, 8)
}

// TestSnapshotBadInput checks that a malformed file is an error naming it,
// and that a missing optional file is handled as the kernel and cAdvisor do.
func TestSnapshotBadInput(t *testing.T) {
	tests := []struct {
		name string
		// change edits the tree rooted at root (with sys/ and proc/).
		change func(t *testing.T, root string)
		// wantErr is a substring of the error naming the file; "" wants success.
		wantErr      string
		wantNotExist bool
		check        func(t *testing.T, s *topology.Snapshot)
	}{
		{
			name:    "malformed online list",
			change:  write("sys/devices/system/cpu/online", "0-x\n"),
			wantErr: "topology: parse ROOT/sys/devices/system/cpu/online: invalid CPU list",
		},
		{
			name:    "malformed core_id",
			change:  write("sys/devices/system/cpu/cpu1/topology/core_id", "one\n"),
			wantErr: "topology: parse ROOT/sys/devices/system/cpu/cpu1/topology/core_id",
		},
		{
			name:    "malformed node meminfo",
			change:  write("sys/devices/system/node/node0/meminfo", "Node 0 MemTotal: lots kB\n"),
			wantErr: "topology: parse ROOT/sys/devices/system/node/node0/meminfo: malformed line",
		},
		{
			name:    "malformed nr_hugepages",
			change:  write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "-3\n"),
			wantErr: "topology: parse ROOT/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
		},
		{
			name:    "malformed block size",
			change:  write("sys/devices/system/memory/block_size_bytes", "128M\n"),
			wantErr: "topology: parse ROOT/sys/devices/system/memory/block_size_bytes: invalid hexadecimal",
		},
		{
			name:    "empty memory block state",
			change:  write("sys/devices/system/memory/memory3/state", "\n"),
			wantErr: "topology: parse ROOT/sys/devices/system/memory/memory3/state: empty state",
		},
		{
			name:    "meminfo without MemTotal",
			change:  write("proc/meminfo", "MemFree: 1 kB\n"),
			wantErr: "topology: parse ROOT/proc/meminfo: no MemTotal line",
		},
		{
			name:         "no /proc/meminfo",
			change:       remove("proc/meminfo"),
			wantErr:      "topology: read ROOT/proc/meminfo: no such file or directory",
			wantNotExist: true,
		},
		{
			name:         "no cpu directory",
			change:       remove("sys/devices/system/cpu"),
			wantErr:      "topology: read ROOT/sys/devices/system/cpu: no such file or directory",
			wantNotExist: true,
		},
		{
			name:   "no online file: every CPU online",
			change: remove("sys/devices/system/cpu/online"),
			check: func(t *testing.T, s *topology.Snapshot) {
				if got := s.CPUs.Online.String(); got != "0-1" {
					t.Errorf("Online = %q, want 0-1", got)
				}
			},
		},
		{
			name:   "no node meminfo: 0 as cAdvisor reports",
			change: remove("sys/devices/system/node/node0/meminfo"),
			check: func(t *testing.T, s *topology.Snapshot) {
				if s.NUMANodes[0].MemTotalBytes != 0 {
					t.Errorf("node 0 MemTotalBytes = %d, want 0", s.NUMANodes[0].MemTotalBytes)
				}
			},
		},
		{
			name:   "no memory hotplug directory",
			change: remove("sys/devices/system/memory"),
			check: func(t *testing.T, s *topology.Snapshot) {
				if s.Memory.BlockSizeBytes != 0 || len(s.Memory.Blocks) != 0 {
					t.Errorf("Memory = %+v, want no blocks", s.Memory)
				}
			},
		},
		{
			name:   "no topology directory: offline-like CPU is not counted",
			change: remove("sys/devices/system/cpu/cpu1/topology"),
			check: func(t *testing.T, s *topology.Snapshot) {
				c, _ := s.CPU(1)
				if c.Core != -1 || c.Package != -1 || c.Die != -1 {
					t.Errorf("cpu1 = %+v, want -1 ids", c)
				}
				capacity := s.Capacity()
				if got := capacity.Cpu().String(); got != "1" {
					t.Errorf("capacity cpu = %s, want 1", got)
				}
			},
		},
		{
			name:   "unknown hugepage directory entries are ignored",
			change: write("sys/kernel/mm/hugepages/README", "x"),
			check: func(t *testing.T, s *topology.Snapshot) {
				if len(s.HugePages) != 1 || s.HugePages[0].Pages != 8 {
					t.Errorf("HugePages = %+v, want one size with 8 pages", s.HugePages)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := smallMachine().WriteDir(root); err != nil {
				t.Fatal(err)
			}
			tt.change(t, root)
			s, err := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc")).Snapshot()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Snapshot() error: %v", err)
				}
				tt.check(t, s)
				return
			}
			want := strings.ReplaceAll(tt.wantErr, "ROOT", root)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("Snapshot() error = %v, want it to contain %q", err, want)
			}
			if got := errors.Is(err, fs.ErrNotExist); got != tt.wantNotExist {
				t.Errorf("errors.Is(err, fs.ErrNotExist) = %v, want %v", got, tt.wantNotExist)
			}
		})
	}
}

func write(rel, content string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, rel), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func remove(rel string) func(t *testing.T, root string) {
	return func(t *testing.T, root string) {
		t.Helper()
		if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
			t.Fatal(err)
		}
	}
}
