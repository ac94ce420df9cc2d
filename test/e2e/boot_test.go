//go:build e2e

package e2e

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// TestBootPreflight is scenario 3, the boot story: the machine comes back
// with one CPU less while its kubelet (static CPU manager) is down. Started
// alone, the kubelet exits at once; started as its supervisor starts it
// with hotplugd's drop-in (`hotplugd preflight -- <the kubelet's command
// line>` first, its exit status ignored as ExecStartPre=- does), it starts
// with cpu_manager_state rebuilt to "0" and its Node shows 1 CPU.
//
// It runs on the current kubelet release and on the oldest hotplugd
// supports (incidentReleases).
func TestBootPreflight(t *testing.T) {
	s := setup(t)
	incidentReleases(t, s, func(t *testing.T, r release) { bootPreflightIncident(t, s, r) })
}

func bootPreflightIncident(t *testing.T, s *suite, r release) {
	m := acquireMachine(t)
	k := startStaticKubeletOf(t, s, r.bin)
	k.Stop(t)
	m.SetCPUOnline(t, 1, false)
	const change = "kubelet down, cpu1 offlined, kubelet started"

	t.Run("kubelet alone", func(t *testing.T) {
		t0 := time.Now()
		k.startRefused(t)
		results.add(result{scenario: scenarioOn("3 boot (preflight)", r), side: "kubelet alone", change: change,
			correct: "never: the kubelet exits at start (" + unquoted(cpuMismatch) + ")", restarts: k.startsSince(t0), writes: -1})
	})

	t.Run("preflight", func(t *testing.T) {
		// As deploy/systemd/kubelet.service.d/10-hotplugd-preflight.conf:
		// preflight with the kubelet's command line, then the kubelet,
		// whatever preflight's exit status.
		offset, t0 := k.logSize(), time.Now()
		out, err := exec.Command("/bin/sh", "-c", k.SupervisedStartScript).CombinedOutput()
		started := time.Since(t0)
		if err != nil {
			t.Fatalf("the supervised start: %v\n%s", err, out)
		}
		run := k.onePreflight(t, offset)
		t.Logf("hotplugd preflight and the start script took %v; preflight exited %d:\n%s", started.Round(time.Millisecond), run.exit, run.report)
		if run.exit != 0 || !strings.Contains(run.report, preflight.CPUManagerState+": "+string(preflight.Repaired)+" ") {
			t.Errorf("preflight in the kubelet's start exited %d, want 0 with cpu_manager_state repaired:\n%s", run.exit, run.report)
		}
		took, n, ok := waitNode(t, s, t0, time.Minute, cpuIs("1"))
		if !ok {
			t.Fatalf("the Node is not correct 1 min after the start: capacity %v allocatable %v; end of the kubelet's log:\n%s",
				n.Status.Capacity, n.Status.Allocatable, k.logTail(3000))
		}
		t.Logf("start -> Node correct: %v", took.Round(time.Millisecond))
		if got := defaultCPUSet(t, k); got != "0" {
			t.Errorf("cpu_manager_state defaultCpuSet %q after the preflight, want 0", got)
		}
		// It keeps running (a kubelet refusing its state exits within 1 s).
		if n, held := holdNode(t, s, 3*time.Second, cpuIs("1")); !held {
			t.Errorf("the Node changed: capacity %v", n.Status.Capacity)
		}
		if _, alive := k.pid(); !alive || !k.healthy() {
			t.Errorf("the kubelet started through the preflight is not running; end of its log:\n%s", k.logTail(3000))
		}
		timeGoal(t, "start -> Node correct", took, 5*time.Second)
		results.add(result{scenario: scenarioOn("3 boot (preflight)", r), side: "hotplugd preflight", change: change, correct: seconds(took) + " from the start",
			restarts: k.startsSince(t0), writes: 0, note: "preflight + start script " + seconds(started) + "; state rebuilt to defaultCpuSet 0 by preflight in the kubelet's start"})
	})
}
