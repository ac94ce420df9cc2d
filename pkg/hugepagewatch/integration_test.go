package hugepagewatch_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
)

// maxLatency is how long a real write may take to reach Changed. Measured
// on the project's VM: about 0.1 ms.
const maxLatency = 50 * time.Millisecond

// TestIntegrationRealHugepageFiles writes 2Mi hugepage counts through each
// kind of count file of this machine and checks that Changed fires for that
// file, first and within maxLatency. machinetest restores every count.
func TestIntegrationRealHugepageFiles(t *testing.T) {
	m := machinetest.Acquire(t)
	const (
		global   = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
		global1G = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
		demote1G = "/sys/kernel/mm/hugepages/hugepages-1048576kB/demote"
		node0    = "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
		procfs   = "/proc/sys/vm/nr_hugepages"
	)
	if _, err := os.Stat(global); err != nil {
		t.Skipf("no 2Mi hugepages on this machine (hugetlb off?): %v", err)
	}

	tests := []struct {
		name string
		path string // written, and expected in Changed
		// before runs after the watcher is set up, before the write.
		before func(t *testing.T)
		// write writes through path; nil sets 4 pages.
		write func(t *testing.T)
		// ignore are files that before writes: their events are skipped.
		ignore []string
	}{
		{name: "global", path: global},
		{name: "node0", path: node0},
		{name: "procfs", path: procfs},
		{name: "global mempolicy", path: "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages_mempolicy"},
		{name: "procfs mempolicy", path: "/proc/sys/vm/nr_hugepages_mempolicy"},
		{
			// procfs gives the path a new inode once its dentry is
			// reclaimed; the watcher's O_PATH pin must prevent that.
			name: "procfs after dentry reclaim",
			path: procfs,
			before: func(t *testing.T) {
				if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
					t.Skipf("cannot drop the dentry cache: %v", err)
				}
			},
		},
		{
			// demote changes two counts and fires only on itself. The 2Mi
			// count is set (to what it is) so that it is restored too.
			name: "demote 1Gi to 2Mi",
			path: demote1G,
			before: func(t *testing.T) {
				if b, err := os.ReadFile(demote1G + "_size"); err != nil || string(b) != "2048kB\n" {
					t.Skipf("1Gi pages do not demote to 2Mi here: %q, %v", b, err)
				}
				old, err := os.ReadFile(global)
				if err != nil {
					t.Fatal(err)
				}
				m.SetHugePages(t, global, parseCount(t, old))
				m.SetHugePages(t, global1G, 1)
			},
			write: func(t *testing.T) {
				if err := os.WriteFile(demote1G, []byte("1"), 0); err != nil {
					t.Fatalf("demote: %v", err)
				}
			},
			ignore: []string{global, global1G},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				t.Skipf("%s is not on this machine: %v", tc.path, err)
			}
			w, err := hugepagewatch.New("/sys", "/proc", zaptest.NewLogger(t))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			t.Cleanup(func() { w.Close() })
			if !slices.Contains(w.Files(), tc.path) {
				t.Fatalf("%s is not watched; Files = %q", tc.path, w.Files())
			}
			rec := newRecorder()
			// Registered before SetHugePages: Run outlives the restore.
			start(t, w, rec)
			if tc.before != nil {
				tc.before(t)
			}

			begin := time.Now()
			if tc.write != nil {
				tc.write(t)
			} else {
				m.SetHugePages(t, tc.path, 4)
			}
			c := rec.next(t, time.Second)
			for slices.Contains(tc.ignore, c.path) {
				c = rec.next(t, time.Second)
			}
			if c.path != tc.path {
				t.Fatalf("a write through %s fired Changed(%s) first", tc.path, c.path)
			}
			latency := c.at.Sub(begin)
			t.Logf("write to %s -> Changed: %v", tc.path, latency)
			if latency > maxLatency {
				t.Errorf("Changed came %v after the write, want at most %v", latency, maxLatency)
			}
		})
	}
}

func parseCount(t *testing.T, b []byte) uint64 {
	t.Helper()
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatalf("hugepage count %q: %v", b, err)
	}
	return n
}
