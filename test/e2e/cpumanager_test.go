//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// staticCPUManager is the kubelet configuration of the CPU-upgrade
// incident: the static CPU manager, with cpu0 reserved.
const staticCPUManager = `cpuManagerPolicy: static
reservedSystemCPUs: "0"
`

// cpuMismatch is the kubelet's refusal to start on a machine whose CPUs
// differ from its cpu_manager_state (as its log quotes it).
const cpuMismatch = `current set of available CPUs \"0\" doesn't match with CPUs in state \"0-1\"`

const cpu1Online = "/sys/devices/system/cpu/cpu1/online"

// TestStaticCPUManager is scenario 2: cpu1 goes offline while a kubelet
// with the static CPU manager runs. The kubelet alone keeps reporting 2
// CPUs, and restarting it without a repair fails; with hotplugd, which only
// plans the repair and asks the kubelet's supervisor for one restart, the
// state file is rebuilt to "0" by hotplugd preflight in the kubelet's
// start (the restart script's, as the systemd drop-in's ExecStartPre), and
// the Node shows 1 CPU; cpu1 back online: the same, to "0-1" and 2 CPUs.
//
// It runs on the current kubelet release and on the oldest hotplugd
// supports (incidentReleases).
func TestStaticCPUManager(t *testing.T) {
	s := setup(t)
	incidentReleases(t, s, func(t *testing.T, r release) { staticCPUManagerIncident(t, s, r) })
}

func staticCPUManagerIncident(t *testing.T, s *suite, r release) {
	m := acquireMachine(t)
	k := startStaticKubeletOf(t, s, r.bin)
	const offline = "cpu1 offline while the kubelet (static CPU manager) runs"

	t.Run("kubelet alone", func(t *testing.T) {
		t0 := time.Now()
		m.SetCPUOnline(t, 1, false)
		if n, held := holdNode(t, s, 15*time.Second, cpuIs("2")); !held {
			t.Fatalf("the kubelet alone changed its Node: capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
		}
		if _, alive := k.pid(); !alive {
			t.Fatalf("the kubelet is not running: the watch proves nothing; end of its log:\n%s", k.logTail(3000))
		}
		// The operator's restart, without a repair.
		k.Stop(t)
		k.startRefused(t)
		results.add(result{scenario: scenarioOn("2 static CPU manager", r), side: "kubelet alone", change: offline,
			correct: "never (15 s watched: cpu stays 2); a restart fails: " + unquoted(cpuMismatch), restarts: k.startsSince(t0), writes: -1})
	})

	// cpu1 is back (the subtest's cleanup): the kubelet starts as it was.
	k.Start(t)
	k.waitReady(t, 30*time.Second)
	if _, _, ok := waitNode(t, s, time.Now(), 10*time.Second, cpuIs("2")); !ok {
		t.Fatal("the Node does not show 2 CPUs after cpu1 came back and the kubelet started")
	}

	t.Run("hotplugd", func(t *testing.T) {
		// Two restarts within seconds: the rate limit (default one per
		// 10 min) is lowered for the second.
		d := startHotplugd(t, s, k, append(r.hotplugdArgs(t), "--remedy-interval", "1s")...)
		writes0, mark, events0, offset := hotplugdWrites(t, d), d.Mark(), eventCounts(t, s), k.logSize()
		remediated0 := eventsWith(t, s, nodepatch.ReasonRemediated, repairedInStart)
		t0 := time.Now()
		m.SetCPUOnline(t, 1, false)
		took, n, ok := waitNode(t, s, time.Now(), time.Minute, cpuIs("1"))
		if !ok {
			t.Fatalf("the Node is not correct 1 min after cpu1 went offline: capacity %v allocatable %v; hotplugd's log:\n%s",
				n.Status.Capacity, n.Status.Allocatable, d.Dump())
		}
		restart := remedyDone(t, d, mark, 30*time.Second)
		t.Logf("cpu1 offline -> Node correct: %v (kubelet calls: %s; the remedy took %v)", took.Round(time.Millisecond), timeline(k, t0), restart.Round(time.Millisecond))
		if got := defaultCPUSet(t, k); got != "0" {
			t.Errorf("cpu_manager_state defaultCpuSet %q after the remedy, want 0", got)
		}
		checkRemedy(t, s, d, k, t0, took, restart, 1)
		checkRepairInStart(t, d, k, mark, offset, 1)
		writes := settleWrites(t, d) - writes0
		events := remediatedOnce(t, s, events0)
		if n := eventsWith(t, s, nodepatch.ReasonRemediated, repairedInStart) - remediated0; n != 1 {
			t.Errorf("%d Remediated Events saying %q, want 1", n, repairedInStart)
		}
		results.add(result{scenario: scenarioOn("2 static CPU manager", r), side: "hotplugd", change: offline, correct: seconds(took),
			restarts: k.startsSince(t0), writes: writes,
			note: "state rebuilt to defaultCpuSet 0 by preflight in the kubelet's start; kubelet " + timeline(k, t0) + "; events " + events.String()})

		// cpu1 back online.
		writes0, mark, events0, offset = hotplugdWrites(t, d), d.Mark(), eventCounts(t, s), k.logSize()
		remediated0 = eventsWith(t, s, nodepatch.ReasonRemediated, repairedInStart)
		t0 = time.Now()
		if err := os.WriteFile(cpu1Online, []byte("1"), 0); err != nil {
			t.Fatal(err)
		}
		took, n, ok = waitNode(t, s, time.Now(), time.Minute, cpuIs("2"))
		if !ok {
			t.Fatalf("the Node is not correct 1 min after cpu1 came back: capacity %v allocatable %v; hotplugd's log:\n%s",
				n.Status.Capacity, n.Status.Allocatable, d.Dump())
		}
		restart = remedyDone(t, d, mark, 30*time.Second)
		t.Logf("cpu1 online -> Node correct: %v (kubelet calls: %s; the remedy took %v)", took.Round(time.Millisecond), timeline(k, t0), restart.Round(time.Millisecond))
		if got := defaultCPUSet(t, k); got != "0-1" {
			t.Errorf("cpu_manager_state defaultCpuSet %q after the remedy, want 0-1", got)
		}
		checkRemedy(t, s, d, k, t0, took, restart, 2)
		checkRepairInStart(t, d, k, mark, offset, 2)
		writes = settleWrites(t, d) - writes0
		events = remediatedOnce(t, s, events0)
		if n := eventsWith(t, s, nodepatch.ReasonRemediated, repairedInStart) - remediated0; n != 1 {
			t.Errorf("%d Remediated Events saying %q, want 1", n, repairedInStart)
		}
		results.add(result{scenario: scenarioOn("2 static CPU manager", r), side: "hotplugd", change: "cpu1 back online", correct: seconds(took),
			restarts: k.startsSince(t0), writes: writes,
			note: "state rebuilt to defaultCpuSet 0-1 by preflight in the kubelet's start; kubelet " + timeline(k, t0) + "; events " + events.String()})
	})
}

// repairedInStart is what the Remediated Event says when hotplugd preflight
// rebuilt cpu_manager_state in the kubelet's start.
const repairedInStart = "hotplugd preflight repaired cpu_manager_state in its start"

// checkRepairInStart checks that the remedy after mark (daemon log) and
// offset (kubelet log) repaired cpu_manager_state where the new design
// puts it: the daemon only planned it (its restart line says "would
// repair"), hotplugd preflight in the kubelet's start wrote it, and its
// backup is the one the report names, the backups now numbering backups.
func checkRepairInStart(t *testing.T, d *daemontest.Daemon, k *kubelet, mark, offset, backups int) {
	t.Helper()
	if files := askedRestart(t, d, mark).Str("state_files"); !strings.Contains(files, preflight.CPUManagerState+" "+string(preflight.WouldRepair)) {
		t.Errorf("the daemon asked for the restart with state_files %q, want %s %s (planned, not written)", files, preflight.CPUManagerState, preflight.WouldRepair)
	}
	run := checkStartPreflight(t, k, offset, preflight.CPUManagerState)
	found, _ := filepath.Glob(filepath.Join(k.RootDir, preflight.CPUManagerState+".hotplugd-backup-*"))
	if len(found) != backups {
		t.Errorf("backups of cpu_manager_state: %v, want %d", found, backups)
	}
	if named := lineWith(run.report, "backup: "); named == "" || !slices.Contains(found, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(named), "backup:"))) {
		t.Errorf("the backup preflight's report names (%q) is not among %v:\n%s", named, found, run.report)
	}
}

// eventsWith counts the Events on the Node with reason whose message
// contains substr.
func eventsWith(t *testing.T, s *suite, reason, substr string) int {
	t.Helper()
	n := 0
	for _, e := range nodeEvents(t, s, reason) {
		if strings.Contains(e.Message, substr) {
			n += int(max(e.Count, 1))
		}
	}
	return n
}

// startStaticKubelet starts a kubelet with the static CPU manager on this
// machine's 2 CPUs; it skips unless 2 are online.
func startStaticKubelet(t *testing.T, s *suite) *kubelet {
	t.Helper()
	return startStaticKubeletOf(t, s, "")
}

// startStaticKubeletOf is startStaticKubelet with the kubelet binary bin
// ("" for the suite's).
func startStaticKubeletOf(t *testing.T, s *suite, bin string) *kubelet {
	t.Helper()
	k := startKubeletWith(t, s, kubeletSpec{Config: staticCPUManager, Binary: bin})
	if got := quantity(getNode(t, s).Status.Capacity, v1.ResourceCPU); got != "2" {
		t.Skipf("SKIPPED: needs exactly 2 CPUs online to start with, the kubelet reports %s", got)
	}
	if got := defaultCPUSet(t, k); got != "0-1" {
		t.Fatalf("the kubelet wrote defaultCpuSet %q, want 0-1", got)
	}
	return k
}

// startRefused starts the stopped kubelet (static CPU manager, state "0-1")
// with cpu1 offline and checks that it refuses, as in the incident: it
// exits with cpuMismatch, and its Node keeps the stale 2 CPUs.
func (k *kubelet) startRefused(t *testing.T) {
	t.Helper()
	offset, t0 := k.logSize(), time.Now()
	k.Start(t)
	if !k.waitExit(30 * time.Second) {
		t.Fatalf("the kubelet started with a stale cpu_manager_state still runs after 30 s; its log:\n%s", k.logSince(offset))
	}
	log := k.logSince(offset)
	if !strings.Contains(log, cpuMismatch) {
		t.Fatalf("the kubelet exited without %q; its log:\n%s", cpuMismatch, log)
	}
	t.Logf("the kubelet exited %v after its start: %s", time.Since(t0).Round(100*time.Millisecond), lineWith(log, cpuMismatch))
	if got := quantity(getNode(t, k.s).Status.Capacity, v1.ResourceCPU); got != "2" {
		t.Errorf("the Node shows cpu %s, want the stale 2", got)
	}
}

// cpuIs matches a Node whose capacity cpu is want and whose allocatable
// cpu is one less (cpu0 is reserved).
func cpuIs(want string) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		if quantity(n.Status.Capacity, v1.ResourceCPU) != want {
			return false
		}
		alloc := resource.MustParse(want)
		alloc.Sub(resource.MustParse("1"))
		return sameQuantity(n.Status.Allocatable, v1.ResourceCPU, alloc)
	}
}

// defaultCPUSet reads the defaultCpuSet of the kubelet's cpu_manager_state
// (every format the kubelet writes keeps it at the top level).
func defaultCPUSet(t *testing.T, k *kubelet) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.RootDir, "cpu_manager_state"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		DefaultCPUSet string `json:"defaultCpuSet"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatalf("cpu_manager_state: %v: %s", err, b)
	}
	return st.DefaultCPUSet
}

// unquoted is a log excerpt with its \" as ".
func unquoted(s string) string { return strings.ReplaceAll(s, `\"`, `"`) }

// lineWith is the first line of log containing s.
func lineWith(log, s string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
