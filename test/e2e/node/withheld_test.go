//go:build e2e

package node

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// nrHugepages is the guest's global count of 2Mi hugepages: the drift the
// scenarios from 7 on make, one write, no QMP. The kubelet reads it only
// at its start (scenario 4).
const nrHugepages = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

// setHugepages sets the guest's count of 2Mi hugepages and returns the
// count the kernel made (it may make fewer than asked).
func (v *vm) setHugepages(n int) int {
	v.t.Helper()
	got, err := strconv.Atoi(strings.TrimSpace(v.sh(fmt.Sprintf("echo %d > %s; cat %s", n, nrHugepages, nrHugepages))))
	if err != nil {
		v.t.Fatal(err)
	}
	return got
}

// withheldWatch is how long a withheld restart is watched not happening:
// longer than the remedy interval (10s) after the attempt, when a retry of
// the same drift would begin (the journal would show it under way).
const withheldWatch = 12 * time.Second

// stagedChange is a change waiting in the kubelet's configuration (or its
// unit) for the kubelet's next start, or a unit systemd would not start: a
// restart then starts something hotplugd has not judged, or nothing.
type stagedChange struct {
	name    string
	stage   string // shell, in the guest
	unstage string
	// want is in the RestartWithheld Event's message.
	want *regexp.Regexp
}

var stagedChanges = []stagedChange{
	{
		name: "KUBELET_EXTRA_ARGS staged in /etc/default/kubelet",
		stage: `cp -p /etc/default/kubelet /root/kubelet.default
sed -i 's|^KUBELET_EXTRA_ARGS=.*|KUBELET_EXTRA_ARGS=--v=3|' /etc/default/kubelet`,
		unstage: `cp -p /root/kubelet.default /etc/default/kubelet`,
		want:    regexp.MustCompile(`another command line than the running kubelet's \(next start only: --v=3\)`),
	},
	{
		name: "the kubelet's config file edited",
		// cp -p back restores the file's modification time too: the
		// kubelet's configuration is then as old as before.
		stage: `cp -p /var/lib/kubelet/config.yaml /root/config.yaml
echo 'maxPods: 90' >> /var/lib/kubelet/config.yaml`,
		unstage: `cp -p /root/config.yaml /var/lib/kubelet/config.yaml`,
		want:    regexp.MustCompile(`configuration changed after the kubelet started.*/var/lib/kubelet/config\.yaml`),
	},
	{
		name:    "kubelet.service masked while it runs",
		stage:   `systemctl mask --runtime kubelet`,
		unstage: `systemctl unmask --runtime kubelet`,
		want:    regexp.MustCompile(`unit kubelet\.service is masked`),
	},
}

// restartWithheld is scenario 7: a drift (2Mi hugepages set) while a
// change waits for the kubelet's next start (flags in an environment file
// of its unit, its config file) or while its unit is masked. A restart
// would start a configuration nobody has judged (a change staged for after
// a drain, applied at an unattended moment), or nothing: hotplugd restarts
// nothing and sends one RestartWithheld Event, watched for longer than a
// retry would take. Each case takes the drift back before the change.
func restartWithheld(t *testing.T, v *vm) {
	v.pastKubeletGrace()
	for i, c := range stagedChanges {
		t.Run(c.name, func(t *testing.T) { c.check(t, v.on(t), i+1, "7 restart withheld", "hotplugd") })
	}
}

// check stages the change, sets pages 2Mi hugepages and checks that the
// restart is withheld, then takes both back; the row goes to scenario's
// results as side's.
func (c stagedChange) check(t *testing.T, v *vm, pages int, scenario, side string) {
	// The hugepages the kubelet reported at its start.
	node := getNode(t)
	was := qty(node.Status.Capacity, "hugepages-2Mi").Value()
	v.sh(c.stage)
	staged := true
	defer func() {
		if staged {
			v.sh(c.unstage)
		}
	}()
	before := eventCounts(t, nodepatch.ReasonRestartWithheld)
	j0 := v.remedyJournal().Seq
	cur := v.mark()
	t0 := time.Now()
	got := v.setHugepages(pages)
	var ev *v1.Event
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool {
		ev = newEvent(t, nodepatch.ReasonRestartWithheld, before)
		return ev != nil
	}) {
		t.Fatalf("no RestartWithheld Event %v after %d hugepages with %s; hotplugd:\n%s", stepTimeout, got, c.name, v.journal("hotplugd", 30))
	}
	took := time.Since(t0)
	if !c.want.MatchString(ev.Message) {
		t.Errorf("the RestartWithheld Event does not say %q: %s", c.want, ev.Message)
	}
	// The drift stays for longer than a retry would take.
	bad, held := holdsFor(t, withheldWatch, hugepagesAre(was))
	if !held {
		t.Errorf("the Node changed while the restart was withheld: %s", capacityOf(bad))
	}
	restarts := v.starts(cur)
	if restarts != 0 {
		t.Errorf("%d kubelet restarts with %s, want none:\n%s", restarts, c.name, v.journal("hotplugd", 30))
	}
	events := sumEvents(t, nodepatch.ReasonRestartWithheld, before)
	if events != 1 {
		t.Errorf("%d RestartWithheld Events (counted with their repeats) with %s, want one", events, c.name)
	}
	j := v.remedyJournal()
	outcomes := j.outcomesSince(j0)
	if strings.Join(outcomes, ",") != "withheld" || j.Underway != nil {
		t.Errorf("remedy journal since the drift: %q, under way %+v; want one attempt withheld, nothing under way", outcomes, j.Underway)
	}
	addResult(result{scenario: scenario, side: side, change: c.name + "; then " + strconv.Itoa(got) + " x 2Mi hugepages set",
		correct: "RestartWithheld Event " + seconds(took) + " (no restart, by design)", restarts: restarts, writes: -1,
		note: fmt.Sprintf("%d Event(s) in %v watched, journal %q; %s", events, withheldWatch, outcomes, ev.Message)})

	// Back: the drift first (with the change still staged its end
	// restarts nothing), then the change.
	v.setHugepages(int(was >> 21))
	if !waitFor(stepTimeout, 200*time.Millisecond, func() bool { return staleStatus(getNode(t)) == v1.ConditionFalse }) {
		t.Fatalf("the Node is still reported stale after the hugepages went back to %d; hotplugd:\n%s", was>>21, v.journal("hotplugd", 20))
	}
	v.sh(c.unstage)
	staged = false
}

// eventCounts are the Node's Events with the reason, by UID, with their
// counts (the event recorder counts a repeated Event on the same object).
func eventCounts(t *testing.T, reason string) map[string]int32 {
	t.Helper()
	m := map[string]int32{}
	for _, e := range nodeEvents(t, reason) {
		m[string(e.UID)] = max(e.Count, 1)
	}
	return m
}

// newEvent is the Node's newest Event with the reason that is not in
// before, or was repeated since; nil when none.
func newEvent(t *testing.T, reason string, before map[string]int32) *v1.Event {
	t.Helper()
	var last *v1.Event
	for _, e := range nodeEvents(t, reason) {
		if max(e.Count, 1) > before[string(e.UID)] {
			last = &e
		}
	}
	return last
}

// sumEvents counts the Node's Events with the reason since before,
// repeats included.
func sumEvents(t *testing.T, reason string, before map[string]int32) int32 {
	t.Helper()
	var n int32
	for uid, c := range eventCounts(t, reason) {
		n += c - before[uid]
	}
	return n
}

// remedyJournal is hotplugd's journal in the guest
// (/var/lib/hotplugd/remedy.json, pkg/journal), the fields the tests read.
type remedyJournal struct {
	Underway *struct {
		Key   string `json:"key"`
		Phase string `json:"phase"`
	} `json:"underway"`
	Attempts []struct {
		Seq       int64     `json:"seq"`
		Key       string    `json:"key"`
		Start     time.Time `json:"start"`
		Outcome   string    `json:"outcome"`
		Restarted bool      `json:"restarted"`
	} `json:"attempts"`
	Seq int64 `json:"seq"`
}

func (v *vm) remedyJournal() remedyJournal {
	v.t.Helper()
	var j remedyJournal
	r := v.exec("cat", "/var/lib/hotplugd/remedy.json")
	if r.Code != 0 {
		return j // none yet
	}
	if err := json.Unmarshal([]byte(r.Stdout), &j); err != nil {
		v.t.Fatalf("/var/lib/hotplugd/remedy.json: %v\n%s", err, r.Stdout)
	}
	return j
}

// outcomesSince are the outcomes of the attempts after seq, oldest first.
func (j remedyJournal) outcomesSince(seq int64) []string {
	var out []string
	for _, a := range j.Attempts {
		if a.Seq > seq {
			out = append(out, a.Outcome)
		}
	}
	return out
}

// kubeletPID is the kubelet unit's main process ("0": none).
func (v *vm) kubeletPID() string {
	v.t.Helper()
	return strings.TrimSpace(v.run("systemctl", "show", "-p", "MainPID", "--value", "kubelet").Stdout)
}

// binaryRemoved is scenario 8: hotplugd's binary removed with the
// kubelet's preflight drop-in left in place (an uninstall in the wrong
// order). The drop-in's "-" prefix makes systemd skip the missing
// ExecStartPre: `systemctl restart kubelet` starts the kubelet.
func binaryRemoved(t *testing.T, v *vm) {
	v.run("systemctl", "stop", "hotplugd")
	v.run("mv", guestHotplugd, "/root/hotplugd.removed")
	restored := false
	restore := func() {
		if !restored {
			restored = true
			v.run("mv", "/root/hotplugd.removed", guestHotplugd)
			v.run("systemctl", "start", "hotplugd")
		}
	}
	defer restore()
	pre := strings.TrimSpace(v.run("systemctl", "show", "-p", "ExecStartPre", "--value", "kubelet").Stdout)
	if !strings.Contains(pre, "path="+guestHotplugd) || !strings.Contains(pre, "ignore_errors=yes") {
		t.Fatalf("kubelet.service has no ExecStartPre=-%s: %s", guestHotplugd, pre)
	}
	pid0 := v.kubeletPID()
	cur := v.mark()
	t0 := time.Now()
	if r := v.exec("systemctl", "restart", "kubelet"); r.Code != 0 {
		t.Fatalf("systemctl restart kubelet without %s: %s\n%s", guestHotplugd, r, v.journal("kubelet", 30))
	}
	if !waitFor(readyTimeout, 500*time.Millisecond, func() bool {
		p := v.kubeletPID()
		return p != "0" && p != pid0 && strings.TrimSpace(v.exec("systemctl", "is-active", "kubelet").Stdout) == "active"
	}) {
		t.Fatalf("the kubelet does not run again after the restart:\n%s", v.journal("kubelet", 30))
	}
	d := v.waitReady(t0)
	said := strings.TrimSpace(v.exec("journalctl", "-u", "kubelet", "--since", cur, "-o", "cat", "--no-pager",
		"--grep", "hotplugd|203/EXEC").Stdout)
	if said == "" {
		t.Errorf("systemd's journal has nothing about the missing ExecStartPre since the restart:\n%s", v.journal("kubelet", 30))
	}
	restarts := v.starts(cur)
	if restarts != 1 {
		t.Errorf("%d kubelet starts since systemctl restart, want 1", restarts)
	}
	addResult(result{scenario: "8 hotplugd binary removed", side: "kubelet alone", change: "rm " + guestHotplugd + " (drop-in left); systemctl restart kubelet",
		correct: "Node Ready " + seconds(d), restarts: restarts, writes: -1,
		note: "systemd: " + strings.Join(strings.Split(said, "\n"), " / ")})
}

// plainUnit is a kubelet unit outside kubeadm's layout: the whole command
// line in ExecStart, no environment files (installed over the packaged
// unit, with kubeadm's drop-in masked).
const plainUnit = `[Unit]
Description=kubelet, a plain unit (not kubeadm's layout)
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet --config=/var/lib/kubelet/config.yaml --kubeconfig=/etc/kubernetes/kubelet.conf --node-ip=10.0.2.15 --cpu-manager-policy=static
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// plainKubeletUnit is scenario 9, on the node with 5 CPUs: the kubelet's
// unit is a plain one, preflight (the same drop-in) reads the kubelet's
// command line from systemd (--kubelet-unit=%n). The valid static state
// file passes and the kubelet starts; then CPU 4 goes offline and the
// restart hotplugd asks for repairs the file in the kubelet's start, the
// pinned pod kept. The packaged layout and CPU 4 come back at the end.
func plainKubeletUnit(t *testing.T, v *vm) {
	before := v.waitPinnedRunning()
	v.put("/etc/systemd/system/kubelet.service", []byte(plainUnit), 0o644)
	v.run("ln", "-sf", "/dev/null", "/etc/systemd/system/kubelet.service.d/10-kubeadm.conf")
	v.run("systemctl", "daemon-reload")
	layout := true
	defer func() {
		if layout {
			v.sh(`rm -f /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d/10-kubeadm.conf; systemctl daemon-reload`)
		}
	}()

	// A valid static node, restarted by hand.
	cur := v.mark()
	t0 := time.Now()
	v.run("systemctl", "restart", "kubelet")
	d := v.waitReady(t0)
	cmdline := strings.TrimSpace(v.sh(`tr '\0' ' ' < /proc/$(systemctl show -p MainPID --value kubelet)/cmdline`))
	if !strings.HasSuffix(cmdline, "--cpu-manager-policy=static") || strings.Contains(cmdline, "bootstrap") {
		t.Fatalf("the kubelet runs %q, not the plain unit's command line", cmdline)
	}
	pre := v.preflightReport(cur)
	if !strings.Contains(pre, "cpu_manager_state: valid") || strings.Contains(pre, "warning") {
		t.Errorf("preflight in the plain unit's start did not find cpu_manager_state valid:\n%s", pre)
	}
	addResult(result{scenario: "9 plain kubelet unit", side: "kubelet alone", change: "ExecStart=/usr/bin/kubelet --config=... --cpu-manager-policy=static; systemctl restart kubelet",
		correct: "Node Ready " + seconds(d), restarts: v.starts(cur), writes: -1, note: "preflight in its start: " + oneLineOf(pre)})

	// A CPU change, repaired in the start hotplugd asks for.
	v.pastGrace(faultGrace)
	cur = v.mark()
	t0 = time.Now()
	v.sh("echo 0 > /sys/devices/system/cpu/cpu4/online")
	d = waitNode(t, t0, stepTimeout, "4 CPUs", cpusAre(4))
	restarts := v.starts(cur)
	if restarts != 1 {
		t.Errorf("%d kubelet restarts, want 1:\n%s", restarts, v.journal("hotplugd", 30))
	}
	pre = v.preflightReport(cur)
	if !strings.Contains(pre, "cpu_manager_state: repaired") {
		t.Errorf("preflight in the restart's start did not repair cpu_manager_state:\n%s", pre)
	}
	state := v.cpuState()
	if state.DefaultCPUSet != "0,2-3" {
		t.Errorf("defaultCpuSet %q, want 0,2-3 (CPU 4 offline, CPU 1 pinned)", state.DefaultCPUSet)
	}
	after := v.waitPinnedRunning()
	checkPinned(t, before, after)
	addResult(result{scenario: "9 plain kubelet unit", side: "hotplugd", change: "CPU 4 offline (5 -> 4)",
		correct: seconds(d), restarts: restarts, writes: -1,
		note: fmt.Sprintf("preflight in the start: %s; defaultCpuSet %s; pinned: %s", oneLineOf(pre), state.DefaultCPUSet, after)})

	// Back to the packaged layout with CPU 4, hotplugd stopped meanwhile
	// (the kubelet is restarted by hand).
	v.run("systemctl", "stop", "hotplugd")
	v.sh(`rm -f /etc/systemd/system/kubelet.service /etc/systemd/system/kubelet.service.d/10-kubeadm.conf
systemctl daemon-reload
echo 1 > /sys/devices/system/cpu/cpu4/online`)
	layout = false
	t0 = time.Now()
	v.run("systemctl", "restart", "kubelet")
	waitNode(t, t0, readyTimeout, "5 CPUs", func(n *v1.Node) bool { return cpusAre(5)(n) && nodeReady(n, t0) })
	v.run("systemctl", "start", "hotplugd")
}

// preflightReport is what hotplugd preflight wrote into the kubelet's
// journal since mark ("": this boot).
func (v *vm) preflightReport(mark string) string {
	v.t.Helper()
	from := []string{"-b"}
	if mark != "" {
		from = []string{"--since", mark}
	}
	return v.exec(append(append([]string{"journalctl", "-u", "kubelet"}, from...), "-o", "cat", "--no-pager",
		"--grep", `^(cpu_manager_state|memory_manager_state|hotplugd preflight)`)...).Stdout
}

// oneLineOf joins a few lines with " / ".
func oneLineOf(s string) string {
	return strings.Join(strings.Split(strings.TrimSpace(s), "\n"), " / ")
}
