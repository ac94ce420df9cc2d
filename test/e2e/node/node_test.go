//go:build e2e

package node

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

const (
	gib = int64(1) << 30
	// watch is how long a kubelet alone is watched not following a change:
	// several of its node status updates (nodeStatusUpdateFrequency 2s).
	watch = 12 * time.Second
	// evictionHard is the kubelet's default memory.available threshold,
	// the only memory reservation of the test's configuration.
	evictionHard = 100 << 20
)

// guestHotplugdArgs are HOTPLUGD_ARGS in the guest's /etc/default/hotplugd:
// the kubelet's kubeconfig, the remedy through systemd, a remedy interval
// short enough for two restarts in one scenario (default 10m), no daily
// bound on restarts (default 3: this node's kubelet is restarted by
// hotplugd a dozen times a day, more with the fault trials), and hot-added
// CPUs onlined (Debian's udev has no rule that does).
const guestHotplugdArgs = "--kubeconfig=/etc/kubernetes/kubelet.conf --remedy=restart-kubelet --remedy-interval=10s --max-restarts-per-day=0 --online-new-cpus --restart-budget-token-file=" + guestBudgetToken

// onlineCPUsDropIn is the drop-in hotplugd.service asks for with
// --online-new-cpus (see the unit).
const onlineCPUsDropIn = "[Service]\nReadWritePaths=/sys/devices/system/cpu\n"

// hugepagesUnit is the seeds' boot script as a unit (its "risk point"):
// 2Mi hugepages set per NUMA node once the kubelet runs. It waits for the
// kubelet's healthz, so that the kubelet has read the machine before.
const hugepagesUnit = `[Unit]
Description=2Mi hugepages per NUMA node, set after the kubelet (the seeds' boot script)
After=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
TimeoutStartSec=10min
ExecStartPre=/bin/bash -c 'until (exec 3<>/dev/tcp/127.0.0.1/10248 && printf "GET /healthz HTTP/1.0\r\n\r\n" >&3 && grep -q "^ok" <&3); do sleep 1; done'
ExecStart=/bin/sh -c 'echo 32 > /sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages'

[Install]
WantedBy=multi-user.target
`

// cpuStateError is the kubelet's own refusal of a state file whose CPUs are
// not the machine's (cpumanager's policy_static.go, validateState).
// The journal has it as the kubelet logs it, in a quoted err="..." value.
var cpuStateError = regexp.MustCompile(`current set of available CPUs \\?"[^"\\]*\\?" doesn't match with CPUs in state \\?"[^"\\]*\\?"`)

// on returns v with t as the test its failures go to.
func (v *vm) on(t *testing.T) *vm {
	c := *v
	c.t = t
	return &c
}

func memoryIs(capacity int64) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		return n.Status.Capacity.Memory().Value() == capacity &&
			n.Status.Allocatable.Memory().Value() == capacity-evictionHard
	}
}

func cpusAre(c int64) func(*v1.Node) bool {
	return func(n *v1.Node) bool { return n.Status.Capacity.Cpu().Value() == c }
}

func hugepagesAre(b int64) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		return qty(n.Status.Capacity, "hugepages-2Mi").Value() == b && qty(n.Status.Allocatable, "hugepages-2Mi").Value() == b
	}
}

// TestNode runs the scenarios on one node VM, as a node lives: boots on the
// same disk, each of scenarios 1 to 4 first with the kubelet alone, then
// with hotplugd installed as docs/install.md says. Scenario 6, the DaemonSet,
// runs first, before hotplugd's unit is installed; the node's provisioning
// has installed hotplugd's binary and the kubelet's preflight drop-in
// before the kubelet's first start. Scenarios 7 to 10 are issue 19's: the
// restart withheld where hotplugd cannot judge what it would start, the
// kubelet's start without hotplugd's binary, a kubelet unit outside
// kubeadm's layout, and SIGKILL at every moment of a remedy (the unit's
// process and the DaemonSet's pod's; $HOTPLUGD_NODE_FAULT_TRIALS trials
// per moment, make e2e-node-faults).
func TestNode(t *testing.T) {
	a := findAssets(t)
	forgetNode(t)
	builds := buildForGuest(t)
	n := newNode(t, a)

	// Boot 1, 2 CPUs: join, the pinned pod, the DaemonSet, hotplugd
	// installed.
	v := n.boot(t, 2)
	v.importImages(builds.pause, builds.workload, builds.probed)
	v.provisionPreflight(builds.hotplugd)
	t.Logf("kubelet enabled -> Node Ready: %v", v.join().Round(time.Millisecond))
	pinned := v.runPinned(builds.workload.Ref())
	t.Logf("pinned pod: %s", pinned)
	if pinned.Assigned != "1" || pinned.Cpuset != "1" {
		t.Fatalf("pinned pod %s, want CPU 1 (CPU 0 is reserved)", pinned)
	}
	t.Run("6 DaemonSet remedy", func(t *testing.T) { daemonSetRemedy(t, v.on(t), builds.hotplugdImage) })
	v.installHotplugd(builds.hotplugd)
	v.setHotplugdArgs(guestHotplugdArgs)
	v.put("/etc/systemd/system/hotplugd.service.d/online-cpus.conf", []byte(onlineCPUsDropIn), 0o644)
	v.run("systemctl", "daemon-reload")
	v.restartHotplugd()

	var fields string
	t.Run("1 memory hot-add", func(t *testing.T) { fields = memoryHotAdd(t, v.on(t)) })
	t.Run("5 systemd", func(t *testing.T) { systemdIntegration(t, v.on(t), fields) })
	t.Run("7 restart withheld", func(t *testing.T) { restartWithheld(t, v.on(t)) })
	t.Run("8 hotplugd binary removed", func(t *testing.T) { binaryRemoved(t, v.on(t)) })
	t.Run("11 readiness through a remedy", func(t *testing.T) { readinessThroughRemedy(t, v.on(t), builds.probed) })
	t.Run("13 hypervisor actions in parts", func(t *testing.T) { hypervisorSeries(t, v.on(t)) })

	// Boot 2, 2 CPUs: hugepages set after the kubelet, the kubelet alone.
	// Boot 3, 3 CPUs: the CPU upgrade, the kubelet alone. Boot 4, 3 CPUs:
	// both incidents at once with hotplugd (one boot for the two: preflight
	// repairs the CPU state in the kubelet's first start, the hugepages
	// come after it); then CPU hot-add.
	v.put("/etc/systemd/system/e2e-hugepages.service", []byte(hugepagesUnit), 0o644)
	v.run("systemctl", "enable", "e2e-hugepages.service")
	v.hotplugdOff()
	v.powerOff()
	t.Run("4 hugepages at boot, kubelet alone", func(t *testing.T) { hugepagesAlone(t, n) })
	t.Run("3 CPU upgrade reboot, kubelet alone", func(t *testing.T) { cpuUpgradeAlone(t, n) })
	t.Run("3 and 4 at boot with hotplugd", func(t *testing.T) { v = atBootWithHotplugd(t, n, pinned) })
	if v.cpus != 3 {
		t.Fatal("no node VM after the CPU upgrade")
	}
	t.Run("2 CPU hot-add", func(t *testing.T) { cpuHotAdd(t, v.on(t)) })
	// From here on hotplugd gives a kubelet that has just started 5 s to
	// report its Node, and a restart never asked for 20 s (faultArgs):
	// speed only.
	v.setHotplugdArgs(guestHotplugdArgs + " " + strings.Join(faultArgs, " "))
	v.restartHotplugd()
	t.Run("9 plain kubelet unit", func(t *testing.T) { plainKubeletUnit(t, v.on(t)) })
	t.Run("10 SIGKILL during a remedy", func(t *testing.T) { killDuringRemedy(t, v.on(t), builds) })
	t.Run("12 uninstall", func(t *testing.T) { uninstallSystemd(t, v.on(t)) })
}

// uninstallSystemd is scenario 12: docs/install.md's systemd uninstall,
// run as written (its first line finds the unit disabled already: scenario
// 10 disables it, and checks there that the unit's hotplugd pruned the Node
// as it stopped); then nothing of hotplugd is left on the node or its Node,
// and the kubelet restarts fine without the drop-in.
func uninstallSystemd(t *testing.T, v *vm) {
	script := readmeBlock(t, "systemd-uninstall")
	v.t.Logf("docs/install.md's systemd uninstall:\n%s", script)
	v.sh("set -x\n" + script)
	if left := v.sh(`ls -d /usr/local/bin/hotplugd /etc/systemd/system/hotplugd.service /etc/default/hotplugd /etc/systemd/system/kubelet.service.d/10-hotplugd-preflight.conf /var/lib/hotplugd /var/lib/kubelet/*.hotplugd-backup-* 2>/dev/null || true`); strings.TrimSpace(left) != "" {
		t.Errorf("left on the node after the uninstall:\n%s", left)
	}
	if n := getNode(t); n == nil || staleStatus(n) != "" || hasHotplugdAnnotation(n) {
		t.Errorf("after the uninstall the Node still carries hotplugd's condition or annotations: %+v %v", n.Status.Conditions, n.Annotations)
	}
	t1 := time.Now()
	v.run("systemctl", "restart", "kubelet")
	took := v.waitReady(t1)
	if r := v.exec("systemctl", "show", "-p", "ExecStartPre", "kubelet"); strings.Contains(r.Stdout, "hotplugd") {
		t.Errorf("the kubelet's unit still runs hotplugd: %s", r.Stdout)
	}
	addResult(result{scenario: "12 uninstall", side: "hotplugd", change: "docs/install.md's systemd uninstall, then systemctl restart kubelet", correct: "-", writes: -1,
		note: fmt.Sprintf("no file of hotplugd's left, no condition or hotplugd.io/ annotation on the Node; the kubelet restarted without the drop-in, its Node Ready %s later", seconds(took))})
}

// hasHotplugdAnnotation is whether the Node has an annotation under
// hotplugd.io/.
func hasHotplugdAnnotation(n *v1.Node) bool {
	for k := range n.Annotations {
		if strings.HasPrefix(k, nodepatch.AnnotationPrefix) {
			return true
		}
	}
	return false
}

// memoryHotAdd is scenario 1, the seeds' incident: a DIMM added while the
// kubelet runs. It returns hotplugd's journal entries of the change.
func memoryHotAdd(t *testing.T, v *vm) string {
	v.run("systemctl", "stop", "hotplugd")
	mt0 := v.memTotal()
	node := getNode(t)
	if got := node.Status.Capacity.Memory().Value(); got != mt0 {
		t.Errorf("the Node's memory capacity %d, the guest's MemTotal %d", got, mt0)
	}

	// Alone.
	cur := v.mark()
	if err := v.qmp.PlugDIMM("dimm1", gib); err != nil {
		t.Fatal(err)
	}
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool { return v.memTotal() == mt0+gib }) {
		t.Fatalf("the guest's MemTotal is not %d + 1 GiB after the DIMM", mt0)
	}
	aloneSum := v.summary()
	bad, held := holdsFor(t, watch, memoryIs(mt0))
	note := fmt.Sprintf("summary API: availableBytes %d + workingSetBytes %d = %d (old MemTotal %d, new %d)",
		*aloneSum.Node.Memory.AvailableBytes, *aloneSum.Node.Memory.WorkingSetBytes,
		*aloneSum.Node.Memory.AvailableBytes+*aloneSum.Node.Memory.WorkingSetBytes, mt0, mt0+gib)
	if !held {
		t.Errorf("the kubelet alone changed the Node: %s", capacityOf(bad))
	}
	addResult(result{scenario: "1 memory hot-add", side: "kubelet alone", change: "1 GiB DIMM (QMP device_add)",
		correct: fmt.Sprintf("never (%v watched)", watch), restarts: v.starts(cur), writes: -1, note: note})
	// The operator's fix without hotplugd.
	t0 := time.Now()
	v.run("systemctl", "restart", "kubelet")
	t.Logf("systemctl restart kubelet -> Node memory +1 GiB: %v", waitNode(t, t0, readyTimeout, "the DIMM", memoryIs(mt0+gib)).Round(time.Millisecond))

	// With hotplugd.
	v.run("systemctl", "start", "hotplugd")
	if !waitFor(stepTimeout, 500*time.Millisecond, func() bool { return v.hotplugdMetric("hotplugd_node_writes_total") >= 0 }) {
		t.Fatalf("hotplugd's metrics do not answer:\n%s", v.journal("hotplugd", 30))
	}
	w0 := v.hotplugdMetric("hotplugd_node_writes_total")
	// The restarted kubelet's grace first (pastKubeletGrace).
	v.pastKubeletGrace()
	cur = v.mark()
	if err := v.qmp.PlugDIMM("dimm2", gib); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	d := waitNode(t, t0, stepTimeout, "the second DIMM", memoryIs(mt0+2*gib))
	sum := v.summary()
	avail, ws := *sum.Node.Memory.AvailableBytes, *sum.Node.Memory.WorkingSetBytes
	if int64(avail+ws) != mt0+2*gib {
		t.Errorf("summary API: availableBytes %d + workingSetBytes %d = %d, want the new capacity %d", avail, ws, avail+ws, mt0+2*gib)
	}
	restarts := v.starts(cur)
	if restarts != 1 {
		t.Errorf("%d kubelet restarts, want 1:\n%s", restarts, v.journal("hotplugd", 30))
	}
	addResult(result{scenario: "1 memory hot-add", side: "hotplugd", change: "1 GiB DIMM (QMP device_add)", correct: seconds(d),
		restarts: restarts, writes: v.hotplugdMetric("hotplugd_node_writes_total") - w0,
		note: fmt.Sprintf("restart over D-Bus; summary API availableBytes %d + workingSetBytes %d = capacity %d; allocatable %s",
			avail, ws, avail+ws, getNode(t).Status.Allocatable.Memory())})
	return v.run("journalctl", "-u", "hotplugd", "--since", cur, "-o", "json", "--no-pager", "HOTPLUG_RESOURCE=memory").Stdout
}

// systemdIntegration is scenario 5: what an operator checks of the unit.
func systemdIntegration(t *testing.T, v *vm, fields string) {
	// The STATUS line.
	status := v.exec("systemctl", "status", "hotplugd", "--no-pager").Stdout
	statusLine := regexp.MustCompile(`Status: "capacity cpu=\d+ [^"]*memory=\d+Ki[^"]*"`).FindString(status)
	if statusLine == "" {
		t.Errorf("systemctl status hotplugd has no STATUS line with the capacity:\n%s", status)
	}
	// The journal fields of the memory change.
	var entry map[string]any
	for line := range strings.Lines(fields) {
		var e map[string]any
		if err := json.Unmarshal([]byte(line), &e); err == nil && e["HOTPLUG_NEW"] != nil {
			entry = e
		}
	}
	if entry == nil {
		t.Errorf("journalctl -u hotplugd -o json HOTPLUG_RESOURCE=memory: no entry with HOTPLUG_NEW:\n%s", fields)
	} else {
		for _, f := range []string{"HOTPLUG_OLD", "HOTPLUG_NEW", "HOTPLUG_TRIGGER", "HOTPLUG_EVENTS", "HOTPLUG_LATENCY"} {
			if entry[f] == nil {
				t.Errorf("the journal entry of the memory change has no %s: %v", f, entry)
			}
		}
	}
	fieldsNote := fmt.Sprintf("memory %v -> %v, trigger %v, %v events", entry["HOTPLUG_OLD"], entry["HOTPLUG_NEW"], entry["HOTPLUG_TRIGGER"], entry["HOTPLUG_EVENTS"])
	addResult(result{scenario: "5 systemd", side: "hotplugd", change: "systemctl status; journalctl -o json", correct: "-", writes: -1,
		note: strings.TrimPrefix(statusLine, "Status: ") + "; " + fieldsNote})

	// Reload: a re-read, same process.
	pid := strings.TrimSpace(v.run("systemctl", "show", "-p", "MainPID", "--value", "hotplugd").Stdout)
	r0 := v.hotplugdMetric("hotplugd_last_reconcile_timestamp_seconds")
	cur := v.mark()
	t0 := time.Now()
	v.run("systemctl", "reload", "hotplugd")
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool { return v.hotplugdMetric("hotplugd_last_reconcile_timestamp_seconds") > r0 }) {
		t.Errorf("no re-read after systemctl reload:\n%s", v.journal("hotplugd", 20))
	}
	reread := time.Since(t0)
	if _, ok := v.waitLog("hotplugd", cur, 10*time.Second, regexp.MustCompile(`SIGHUP: re-reading the topology`)); !ok {
		t.Errorf("no SIGHUP entry in the journal after systemctl reload")
	}
	if p := strings.TrimSpace(v.run("systemctl", "show", "-p", "MainPID", "--value", "hotplugd").Stdout); p != pid {
		t.Errorf("systemctl reload restarted hotplugd: PID %s -> %s", pid, p)
	}
	addResult(result{scenario: "5 systemd", side: "hotplugd", change: "systemctl reload hotplugd", correct: seconds(reread), writes: -1,
		note: "a re-read (hotplugd_last_reconcile_timestamp_seconds moved), same PID " + pid})

	// The watchdog: a stopped hotplugd is killed and restarted.
	cur = v.mark()
	t0 = time.Now()
	v.run("kill", "-STOP", pid)
	var newPID string
	if !waitFor(3*time.Minute, time.Second, func() bool {
		newPID = strings.TrimSpace(v.exec("systemctl", "show", "-p", "MainPID", "--value", "hotplugd").Stdout)
		return newPID != pid && newPID != "0" && strings.TrimSpace(v.exec("systemctl", "is-active", "hotplugd").Stdout) == "active"
	}) {
		t.Fatalf("hotplugd (PID %s, stopped) not restarted within 3m:\n%s", pid, v.journal("hotplugd", 30))
	}
	restarted := time.Since(t0)
	line, ok := v.waitLog("hotplugd", cur, 10*time.Second, regexp.MustCompile(`Watchdog timeout[^\n]*`))
	if !ok {
		t.Errorf("no watchdog timeout in the journal:\n%s", v.journal("hotplugd", 30))
	}
	addResult(result{scenario: "5 systemd", side: "hotplugd", change: "kill -STOP hotplugd (WatchdogSec=30s)", correct: seconds(restarted), writes: -1,
		note: fmt.Sprintf("%q; PID %s -> %s, active again", line, pid, newPID)})

	// The hardening lets it work: nothing denied.
	denied := regexp.MustCompile(`(?i)operation not permitted|permission denied|read-only file system|bad system call`)
	if m := denied.FindAllString(v.exec("journalctl", "-u", "hotplugd", "-b", "-o", "cat", "--no-pager").Stdout, -1); len(m) > 0 {
		t.Errorf("hotplugd's journal has denials: %q", m)
	}
	if out := v.exec("journalctl", "-k", "-b", "-o", "cat", "--no-pager", "--grep", "type=1326|apparmor=\"DENIED\"").Stdout; strings.TrimSpace(out) != "" {
		t.Errorf("the kernel logged denials: %s", out)
	}
	exposure := regexp.MustCompile(`Overall exposure level for hotplugd.service: [^\n]*`).FindString(v.exec("systemd-analyze", "security", "hotplugd.service", "--no-pager").Stdout)
	addResult(result{scenario: "5 systemd", side: "hotplugd", change: "hardening (ProtectSystem=strict, system-call filter)", correct: "-", writes: -1,
		note: "no denied call or path in the journal this boot; " + exposure})
}

// hugepagesAlone is scenario 4 with the kubelet alone: hugepages set at
// boot by a unit ordered after the kubelet. The node comes in with the unit
// enabled and hotplugd off, and leaves with both off (the next boot's
// kubelet fails: the unit would wait for it).
func hugepagesAlone(t *testing.T, n *node) {
	v := n.boot(t, 2)
	v.waitReady(v.start)
	if !waitFor(readyTimeout, time.Second, func() bool {
		return strings.TrimSpace(v.exec("systemctl", "is-active", "e2e-hugepages").Stdout) == "active"
	}) {
		t.Fatalf("e2e-hugepages.service did not finish:\n%s", v.journal("e2e-hugepages", 20))
	}
	if got := strings.TrimSpace(v.cat("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")); got != "32" {
		t.Fatalf("nr_hugepages %s after the unit, want 32", got)
	}
	bad, held := holdsFor(t, watch, hugepagesAre(0))
	if !held {
		t.Errorf("the kubelet alone shows hugepages: %s", capacityOf(bad))
	}
	addResult(result{scenario: "4 hugepages at boot", side: "kubelet alone", change: "boot; a unit After=kubelet.service sets 32 x 2Mi",
		correct: fmt.Sprintf("never (%v watched after the unit)", watch), restarts: v.startsThisBoot() - 1, writes: -1,
		note: "hugepages-2Mi " + qty(getNode(t).Status.Capacity, "hugepages-2Mi").String()})
	v.run("systemctl", "disable", "e2e-hugepages.service")
	v.powerOff()
}

// remedyLine is hotplugd's last journal line about a remedy this boot.
func remedyLine(v *vm) string {
	out := v.exec("journalctl", "-u", "hotplugd", "-b", "-o", "cat", "--no-pager", "--grep", "remed").Stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	l := lines[len(lines)-1]
	if len(l) > 200 {
		l = l[:200] + "..."
	}
	return l
}

// startsThisBoot counts the kubelet's starts this boot.
func (v *vm) startsThisBoot() int {
	v.t.Helper()
	out := v.run("journalctl", "-b", "-o", "json", "--no-pager", "MESSAGE_ID="+unitStarted, "UNIT=kubelet.service").Stdout
	return strings.Count(out, "\n")
}

// cpuUpgradeAlone is scenario 3 with the kubelet alone: the VM powered
// off and started with 3 CPUs instead of 2, the pinned pod's assignment in
// the state file. It leaves the node with hotplugd on and the hugepages
// unit enabled, for atBootWithHotplugd.
func cpuUpgradeAlone(t *testing.T, n *node) {
	v := n.boot(t, 3)
	line, ok := v.waitLog("kubelet", "", readyTimeout, cpuStateError)
	if !ok {
		t.Fatalf("the kubelet alone did not fail with its CPU state error:\n%s", v.journal("kubelet", 40))
	}
	failed := time.Since(v.start)
	nrestarts := strings.TrimSpace(v.run("systemctl", "show", "-p", "NRestarts", "--value", "kubelet").Stdout)
	addResult(result{scenario: "3 CPU upgrade reboot", side: "kubelet alone", change: "power off, boot with 3 CPUs (was 2)",
		correct: "never: the kubelet exits " + seconds(failed) + " after QEMU's start", restarts: v.startsThisBoot() - 1, writes: -1,
		note: fmt.Sprintf("%s; systemd restarts it every 10 s (NRestarts %s)", strings.ReplaceAll(line, `\"`, `"`), nrestarts)})
	v.hotplugdOn()
	v.run("systemctl", "enable", "e2e-hugepages.service")
	v.powerOff()
}

// atBootWithHotplugd is scenarios 3 and 4 with hotplugd, in one boot with
// 3 CPUs (was 2) and the hugepages unit: hotplugd's preflight in the
// kubelet's ExecStartPre repairs cpu_manager_state in its first start, the
// pinned pod's assignment kept, and the hugepages the unit sets after the
// kubelet are shown through hotplugd's restart. It returns the running VM.
func atBootWithHotplugd(t *testing.T, n *node, before podState) *vm {
	v := n.boot(t, 3)
	// The kubelet comes up with 3 CPUs; the hugepages come after it (the
	// unit waits for its healthz): the CPUs are shown first.
	d3 := waitNode(t, v.start, readyTimeout+stepTimeout, "3 CPUs", func(n *v1.Node) bool { return cpusAre(3)(n) && nodeReady(n, v.start) })
	starts3 := v.startsThisBoot() - 1
	d4 := waitNode(t, v.start, stepTimeout+readyTimeout, "64Mi of 2Mi hugepages", hugepagesAre(64<<20))
	// hotplugd's remedy ends (its verification) before the next scenario
	// stops hotplugd.
	var j remedyJournal
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool { j = v.remedyJournal(); return j.Underway == nil }) {
		t.Errorf("hotplugd's remedy is still under way %v after the Node showed the hugepages: %+v", stepTimeout, *j.Underway)
	}
	after := v.on(t).waitPinnedRunning()
	if after.UID != before.UID || after.Assigned != "1" || after.Cpuset != "1" {
		t.Errorf("pinned pod before %s, after %s: want the same pod on CPU 1", before, after)
	}
	// preflight's report, in the kubelet unit's journal: the repair in the
	// boot's first start.
	pre := v.on(t).preflightReport("")
	if !strings.HasPrefix(strings.TrimSpace(pre), "cpu_manager_state: repaired") {
		t.Errorf("preflight's first report this boot is not a repair of cpu_manager_state:\n%s\nkubelet:\n%s", pre, v.journal("kubelet", 60))
	}
	state := v.on(t).cpuState()
	writes := v.hotplugdMetric("hotplugd_node_writes_total")
	addResult(result{scenario: "3 CPU upgrade reboot", side: "hotplugd", change: "power off, boot with 3 CPUs (was 2)",
		correct: seconds(d3) + " (from QEMU's start)", restarts: starts3, writes: writes,
		note: fmt.Sprintf("preflight in ExecStartPre: %s; defaultCpuSet %s; pinned: %s; the same boot as scenario 4's with hotplugd (writes of both)", firstLine(pre), state.DefaultCPUSet, after)})
	addResult(result{scenario: "4 hugepages at boot", side: "hotplugd", change: "boot; a unit After=kubelet.service sets 32 x 2Mi",
		correct: seconds(d4) + " (from QEMU's start)", restarts: v.startsThisBoot() - 1, writes: writes,
		note: "hugepages-2Mi " + qty(getNode(t).Status.Capacity, "hugepages-2Mi").String() + "; " + remedyLine(v) + "; the same boot as scenario 3's with hotplugd (3 CPUs, was 2)"})
	v.run("systemctl", "disable", "e2e-hugepages.service")
	return v
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	if len(l) > 160 {
		l = l[:160] + "..."
	}
	return l
}

// cpuHotAdd is scenario 2: CPUs hot-added under the pinned pod, with the
// static CPU manager.
func cpuHotAdd(t *testing.T, v *vm) {
	before := v.waitPinnedRunning()
	// Alone.
	v.run("systemctl", "stop", "hotplugd")
	cur := v.mark()
	if err := v.qmp.PlugCPU("cpu3"); err != nil {
		t.Fatal(err)
	}
	online := v.onlineCPU(3)
	bad, held := holdsFor(t, watch, cpusAre(3))
	if !held {
		t.Errorf("the kubelet alone changed the Node: %s", capacityOf(bad))
	}
	addResult(result{scenario: "2 CPU hot-add", side: "kubelet alone", change: "CPU device_add (3 -> 4), " + online,
		correct: fmt.Sprintf("never (%v watched)", watch), restarts: v.starts(cur), writes: -1,
		note: "cpu_manager_state defaultCpuSet " + v.cpuState().DefaultCPUSet})

	// hotplugd started on the stale node.
	cur = v.mark()
	t0 := time.Now()
	v.run("systemctl", "start", "hotplugd")
	d := waitNode(t, t0, stepTimeout, "4 CPUs", cpusAre(4))
	after := v.waitPinnedRunning()
	checkPinned(t, before, after)
	addResult(result{scenario: "2 CPU hot-add", side: "hotplugd", change: "systemctl start hotplugd on the stale node",
		correct: seconds(d), restarts: v.starts(cur), writes: v.hotplugdMetric("hotplugd_node_writes_total"),
		note: fmt.Sprintf("defaultCpuSet %s; pinned: %s", v.cpuState().DefaultCPUSet, after)})

	// With hotplugd running, once the restarted kubelet's grace is over.
	w0 := v.hotplugdMetric("hotplugd_node_writes_total")
	v.pastKubeletGrace()
	cur = v.mark()
	if err := v.qmp.PlugCPU("cpu4"); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	online = v.onlineCPU(4)
	d = waitNode(t, t0, stepTimeout, "5 CPUs", cpusAre(5))
	after = v.waitPinnedRunning()
	checkPinned(t, before, after)
	state := v.cpuState()
	if state.DefaultCPUSet != "0,2-4" {
		t.Errorf("defaultCpuSet %q, want the shared pool 0,2-4 (CPU 1 pinned)", state.DefaultCPUSet)
	}
	addResult(result{scenario: "2 CPU hot-add", side: "hotplugd", change: "CPU device_add (4 -> 5), " + online,
		correct: seconds(d), restarts: v.starts(cur), writes: v.hotplugdMetric("hotplugd_node_writes_total") - w0,
		note: fmt.Sprintf("defaultCpuSet %s; pinned before: %s; after: %s", state.DefaultCPUSet, before, after)})
}

// onlineCPU waits for a hot-added CPU to be there and online, onlining it
// as a guest's rule would when nothing else does; it says who did.
func (v *vm) onlineCPU(cpu int) string {
	v.t.Helper()
	path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool { return v.exec("test", "-e", path).Code == 0 }) {
		v.t.Fatalf("no cpu%d in the guest after device_add", cpu)
	}
	if waitFor(3*time.Second, 200*time.Millisecond, func() bool { return strings.TrimSpace(v.exec("cat", path).Stdout) == "1" }) {
		if strings.Contains(v.exec("journalctl", "-u", "hotplugd", "-b", "-o", "cat", "--no-pager", "--grep", "onlined hot-added CPU").Stdout, "onlined") {
			return "onlined by hotplugd (--online-new-cpus)"
		}
		return "online by itself"
	}
	v.sh("echo 1 > " + path)
	return "onlined by the test (echo 1 > online)"
}

func checkPinned(t *testing.T, before, after podState) {
	t.Helper()
	if after.UID != before.UID || after.Container != before.Container || after.Restarts != before.Restarts ||
		!after.Running || after.Assigned != before.Assigned || after.Cpuset != before.Cpuset {
		t.Errorf("the pinned pod changed: before %s, after %s", before, after)
	}
}
