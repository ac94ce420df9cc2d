package cpuonline_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpuonline"
	"github.com/hotplugd/hotplugd/pkg/daemon"
	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

type fakeUevents struct{ h chan uevent.Handler }

func (f fakeUevents) Run(ctx context.Context, h uevent.Handler) error {
	f.h <- h
	<-ctx.Done()
	return nil
}
func (fakeUevents) Close() error { return nil }

type noHugePages struct{}

func (noHugePages) Run(ctx context.Context, _ hugepagewatch.Handler) error {
	<-ctx.Done()
	return nil
}
func (noHugePages) Rescan() ([]string, error) { return nil, nil }
func (noHugePages) Close() error              { return nil }

// TestDaemonHook wires an Onliner into a daemon as `hotplugd run
// --online-new-cpus` does: a cpu add uevent through the daemon's uevent
// handler onlines the CPU, and still triggers a reconcile.
func TestDaemonHook(t *testing.T) {
	root := t.TempDir()
	m := fixturegen.OneNode(2, 1<<20, 0)
	m.OfflineCPUs = []int{1}
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(root, "sys")
	ue := fakeUevents{h: make(chan uevent.Handler, 1)}
	reconciles := make(chan daemon.Result, 10)
	d, err := daemon.New(daemon.Config{
		SysfsRoot: sys, ProcfsRoot: filepath.Join(root, "proc"),
		QuietWindow: 10 * time.Millisecond, MaxDelay: time.Second,
		Uevents: ue, HugePages: noHugePages{},
		OnReconcile: func(r daemon.Result) { reconciles <- r },
	})
	if err != nil {
		t.Fatal(err)
	}
	on, err := cpuonline.New(cpuonline.Options{SysfsRoot: sys, Registerer: d.Metrics().Registry})
	if err != nil {
		t.Fatal(err)
	}
	d.AddUeventHook(on.Event)
	d.AddTask(on.Run)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	}()
	h := <-ue.h
	<-reconciles // the first snapshot

	h.Event(uevent.Event{Action: uevent.ActionAdd, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu", Seqnum: 1})
	file := filepath.Join(sys, "devices/system/cpu/cpu1/online")
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) == "1\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu1/online = %q 5s after the add uevent, want 1", b)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case r := <-reconciles:
		if !r.EventDriven() {
			t.Errorf("reconcile after the add: trigger %s, want uevent", r.Batch.Cause)
		}
	case <-time.After(5 * time.Second):
		t.Error("the add uevent triggered no reconcile")
	}
}
