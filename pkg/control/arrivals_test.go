package control

import (
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/uevent"
)

func TestArrivals(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	const settle = 3 * time.Second
	ev := func(action uevent.Action, subsystem, path string) uevent.Event {
		return uevent.Event{Action: action, Subsystem: subsystem, DevPath: path}
	}
	type step struct {
		e  uevent.Event
		at time.Duration
	}
	tests := []struct {
		name  string
		steps []step
		now   time.Duration
		want  string
	}{
		{"nothing", nil, 0, ""},
		{"cpu1 offline and online (no device)", []step{
			{ev(uevent.ActionOffline, "cpu", "/devices/system/cpu/cpu1"), 0},
			{ev(uevent.ActionOnline, "cpu", "/devices/system/cpu/cpu1"), time.Second},
		}, time.Second + time.Millisecond, ""},
		{"a DIMM whose blocks the kernel onlined", []step{
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory8"), 0},
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory9"), 0},
			{ev(uevent.ActionOnline, "memory", "/devices/system/memory/memory8"), time.Millisecond},
			{ev(uevent.ActionOnline, "memory", "/devices/system/memory/memory9"), time.Millisecond},
		}, 500 * time.Millisecond, ""},
		{"a DIMM half onlined", []step{
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory8"), 0},
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory9"), 0},
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory10"), 0},
			{ev(uevent.ActionOnline, "memory", "/devices/system/memory/memory8"), time.Second},
		}, 2 * time.Second, "2 hot-added memory blocks are not online yet"},
		{"added blocks nobody onlines: their time runs out", []step{
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory8"), 0},
		}, settle, ""},
		{"an unplug between offline and remove", []step{
			{ev(uevent.ActionOffline, "memory", "/devices/system/memory/memory8"), 0},
			{ev(uevent.ActionOffline, "memory", "/devices/system/memory/memory9"), 0},
			{ev(uevent.ActionRemove, "memory", "/devices/system/memory/memory8"), 0},
		}, time.Second, "1 memory block went offline and not removed yet"},
		{"a vCPU added", []step{
			{ev(uevent.ActionAdd, "cpu", "/devices/system/cpu/cpu2"), 0},
			{ev(uevent.ActionOnline, "cpu", "/devices/system/cpu/cpu2"), 100 * time.Millisecond},
		}, 2 * time.Second, "a CPU device was added or removed, and hypervisors add and remove vCPUs one at a time"},
		{"a vCPU added, settle over", []step{
			{ev(uevent.ActionAdd, "cpu", "/devices/system/cpu/cpu2"), 0},
		}, settle, ""},
		{"synthetic events change nothing", []step{
			{uevent.Event{Action: uevent.ActionAdd, Subsystem: "cpu", DevPath: "/devices/system/cpu/cpu1", Synthetic: true}, 0},
			{uevent.Event{Action: uevent.ActionAdd, Subsystem: "memory", DevPath: "/devices/system/memory/memory0", Synthetic: true}, 0},
		}, time.Second, ""},
		{"both", []step{
			{ev(uevent.ActionAdd, "cpu", "/devices/system/cpu/cpu2"), 0},
			{ev(uevent.ActionAdd, "memory", "/devices/system/memory/memory8"), 0},
		}, time.Second, "a CPU device was added or removed, and hypervisors add and remove vCPUs one at a time; 1 hot-added memory block is not online yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a Arrivals
			for _, s := range tt.steps {
				a.Observe(s.e, t0.Add(s.at))
			}
			if got := a.Pending(t0.Add(tt.now), settle); got != tt.want {
				t.Errorf("Pending = %q, want %q", got, tt.want)
			}
		})
	}
}
