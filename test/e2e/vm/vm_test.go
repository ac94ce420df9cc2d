//go:build e2e

package vm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/qemutest"
)

const (
	gib = int64(1) << 30
	// quietWindow is hotplugd's default --quiet-window, which the guest
	// runs with.
	quietWindow = 500 * time.Millisecond
	// margin is what a change may take beyond the quiet window, from QMP's
	// reply to the log line on the host: the guest kernel's hotplug work,
	// the snapshot and the serial console, all under TCG (measured: 0.1-0.2 s).
	margin = 1500 * time.Millisecond
	// blocksPerGiB: the guest's memory blocks are 128 MiB (checked).
	blocksPerGiB = 8
)

// TestMemoryHotplug: a 1 GiB DIMM plugged into the running guest is one
// change, memory +1Gi, after its 16 uevents (8 blocks, each add and
// online); unplugging it (it was onlined movable, so the kernel can
// offline it) is one change back.
func TestMemoryHotplug(t *testing.T) {
	v := boot(t)
	if got := strings.TrimSpace(v.cat("/sys/devices/system/memory/block_size_bytes")); got != "8000000" {
		t.Fatalf("memory block size %s, want 8000000 (128 MiB): the uevent counts below assume it", got)
	}
	before := v.memTotal()
	if got := quantity(t, v.first.Str("memory")); got != before {
		t.Errorf("first snapshot: memory %s = %d bytes, the guest's MemTotal is %d", v.first.Str("memory"), got, before)
	}

	// Plug.
	mark := v.mark()
	if err := v.qmp.PlugDIMM("dimm1", gib); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	e := v.waitLog(mark, eventTimeout, changed("memory"))
	addLatency := e.Time.Sub(added)
	after := v.memTotal()
	// MemTotal counts the pages the buddy allocator manages. Onlined
	// hot-added memory adds all of its pages: its struct pages (16 MiB
	// per GiB) come from memory the guest already had, unless
	// memory_hotplug.memmap_on_memory, off by default, puts them in the
	// new memory itself. So MemTotal grows by exactly 1 GiB.
	if after-before != gib {
		t.Errorf("guest MemTotal %d -> %d bytes: +%d, want +%d (1 GiB)", before, after, after-before, gib)
	}
	old, new := quantity(t, e.Str("old")), quantity(t, e.Str("new"))
	if old != before || new != after {
		t.Errorf("%s: %d -> %d bytes, want the guest's MemTotal %d -> %d", e.Msg, old, new, before, after)
	}
	if e.Str("events") != fmt.Sprint(2*blocksPerGiB) || e.Str("trigger") != "uevent" {
		t.Errorf("%s after %s events (trigger %s), want %d uevents (add and online of %d blocks)",
			e.Msg, e.Str("events"), e.Str("trigger"), 2*blocksPerGiB, blocksPerGiB)
	}
	if addLatency > quietWindow+margin {
		t.Errorf("%s %v after device_add, want within the quiet window %v + %v", e.Msg, addLatency, quietWindow, margin)
	}
	t.Logf("1 GiB DIMM: %s, %s uevents, %v from device_add to the log line (hotplugd: %v from the first uevent)",
		e.Msg, e.Str("events"), addLatency.Round(time.Millisecond), e.duration("latency"))
	zones := v.cat("/sys/devices/system/memory/memory32/valid_zones")
	t.Logf("memory32 valid_zones: %s", strings.TrimSpace(zones))

	// Unplug: the guest offlines and removes the blocks; QEMU reports
	// DEVICE_DELETED once the guest has ejected the DIMM.
	markRemove := v.mark()
	qmpMark := v.qmp.Mark()
	if _, err := v.qmp.Execute("device_del", map[string]any{"id": "dimm1"}); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if _, err := v.qmp.WaitEvent(qmpMark, eventTimeout, func(e qemutest.Event) bool {
		return e.Name == "DEVICE_DELETED" && e.Data["device"] == "dimm1"
	}); err != nil {
		t.Fatalf("%v; console:\n%s", err, v.dump())
	}
	e = v.waitLog(markRemove, eventTimeout, changed("memory"))
	removeLatency := e.Time.Sub(removed)
	if old, new := quantity(t, e.Str("old")), quantity(t, e.Str("new")); old != after || new != before {
		t.Errorf("%s: %d -> %d bytes, want back %d -> %d", e.Msg, old, new, after, before)
	}
	if got := v.memTotal(); got != before {
		t.Errorf("guest MemTotal after the unplug %d, want %d", got, before)
	}
	if e.Str("events") != fmt.Sprint(2*blocksPerGiB) {
		t.Errorf("%s after %s events, want %d (offline and remove of %d blocks)", e.Msg, e.Str("events"), 2*blocksPerGiB, blocksPerGiB)
	}
	t.Logf("unplug: %s, %s uevents, %v from device_del to the log line", e.Msg, e.Str("events"), removeLatency.Round(time.Millisecond))

	v.powerOff()
	// Exactly one reconcile each: one memory change, and no reconcile
	// that found nothing (a burst split in two would show either).
	for _, phase := range []struct {
		name     string
		from, to int
	}{{"plug", mark, markRemove}, {"unplug", markRemove, v.mark()}} {
		changes := logsBetween(v, phase.from, phase.to, changed("memory"))
		empty := logsBetween(v, phase.from, phase.to, noChange)
		if len(changes) != 1 || len(empty) != 0 {
			t.Errorf("%s: %d memory changes and %d reconciles without change, want 1 and 0:\n%s",
				phase.name, len(changes), len(empty), raws(append(changes, empty...)))
		}
	}
	report(t, "memory", v, addLatency, removeLatency)
}

// TestCPUHotAddStaysOffline: without --online-new-cpus a hot-added CPU
// stays offline, so the machine has no more CPUs and hotplugd reports
// nothing (it reconciles on the add and bind uevents and finds no change);
// once something onlines it (here guestinit, as udev would), cpu 1 -> 2
// appears once.
func TestCPUHotAddStaysOffline(t *testing.T) {
	v := boot(t)
	mark := v.mark()
	if err := v.qmp.PlugCPU("cpu1"); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	// hotplugd saw the uevents (add, bind) and found nothing to report.
	e := v.waitLog(mark, eventTimeout, noChange)
	t.Logf("hot-added CPU: %s after %s uevents", e.Msg, e.Str("events"))
	if got := strings.TrimSpace(v.cat("/sys/devices/system/cpu/cpu1/online")); got != "0" {
		t.Fatalf("cpu1/online = %q after the hot-add, want 0 (the kernel leaves hot-added CPUs offline)", got)
	}
	// And it stays so: 3 quiet windows after the add, still nothing.
	hold := 3 * quietWindow
	v.wait(time.Until(added.Add(hold)), func() bool { return false })
	if c := v.logsSince(mark, changed("cpu")); len(c) > 0 {
		t.Errorf("cpu changed with the CPU offline: %s", raws(c))
	}
	if got := strings.TrimSpace(v.cat("/sys/devices/system/cpu/online")); got != "0" {
		t.Errorf("online CPUs %q, want 0", got)
	}

	markOnline := v.mark()
	v.command("write", "/sys/devices/system/cpu/cpu1/online", "1")
	onlined := time.Now()
	e = v.waitLog(markOnline, eventTimeout, changed("cpu"))
	latency := e.Time.Sub(onlined)
	if e.Str("old") != "1" || e.Str("new") != "2" {
		t.Errorf("%s, want cpu: 1 -> 2", e.Msg)
	}
	t.Logf("onlined by hand: %s %v after the write", e.Msg, latency.Round(time.Millisecond))
	v.powerOff()
	if c := v.logsSince(markOnline, changed("cpu")); len(c) != 1 {
		t.Errorf("%d cpu changes after onlining, want 1:\n%s", len(c), raws(c))
	}
	report(t, "cpu (onlined by hand)", v, latency)
}

// TestCPUHotplugOnlineNewCPUs: with --online-new-cpus hotplugd onlines a
// hot-added CPU itself, and cpu 1 -> 2 appears once, within the quiet
// window and a small margin of the device_add (plus the kernel's own
// bring-up of the CPU). Unplugging it (the guest offlines and removes it;
// QEMU 7.2 would abort on the next CPU device_add) is cpu 2 -> 1, and
// plugging one again works the same.
func TestCPUHotplugOnlineNewCPUs(t *testing.T) {
	v := boot(t, "--online-new-cpus")
	var latencies []time.Duration
	plug := func(id string) {
		t.Helper()
		mark := v.mark()
		if err := v.qmp.PlugCPU(id); err != nil {
			t.Fatal(err)
		}
		added := time.Now()
		e := v.waitLog(mark, eventTimeout, changed("cpu"))
		latency := e.Time.Sub(added)
		latencies = append(latencies, latency)
		if e.Str("old") != "1" || e.Str("new") != "2" {
			t.Errorf("%s, want cpu: 1 -> 2", e.Msg)
		}
		on := v.waitLog(mark, eventTimeout, func(e logEntry) bool { return e.Msg == "onlined hot-added CPU" })
		// The write to cpuN/online returns once the kernel has brought
		// the CPU up, which under TCG takes 0.1-1 s for a new slot
		// (emulating the AP's start; ms on hardware): hotplugd's part
		// is what comes on top of it.
		if took := on.duration("took"); latency > took+quietWindow+margin {
			t.Errorf("%s %v after device_add, want within the CPU's bring-up %v + the quiet window %v + %v",
				e.Msg, latency, took, quietWindow, margin)
		}
		t.Logf("device_add %s: %s (cpu %s onlined in %v), %v after device_add (hotplugd: %v from the first uevent)", id, e.Msg,
			on.Str("cpu"), on.duration("took"), latency.Round(time.Millisecond), e.duration("latency"))
		if got := strings.TrimSpace(v.cat("/sys/devices/system/cpu/online")); got != "0-1" {
			t.Errorf("online CPUs %q, want 0-1", got)
		}
	}

	markAdd := v.mark()
	plug("cpu1")
	markRemove := v.mark()
	if err := v.qmp.UnplugCPU("cpu1", eventTimeout); err != nil {
		t.Fatalf("%v; console:\n%s", err, v.dump())
	}
	removed := time.Now()
	e := v.waitLog(markRemove, eventTimeout, changed("cpu"))
	removeLatency := e.Time.Sub(removed)
	if e.Str("old") != "2" || e.Str("new") != "1" {
		t.Errorf("%s, want cpu: 2 -> 1", e.Msg)
	}
	t.Logf("device_del cpu1: %s %v after device_del", e.Msg, removeLatency.Round(time.Millisecond))
	markReplug := v.mark()
	plug("cpu1b")
	v.powerOff()

	for _, phase := range []struct {
		name     string
		from, to int
	}{{"plug", markAdd, markRemove}, {"unplug", markRemove, markReplug}, {"plug again", markReplug, v.mark()}} {
		if c := logsBetween(v, phase.from, phase.to, changed("cpu")); len(c) != 1 {
			t.Errorf("%s: %d cpu changes, want 1:\n%s", phase.name, len(c), raws(c))
		}
	}
	if n := len(v.logsSince(markAdd, func(e logEntry) bool { return e.Msg == "onlined hot-added CPU" })); n != 2 {
		t.Errorf("hotplugd onlined %d CPUs, want 2", n)
	}
	report(t, "cpu (--online-new-cpus)", v, append(latencies, removeLatency)...)
}

func logsBetween(v *vm, from, to int, match func(logEntry) bool) []logEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []logEntry
	for _, e := range v.logs[from:to] {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

func raws(es []logEntry) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(e.RawLine)
		b.WriteByte('\n')
	}
	return b.String()
}

// report prints one line of timings per test, for make e2e's output.
func report(t *testing.T, name string, v *vm, latencies ...time.Duration) {
	var ls []string
	for _, l := range latencies {
		ls = append(ls, l.Round(time.Millisecond).String())
	}
	t.Logf("RESULT %s: boot to first snapshot %v; change logged %s after the command (QMP, or the console write)", name,
		v.boot.Round(time.Millisecond), strings.Join(ls, ", "))
}
