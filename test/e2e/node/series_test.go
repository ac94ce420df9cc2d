//go:build e2e

package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// seriesGap is the time between the vCPUs a hypervisor action adds or
// removes in scenario 13: QEMU's device_add and device_del take one CPU
// each, and a cloud's resize sends them one after the other. Times are
// from the last device_add's return.
const seriesGap = 500 * time.Millisecond

// hypervisorSeries is scenario 13: the hypervisor actions that arrive in
// parts, each remedied with exactly one kubelet restart, with the default
// --settle (hotplugd waits for a change still arriving, and only for it):
// a 4 GiB DIMM (32 memory blocks, each added then onlined by the kernel),
// and 4 vCPUs added 0.5 s apart (each onlined by hotplugd,
// --online-new-cpus), then offlined in the guest at once (the next boot
// must find the state file fit for its boot CPUs). (Not their removal: QEMU 10 with one TCG thread
// aborts at a CPU unplug, see vm.boot; test/e2e/vm unplugs CPUs.) The
// restarts are counted from
// systemd's journal after the Node has shown the whole change and held it
// for a while longer; the pinned pod stays on CPU 1 throughout.
func hypervisorSeries(t *testing.T, v *vm) {
	before := v.waitPinnedRunning()
	mt0 := v.memTotal()
	cpus0 := getNode(t).Status.Capacity.Cpu().Value()
	w0 := v.hotplugdMetric("hotplugd_node_writes_total")

	// act makes the change and returns its time and what the Node must
	// then show.
	one := func(change string, act func() (time.Time, func(*v1.Node) bool, string)) {
		t.Helper()
		v.pastKubeletGrace()
		w := v.hotplugdMetric("hotplugd_node_writes_total")
		cur := v.mark()
		t0, done, what := act()
		d := waitNode(t, t0, stepTimeout, what, done)
		// A second restart would come after the first kubelet's report;
		// the Node must keep the whole change meanwhile.
		if bad, held := holdsFor(t, 5*time.Second, done); !held {
			t.Errorf("%s: the Node left %s: %s", change, what, capacityOf(bad))
		}
		restarts := v.starts(cur)
		if restarts != 1 {
			t.Errorf("%s: %d kubelet restarts, want 1:\n%s", change, restarts, v.journal("hotplugd", 40))
		}
		addResult(result{scenario: "13 hypervisor actions in parts", side: "hotplugd", change: change, correct: seconds(d),
			restarts: restarts, writes: v.hotplugdMetric("hotplugd_node_writes_total") - w,
			note: "restarts counted from systemd's journal after the Node held the change 5 s more; " + remedyLine(v)})
	}

	one("4 GiB DIMM (QMP device_add: 32 blocks added and onlined by the kernel)", func() (time.Time, func(*v1.Node) bool, string) {
		if err := v.qmp.PlugDIMM("dimm-4g", 4*gib); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		// What the kernel makes of it: MemTotal once it has stopped
		// growing (with the blocks' states, logged).
		mt, last := v.memTotal(), int64(0)
		for mt != last || mt == mt0 {
			if time.Since(t0) > stepTimeout {
				t.Fatalf("the guest's MemTotal did not settle after the DIMM: %d, was %d", mt, mt0)
			}
			time.Sleep(time.Second)
			last, mt = mt, v.memTotal()
		}
		t.Logf("4 GiB DIMM: MemTotal %d -> %d (+%d MiB); memory blocks by state: %s", mt0, mt, (mt-mt0)>>20,
			strings.Join(strings.Fields(v.sh("cat /sys/devices/system/memory/memory*/state | sort | uniq -c")), " "))
		// Scenario 11's hugepages are still set: allocatable is less by
		// them too.
		return t0, func(n *v1.Node) bool {
			hp := qty(n.Status.Capacity, "hugepages-2Mi").Value()
			return n.Status.Capacity.Memory().Value() == mt && n.Status.Allocatable.Memory().Value() == mt-evictionHard-hp
		}, fmt.Sprintf("memory %d (the guest's MemTotal)", mt)
	})

	ids := []string{"series-cpu0", "series-cpu1", "series-cpu2", "series-cpu3"}
	one(fmt.Sprintf("4 vCPUs, device_add %v apart (%d -> %d), onlined by hotplugd", seriesGap, cpus0, cpus0+4), func() (time.Time, func(*v1.Node) bool, string) {
		var last time.Time
		for i, id := range ids {
			if i > 0 {
				time.Sleep(seriesGap - time.Since(last))
			}
			last = time.Now()
			if err := v.qmp.PlugCPU(id); err != nil {
				t.Fatal(err)
			}
		}
		return last, cpusAre(cpus0 + 4), fmt.Sprintf("%d CPUs", cpus0+4)
	})

	// The node's next boot has its boot CPUs again (QEMU forgets the
	// hot-added ones), and the kubelet alone must start then (scenario 4):
	// the CPUs are offlined in the guest at once, one burst, and the
	// remedy writes them out of cpu_manager_state.
	one(fmt.Sprintf("the 4 vCPUs offlined in the guest in one loop (%d -> %d)", cpus0+4, cpus0), func() (time.Time, func(*v1.Node) bool, string) {
		v.sh(fmt.Sprintf("for c in $(seq %d %d); do echo 0 > /sys/devices/system/cpu/cpu$c/online; done", cpus0, cpus0+3))
		return time.Now(), cpusAre(cpus0), fmt.Sprintf("%d CPUs", cpus0)
	})
	if st := v.cpuState(); st.DefaultCPUSet != "0" {
		t.Errorf("cpu_manager_state defaultCpuSet %q after the vCPUs went offline, want 0 (CPU 1 pinned)", st.DefaultCPUSet)
	}

	after := v.waitPinnedRunning()
	checkPinned(t, before, after)
	t.Logf("scenario 13: %v Node writes in all", v.hotplugdMetric("hotplugd_node_writes_total")-w0)
}
