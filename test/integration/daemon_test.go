package integration

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
)

const quiet = 500 * time.Millisecond // the daemon's default --quiet-window

// TestIntegrationCPUOfflineOnline: cpu1 offline -> exactly one change
// (cpu 2 -> 1) logged and counted; online -> back to 2.
func TestIntegrationCPUOfflineOnline(t *testing.T) {
	m := machinetest.Acquire(t)
	p := startDaemon(t)
	if p.Metric("hotplugd_capacity{resource=\"cpu\",unit=\"core\"}") != 2 {
		t.Skip("this test needs a machine with exactly 2 CPUs online (cpu0, cpu1)")
	}

	mark := p.Mark()
	m.SetCPUOnline(t, 1, false)
	p.WaitFor(quiet+5*time.Second, isChange("cpu", "2", "1"))
	time.Sleep(quiet + 200*time.Millisecond) // anything else the kernel sends must not be a change
	if diff := cmp.Diff([]string{"cpu: 2 -> 1"}, capacityChanges(p.Since(mark))); diff != "" {
		t.Errorf("capacity changes logged (-want +got):\n%s", diff)
	}
	if got := p.Metric("hotplugd_topology_changes_total"); got != 1 {
		t.Errorf("hotplugd_topology_changes_total = %v, want 1", got)
	}
	if got := p.Metric("hotplugd_capacity{resource=\"cpu\",unit=\"core\"}"); got != 1 {
		t.Errorf("capacity gauge = %v, want 1", got)
	}
	if got := p.Metric(`hotplugd_uevents_total{action="offline",subsystem="cpu"}`); got != 1 {
		t.Errorf("cpu offline uevents = %v, want 1", got)
	}

	mark = p.Mark()
	if err := writeFile("/sys/devices/system/cpu/cpu1/online", "1"); err != nil {
		t.Fatal(err)
	}
	p.WaitFor(quiet+5*time.Second, isChange("cpu", "1", "2"))
	time.Sleep(quiet + 200*time.Millisecond)
	if diff := cmp.Diff([]string{"cpu: 1 -> 2"}, capacityChanges(p.Since(mark))); diff != "" {
		t.Errorf("capacity changes logged (-want +got):\n%s", diff)
	}
	if got := p.Metric("hotplugd_topology_changes_total"); got != 2 {
		t.Errorf("hotplugd_topology_changes_total = %v, want 2", got)
	}
}

// TestIntegrationHugePages: a write through each kind of hugepage file is
// one change, seen within the quiet window plus 50 ms.
func TestIntegrationHugePages(t *testing.T) {
	m := machinetest.Acquire(t)
	p := startDaemon(t)
	tests := []struct {
		name, file string
	}{
		{"global sysfs file", "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"},
		{"node0 sysfs file", "/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"},
		{"sysctl file", "/proc/sys/vm/nr_hugepages"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pages := uint64(4 * (i + 1))
			want := map[uint64]string{4: "8Mi", 8: "16Mi", 12: "24Mi"}[pages]
			mark := p.Mark()
			start := time.Now()
			m.SetHugePages(t, tt.file, pages)
			e, ok := p.WaitForFrom(mark, quiet+5*time.Second, isChange("hugepages-2Mi", "0", want))
			if !ok {
				t.Fatalf("no change hugepages-2Mi 0 -> %s; log:\n%s", want, p.Dump())
			}
			if took := e.Time.Sub(start); took > quiet+50*time.Millisecond {
				t.Errorf("change seen %v after the write, want at most %v", took, quiet+50*time.Millisecond)
			} else {
				t.Logf("change seen %v after the write", took)
			}
			time.Sleep(quiet + 100*time.Millisecond)
			if diff := cmp.Diff([]string{"hugepages-2Mi: 0 -> " + want}, capacityChanges(p.Since(mark))); diff != "" {
				t.Errorf("capacity changes logged (-want +got):\n%s", diff)
			}
		})
		// The subtest restored the count: wait for that change too, so the
		// next subtest starts from 0.
		restored := p.Mark()
		if _, ok := p.WaitForFrom(restored, quiet+5*time.Second, func(e logEntry) bool {
			return strings.HasPrefix(e.Msg, "topology changed") && e.Str("resource") == "hugepages-2Mi" && e.Str("new") == "0"
		}); !ok {
			t.Fatalf("the restore of %s was not seen; log:\n%s", tt.file, p.Dump())
		}
	}
}

// TestIntegrationBurst: at least 9600 synthetic memory uevents are one
// reconcile (two at most if the burst outlasts the maximum delay) and no
// change.
func TestIntegrationBurst(t *testing.T) {
	machinetest.Acquire(t)
	p := startDaemon(t)
	files := daemontest.MemoryBlocks(t)
	before := p.Metric(`hotplugd_reconciles_total{trigger="uevent"}`)
	changes := p.Metric("hotplugd_topology_changes_total")
	events := p.Metric(`hotplugd_uevents_total{action="online",subsystem="memory"}`)

	start := time.Now()
	daemontest.SyntheticUevents(t, files, 9600)
	t.Logf("9600 uevents written in %v", time.Since(start))
	time.Sleep(quiet + time.Second)

	reconciles := p.Metric(`hotplugd_reconciles_total{trigger="uevent"}`) - before
	if reconciles < 1 || reconciles > 2 {
		t.Errorf("reconciles for the burst = %v, want 1 (2 at most)", reconciles)
	}
	if got := p.Metric("hotplugd_topology_changes_total") - changes; got != 0 {
		t.Errorf("changes = %v, want 0", got)
	}
	got := p.Metric(`hotplugd_uevents_total{action="online",subsystem="memory"}`) - events
	overflows := p.Metric("hotplugd_uevent_overflows_total")
	t.Logf("memory online uevents received: %v of 9600, overflows %v, reconciles %v", got, overflows, reconciles)
	if got != 9600 && overflows == 0 {
		t.Errorf("received %v of 9600 uevents without an overflow being counted", got)
	}
}

// TestIntegrationStalledReader: the daemon is stopped (SIGSTOP) during a
// burst of 20 000 events; cpu1 goes offline while it is stopped; after
// SIGCONT the CPU change is found, overflow or not, and the loop is alive.
func TestIntegrationStalledReader(t *testing.T) {
	m := machinetest.Acquire(t)
	p := startDaemon(t)
	files := daemontest.MemoryBlocks(t)

	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			p.Cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	mark := p.Mark()
	daemontest.SyntheticUevents(t, files, 20000)
	m.SetCPUOnline(t, 1, false)
	daemontest.SyntheticUevents(t, files, 2000)
	if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false

	if _, ok := p.WaitForFrom(mark, 10*time.Second, isChange("cpu", "2", "1")); !ok {
		t.Fatalf("the CPU change was not found after the stall; log:\n%s", p.Dump())
	}
	t.Logf("overflows counted: %v, cpu offline uevents received: %v",
		p.Metric("hotplugd_uevent_overflows_total"), p.Metric(`hotplugd_uevents_total{action="offline",subsystem="cpu"}`))
	if code := p.Healthz(); code != http.StatusOK {
		t.Errorf("/healthz = %d after the stall", code)
	}
	// Alive: the next change is found as usual.
	mark = p.Mark()
	if err := writeFile("/sys/devices/system/cpu/cpu1/online", "1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := p.WaitForFrom(mark, quiet+5*time.Second, isChange("cpu", "1", "2")); !ok {
		t.Fatalf("the loop is not alive after the stall; log:\n%s", p.Dump())
	}
}

// TestIntegrationUnprivileged: as nobody, the daemon starts (a smaller
// uevent buffer, no watch on the write-only demote files) and still sees a
// CPU and a hugepage change.
func TestIntegrationUnprivileged(t *testing.T) {
	m := machinetest.Acquire(t)
	p := startDaemonAs(t, &syscall.Credential{Uid: 65534, Gid: 65534})
	m.SetCPUOnline(t, 1, false)
	p.WaitFor(quiet+5*time.Second, isChange("cpu", "2", "1"))
	m.SetHugePages(t, "/proc/sys/vm/nr_hugepages", 2)
	p.WaitFor(quiet+5*time.Second, isChange("hugepages-2Mi", "0", "4Mi"))
}
