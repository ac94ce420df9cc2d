package control

import (
	"fmt"
	"strings"
	"time"

	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// Arrivals is what the kernel's uevents say about a change that is still
// arriving after its burst has gone quiet: the one thing that makes a
// restart wait beyond the quiet window. A change the kernel has finished
// (a hugepage write, a CPU taken offline or online, a DIMM whose blocks
// are all online) restarts the kubelet once its burst is quiet. Two kinds
// of hypervisor action arrive in parts, and the restart waits for them, at
// most --settle after the machine's last event:
//
//   - a memory block the kernel added and nobody has onlined yet (the
//     kernel's auto-online policy is off and udev or an agent onlines the
//     blocks, one at a time), or one taken offline and not yet removed (a
//     DIMM's unplug offlines every block, migrating its pages, before it
//     removes them);
//   - a CPU device added or removed: hypervisors add and remove vCPUs one
//     device at a time (QEMU's device_add, a cloud's resize), each a
//     burst of its own, and the guest cannot tell the last from the rest.
//
// Synthetic uevents (a write to a device's uevent file) change nothing and
// are ignored. A lost uevent (a socket overflow) can only make a restart
// wait its --settle, never come early: a block whose online event was lost
// stays arriving until its time runs out.
//
// The zero value is ready to use; it is not safe for concurrent use (the
// Loop keeps it in its mailbox).
type Arrivals struct {
	cpuDevice time.Time
	blocks    map[string]blockArrival
}

// blockArrival is a memory block in the middle of a change: added and not
// online (added), or offline and not removed.
type blockArrival struct {
	at    time.Time
	added bool
}

// Observe records the uevent e received at t.
func (a *Arrivals) Observe(e uevent.Event, t time.Time) {
	if e.Synthetic {
		return
	}
	switch e.Subsystem {
	case "cpu":
		if e.Action == uevent.ActionAdd || e.Action == uevent.ActionRemove {
			a.cpuDevice = t
		}
	case "memory":
		switch e.Action {
		case uevent.ActionAdd, uevent.ActionOffline:
			if a.blocks == nil {
				a.blocks = make(map[string]blockArrival)
			}
			a.blocks[e.DevPath] = blockArrival{at: t, added: e.Action == uevent.ActionAdd}
		case uevent.ActionOnline, uevent.ActionRemove:
			delete(a.blocks, e.DevPath)
		}
	}
}

// Pending says what is still arriving at now ("": nothing), counting each
// part for settle after its event.
func (a *Arrivals) Pending(now time.Time, settle time.Duration) string {
	var why []string
	if !a.cpuDevice.IsZero() && now.Before(a.cpuDevice.Add(settle)) {
		why = append(why, "a CPU device was added or removed, and hypervisors add and remove vCPUs one at a time")
	}
	var added, offline int
	for path, b := range a.blocks {
		switch {
		case !now.Before(b.at.Add(settle)):
			delete(a.blocks, path) // its time ran out: the block stays as it is
		case b.added:
			added++
		default:
			offline++
		}
	}
	if added > 0 {
		why = append(why, fmt.Sprintf("%d hot-added memory %s not online yet", added, plural(added, "block is", "blocks are")))
	}
	if offline > 0 {
		why = append(why, fmt.Sprintf("%d memory %s offline and not removed yet", offline, plural(offline, "block went", "blocks went")))
	}
	return strings.Join(why, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
