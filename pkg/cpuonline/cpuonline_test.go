package cpuonline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

func TestHotAdded(t *testing.T) {
	tests := []struct {
		name    string
		e       uevent.Event
		wantCPU int
		wantOK  bool
	}{
		{"hot-added cpu", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu"}, 1, true},
		{"cpu 255", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu255", Subsystem: "cpu"}, 255, true},
		{"synthetic add (udevadm trigger)", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu", Synthetic: true}, 0, false},
		{"bind after the add", uevent.Event{Action: uevent.ActionBind, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu"}, 0, false},
		{"online", uevent.Event{Action: uevent.ActionOnline, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu"}, 0, false},
		{"cpuid device", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/virtual/cpuid/cpu1", Subsystem: "cpuid"}, 0, false},
		{"cpu subsystem elsewhere", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/virtual/x/cpu1", Subsystem: "cpu"}, 0, false},
		{"not a cpu number", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpufreq", Subsystem: "cpu"}, 0, false},
		{"leading zero", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu01", Subsystem: "cpu"}, 0, false},
		{"sign", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu+1", Subsystem: "cpu"}, 0, false},
		{"memory block", uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/memory/memory32", Subsystem: "memory"}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, ok := HotAdded(tt.e)
			if cpu != tt.wantCPU || ok != tt.wantOK {
				t.Errorf("HotAdded() = %d, %v; want %d, %v", cpu, ok, tt.wantCPU, tt.wantOK)
			}
		})
	}
}

// fixture writes a two-CPU machine with cpu1 offline (its online file reads
// "0") and returns the sysfs root.
func fixture(t *testing.T) string {
	t.Helper()
	m := fixturegen.OneNode(2, 1<<20, 0)
	m.OfflineCPUs = []int{1}
	root := t.TempDir()
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "sys")
}

func onlineFile(sys string, cpu string) string {
	return filepath.Join(sys, "devices/system/cpu", cpu, "online")
}

func newOnliner(t *testing.T, sys string) (*Onliner, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zap.InfoLevel)
	o, err := New(Options{SysfsRoot: sys, Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	return o, logs
}

func TestOnline(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, sys string) // changes the fixture
		want    string                         // result label
		content string                         // the online file afterwards ("" to skip)
		logMsg  string
		// writeErr, when set, is what the write returns.
		writeErr error
	}{
		{
			name: "offline: onlined", want: ResultOnlined, content: "1\n", logMsg: "onlined hot-added CPU",
		},
		{
			name: "already online: nothing written", want: ResultAlreadyOnline, content: "1\n", logMsg: "hot-added CPU already online",
			prepare: func(t *testing.T, sys string) { write(t, onlineFile(sys, "cpu1"), "1\n") },
		},
		{
			name: "removed again: failed", want: ResultFailed, logMsg: "cannot online the hot-added CPU",
			prepare: func(t *testing.T, sys string) { remove(t, onlineFile(sys, "cpu1")) },
		},
		{
			name: "unexpected content: failed, nothing written", want: ResultFailed, content: "2\n", logMsg: "cannot online the hot-added CPU",
			prepare: func(t *testing.T, sys string) { write(t, onlineFile(sys, "cpu1"), "2\n") },
		},
		{
			name: "unreadable: failed", want: ResultFailed, logMsg: "cannot online the hot-added CPU",
			prepare: func(t *testing.T, sys string) {
				f := onlineFile(sys, "cpu1")
				remove(t, f)
				if err := os.Mkdir(f, 0o755); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			// /sys read-only (systemd's ProtectKernelTunables=yes).
			name: "write refused: failed", want: ResultFailed, content: "0\n", logMsg: "cannot online the hot-added CPU",
			writeErr: syscall.EROFS,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := fixture(t)
			if tt.prepare != nil {
				tt.prepare(t, sys)
			}
			o, logs := newOnliner(t, sys)
			if tt.writeErr != nil {
				o.write = func(file string) error { return &os.PathError{Op: "write", Path: file, Err: tt.writeErr} }
			}
			if got := o.Online(1); got != tt.want {
				t.Errorf("Online(1) = %s, want %s", got, tt.want)
			}
			if got := testutil.ToFloat64(o.onlines.WithLabelValues(tt.want)); got != 1 {
				t.Errorf("hotplugd_cpu_onlines_total{result=%q} = %v, want 1", tt.want, got)
			}
			if tt.content != "" {
				if got := read(t, onlineFile(sys, "cpu1")); got != tt.content {
					t.Errorf("cpu1/online = %q, want %q", got, tt.content)
				}
			}
			if n := logs.FilterMessageSnippet(tt.logMsg).FilterField(zap.Int("cpu", 1)).Len(); n != 1 {
				t.Errorf("%d log entries %q for cpu 1, want 1; all: %v", n, tt.logMsg, logs.All())
			}
		})
	}
}

func TestOnlineWrongContentIsNotOverwritten(t *testing.T) {
	sys := fixture(t)
	write(t, onlineFile(sys, "cpu1"), "")
	o, logs := newOnliner(t, sys)
	if got := o.Online(1); got != ResultFailed {
		t.Errorf("Online(1) = %s, want %s", got, ResultFailed)
	}
	if got := read(t, onlineFile(sys, "cpu1")); got != "" {
		t.Errorf("cpu1/online = %q, want it untouched", got)
	}
	entries := logs.FilterMessageSnippet("cannot online the hot-added CPU").All()
	if len(entries) != 1 || !strings.Contains(entries[0].ContextMap()["error"].(string), "neither 0 nor 1") {
		t.Errorf("log entries: %v", entries)
	}
}

// TestRun: Event only queues (it is called from the uevent reader); Run
// onlines each hot-added CPU once, in order, and ignores other events.
func TestRun(t *testing.T) {
	m := fixturegen.OneNode(4, 1<<20, 0)
	m.OfflineCPUs = []int{1, 2, 3}
	root := t.TempDir()
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(root, "sys")
	reg := prometheus.NewRegistry()
	core, logs := observer.New(zap.InfoLevel)
	o, err := New(Options{SysfsRoot: sys, Log: zap.New(core), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}

	add := func(cpu string) uevent.Event {
		return uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/" + cpu, Subsystem: "cpu"}
	}
	// Before Run: queued, nothing written yet.
	o.Event(add("cpu2"))
	o.Event(add("cpu2")) // a duplicate is onlined once
	o.Event(uevent.Event{Action: uevent.ActionBind, DevPath: "/devices/system/cpu/cpu2", Subsystem: "cpu"})
	o.Event(add("cpu3"))
	if got := read(t, onlineFile(sys, "cpu2")); got != "0\n" {
		t.Fatalf("Event wrote before Run: cpu2/online = %q", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()
	waitCount(t, o, ResultOnlined, 2)
	// While running: a new event is handled at once.
	o.Event(add("cpu1"))
	waitCount(t, o, ResultOnlined, 3)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}

	for _, cpu := range []string{"cpu1", "cpu2", "cpu3"} {
		if got := read(t, onlineFile(sys, cpu)); got != "1\n" {
			t.Errorf("%s/online = %q, want 1", cpu, got)
		}
	}
	var order []int64
	for _, e := range logs.FilterMessage("onlined hot-added CPU").All() {
		order = append(order, e.ContextMap()["cpu"].(int64))
	}
	if want := []int64{2, 3, 1}; !slices.Equal(order, want) {
		t.Errorf("onlined CPUs %v, want %v", order, want)
	}
	want := `
# HELP hotplugd_cpu_onlines_total Hot-added CPUs hotplugd brought online (--online-new-cpus), by result: onlined, already_online, failed.
# TYPE hotplugd_cpu_onlines_total counter
hotplugd_cpu_onlines_total{result="already_online"} 0
hotplugd_cpu_onlines_total{result="failed"} 0
hotplugd_cpu_onlines_total{result="onlined"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "hotplugd_cpu_onlines_total"); err != nil {
		t.Error(err)
	}
}

func TestNewRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Options{Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{Registerer: reg}); err == nil || !strings.HasPrefix(err.Error(), "cpuonline: ") {
		t.Errorf("second New() = %v, want a cpuonline: registration error", err)
	}
}

func waitCount(t *testing.T, o *Onliner, result string, n float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(o.onlines.WithLabelValues(result)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("hotplugd_cpu_onlines_total{result=%q} = %v after 5s, want %v", result,
				testutil.ToFloat64(o.onlines.WithLabelValues(result)), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func remove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}
