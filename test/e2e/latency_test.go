//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// latencyRepeatsEnv sets how many times TestLatency repeats each incident
// (each repeat is two changes: up and back down, offline and back online).
const latencyRepeatsEnv = "HOTPLUGD_E2E_LATENCY_REPEATS"

// latencyRepeatsDefault keeps TestLatency at a few minutes: 4 changes per
// repeat, 2 node states.
const latencyRepeatsDefault = 5

// Issue 23's goals for change -> Node correct. Reported in the log and the
// results table, never asserted: on a shared 2-core machine a kubelet's
// start alone varies by seconds, and a goal is not a correctness property.
const (
	latencyGoalP50 = 1500 * time.Millisecond
	latencyGoalP99 = 2500 * time.Millisecond
)

// latencyGrace is hotplugd's --kubelet-grace in TestLatency, and each
// change waits until that long (and half a second more) after the kubelet's
// last start. With the default grace (20 s) a change within 20 s of a
// kubelet start is held until the grace ends, and with K repeats the test
// would spend 20 s per change waiting it out; a change after the grace
// takes the same path with either value, so the shorter one measures the
// same remedy.
const latencyGrace = 2 * time.Second

// latencyKubeletConfig is the kubelet's configuration in TestLatency: the
// static CPU manager as in TestStaticCPUManager, but its reservation as
// systemReserved cpu 500m rather than reservedSystemCPUs "0". The static
// policy still reserves cpu0 (500m rounded up to a whole CPU), so cpu1 is
// the only CPU a Guaranteed pod can have; but allocatable cpu is 1500m,
// and 500m with cpu1 offline, where reservedSystemCPUs "0" leaves 0: no
// pod that requests any CPU would fit it, and hotplugd would refuse the
// restart (NeedsDrain) under every loaded node.
const latencyKubeletConfig = `cpuManagerPolicy: static
systemReserved:
  cpu: 500m
`

// latencyHugepages is the hugepage change: 8 x 2Mi through node0's file.
const latencyHugepages = 8

// TestLatency is issue 23's measurement: with hotplugd as the hugepages
// and static CPU manager scenarios run it (--remedy=restart-kubelet, the
// default --quiet-window and --settle, the restart script standing for
// the kubelet's supervisor), each incident is repeated K times
// ($HOTPLUGD_E2E_LATENCY_REPEATS, default 5) on two node states:
//
//   - EMPTY: no pod;
//   - LOADED: 50 running pods (loadPods): a Guaranteed pod pinned to cpu1
//     for the hugepage incident only (with cpu1 pinned, cpu1 offline is a
//     NeedsDrain and no restart: TestPinnedPod), Guaranteed pods with a
//     fraction of a CPU, Burstable pods of which 12 have a readiness probe
//     the kubelet runs against a port of the test, BestEffort pods.
//
// The incidents: 8 x 2Mi hugepages set, then taken back; cpu1 offline,
// then back online. Per change it measures the time from the write's
// return to the first Node read showing what a restarted kubelet reports,
// and from the restart script's timestamps when the restart was asked, how
// long the kubelet took to stop, and how long from its start to the Node
// correct; it reports p50 and p99 per incident and node state (with K
// samples, p99 is the largest).
//
// Asserted per change: the Node correct, exactly one restart (restart,
// stop, preflight, start, and nothing else until the next change), the
// remedy's outcome, preflight's repair in the kubelet's start; on LOADED,
// every pod unchanged (its UID, container, restart count, Running) and
// Ready throughout, as a watch of every pod from the change until every
// probed pod was probed again by the new kubelet sees it. The goals (p50
// at most 1.5 s, p99 at most 2.5 s) are reported, not asserted.
func TestLatency(t *testing.T) {
	s := setup(t)
	repeats := latencyRepeats(t)
	m := acquireMachine(t)
	img, err := workloadImage() // the pause image too
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Run("EMPTY", func(t *testing.T) { latencyState(t, s, m, img, repeats, false) })
	t.Run("LOADED", func(t *testing.T) { latencyState(t, s, m, img, repeats, true) })
	t.Logf("TestLatency: %d repeats of each incident on two node states in %v", repeats, time.Since(start).Round(time.Second))
}

// latencyRepeats reads $HOTPLUGD_E2E_LATENCY_REPEATS.
func latencyRepeats(t *testing.T) int {
	t.Helper()
	v := os.Getenv(latencyRepeatsEnv)
	if v == "" {
		return latencyRepeatsDefault
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("$%s=%q: want a whole number of repeats, at least 1", latencyRepeatsEnv, v)
	}
	return n
}

// latencyChange is one change of the machine and what a restarted kubelet
// then reports.
type latencyChange struct {
	name string
	// write changes the machine.
	write func(t *testing.T)
	// correct is the Node a restarted kubelet reports.
	correct func(*v1.Node) bool
	// repaired are the state files preflight in the kubelet's start must
	// repair; cpuSet the defaultCpuSet after ("": not checked).
	repaired []string
	cpuSet   string
}

// latencyChanges are the incidents' changes on a Node that reported base
// (2 CPUs, no hugepages) when the kubelet started.
func latencyChanges(t *testing.T, base *v1.Node) (hugeUp, hugeDown, cpuOff, cpuOn latencyChange) {
	t.Helper()
	want := func(cpu, allocCPU, huge string) func(*v1.Node) bool {
		allocMem := base.Status.Allocatable.Memory().DeepCopy()
		allocMem.Sub(resource.MustParse(huge))
		return func(n *v1.Node) bool {
			return sameQuantity(n.Status.Capacity, v1.ResourceCPU, resource.MustParse(cpu)) &&
				sameQuantity(n.Status.Allocatable, v1.ResourceCPU, resource.MustParse(allocCPU)) &&
				sameQuantity(n.Status.Capacity, hugepages2Mi, resource.MustParse(huge)) &&
				sameQuantity(n.Status.Allocatable, v1.ResourceMemory, allocMem) &&
				sameQuantity(n.Status.Capacity, v1.ResourceMemory, *base.Status.Capacity.Memory())
		}
	}
	huge := fmt.Sprintf("%dMi", 2*latencyHugepages)
	hugeUp = latencyChange{name: fmt.Sprintf("%d x 2Mi hugepages", latencyHugepages),
		write: func(t *testing.T) { writeMachine(t, node0Hugepages2Mi, strconv.Itoa(latencyHugepages)) }, correct: want("2", "1500m", huge)}
	hugeDown = latencyChange{name: "hugepages back to 0",
		write: func(t *testing.T) { writeMachine(t, node0Hugepages2Mi, "0") }, correct: want("2", "1500m", "0")}
	cpuOff = latencyChange{name: "cpu1 offline",
		write: func(t *testing.T) { writeMachine(t, cpu1Online, "0") }, correct: want("1", "500m", "0"),
		repaired: []string{preflight.CPUManagerState}, cpuSet: "0"}
	cpuOn = latencyChange{name: "cpu1 online",
		write: func(t *testing.T) { writeMachine(t, cpu1Online, "1") }, correct: want("2", "1500m", "0"),
		repaired: []string{preflight.CPUManagerState}, cpuSet: "0-1"}
	return hugeUp, hugeDown, cpuOff, cpuOn
}

// writeMachine writes value to a kernel file and fails unless it reads
// back. The test holds machinetest's lock, and latencyState had it record
// the values to restore.
func writeMachine(t *testing.T, path, value string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		t.Fatal(err)
	}
	if got, err := readTrim(path); err != nil || got != value {
		t.Fatalf("wrote %s to %s, the kernel reads back %q (%v)", value, path, got, err)
	}
}

// latencyState runs the incidents on one node state: its own kubelet,
// hotplugd and, when loaded, pods.
func latencyState(t *testing.T, s *suite, m *machinetest.Machine, img image, repeats int, loaded bool) {
	// The machine as the incidents start and end it, put back through
	// machinetest when t ends (after the kubelet stops: registered first).
	m.SetHugePages(t, node0Hugepages2Mi, 0)
	m.SetCPUOnline(t, 1, true)
	k := startKubeletWith(t, s, kubeletSpec{Config: latencyKubeletConfig})
	base := getNode(t, s)
	if c, a := quantity(base.Status.Capacity, v1.ResourceCPU), quantity(base.Status.Allocatable, v1.ResourceCPU); c != "2" || a != "1500m" {
		t.Skipf("SKIPPED: needs 2 CPUs online, the kubelet reports capacity cpu %s, allocatable %s (want 2, 1500m)", c, a)
	}
	if got := quantity(base.Status.Capacity, hugepages2Mi); got != "0" {
		t.Fatalf("the kubelet started with hugepages-2Mi %q, want 0", got)
	}
	hugeUp, hugeDown, cpuOff, cpuOn := latencyChanges(t, base)

	state := "EMPTY"
	var load *podLoad
	if loaded {
		load = loadPods(t, s, k, img)
		state = fmt.Sprintf("LOADED (%d pods)", len(load.pods))
	}
	// Rate limit and daily bound lifted: K restarts a few seconds apart
	// (TestStaticCPUManager lowers the interval for its two).
	d := startHotplugd(t, s, k, "--remedy-interval", "1s", "--max-restarts-per-day", "0", "--kubelet-grace", latencyGrace.String())
	defer d.Stop() // before the machine is put back (a drift again)
	if load != nil {
		load.waitProbeGrace(t)
	}
	r := &latencyRun{s: s, k: k, d: d, load: load, state: state}

	for range repeats {
		r.sample(t, hugeUp)
		r.sample(t, hugeDown)
	}
	if load != nil {
		load.checkPinned(t)
		load.unpin(t)
	}
	for range repeats {
		r.sample(t, cpuOff)
		r.sample(t, cpuOn)
	}
	r.finish(t)
	if load != nil {
		load.checkEnd(t)
	}
	r.report(t, hugeUp.name, hugeDown.name, cpuOff.name, cpuOn.name, repeats)
}

// latencyRun is one node state's series of changes under one hotplugd.
type latencyRun struct {
	s     *suite
	k     *kubelet
	d     *daemontest.Daemon
	load  *podLoad
	state string
	// samples in the order taken; pending is the last one, whose writes,
	// Events and quiet aftermath are judged before the next change.
	samples []*latencySample
	pending *latencySample
}

// latencySample is one change.
type latencySample struct {
	change string
	// tw is just before the write, t0 its return.
	tw, t0 time.Time
	// took: t0 -> the Node correct; remedy: hotplugd's own measure.
	took, remedy time.Duration
	// From the restart script's timestamps: t0 -> the restart asked,
	// the stop script's run (SIGTERM to the kubelet's exit), preflight in
	// the kubelet's start, the kubelet's start -> the Node correct.
	asked, stop, preflight, up time.Duration
	// From the kubelet's log: its start -> "Successfully registered node"
	// (0: not logged).
	registered time.Duration
	// LOADED: the kubelet's start -> every probed pod probed again, and
	// the pod watch's events in the window (status writes seen).
	probed     time.Duration
	podUpdates int
	podFields  map[string]int
	// Judged before the next change: hotplugd's API writes and Events.
	writes0 float64
	events0 eventCount
	writes  float64
	events  eventCount
}

// spamBurst is client-go's event spam filter burst (tools/record): one
// hotplugd process sends at most 25 Events of one type about its Node,
// then one per 5 minutes; beyond 25 changes an Event may be dropped by
// the sender, and the per-change Event check stops.
const spamBurst = 25

// sample makes one change and measures and checks its remedy.
func (r *latencyRun) sample(t *testing.T, c latencyChange) {
	t.Helper()
	r.judgePending(t)
	// After hotplugd's --kubelet-grace since the kubelet's last start.
	if wait := time.Until(r.lastStart().Add(latencyGrace + 500*time.Millisecond)); wait > 0 {
		time.Sleep(wait)
	}
	smp := &latencySample{change: c.name, writes0: hotplugdWrites(t, r.d), events0: eventCounts(t, r.s)}
	mark, offset := r.d.Mark(), r.k.logSize()
	restarts0 := r.d.Metric("hotplugd_kubelet_restarts_total")
	smp.tw = time.Now()
	c.write(t)
	smp.t0 = time.Now()
	took, n, ok := waitNode(t, r.s, smp.t0, time.Minute, c.correct)
	if !ok {
		t.Fatalf("%s, %s: the Node is not correct 1 min after the change: capacity %v allocatable %v; kubelet calls: %s; hotplugd's log:\n%s",
			r.state, c.name, n.Status.Capacity, n.Status.Allocatable, timeline(r.k, smp.t0), r.d.Dump())
	}
	smp.took = took
	smp.remedy = remedyDone(t, r.d, mark, 30*time.Second)
	// None of these changes is one the kernel delivers in parts: the
	// restart waits for the quiet window alone, never for --settle.
	for _, e := range r.d.Since(mark) {
		if e.Msg == "remedy plan" && strings.Contains(e.Str("plan"), "the change is still arriving") {
			t.Errorf("%s, %s: hotplugd waited for --settle on a complete change: %s", r.state, c.name, e.Str("plan"))
		}
	}
	checkRemedy(t, r.s, r.d, r.k, smp.tw, took, smp.remedy, restarts0+1)
	checkStartPreflight(t, r.k, offset, c.repaired...)
	if c.cpuSet != "" {
		if files := askedRestart(t, r.d, mark).Str("state_files"); !strings.Contains(files, preflight.CPUManagerState+" "+string(preflight.WouldRepair)) {
			t.Errorf("%s: the daemon asked for the restart with state_files %q, want %s %s", c.name, files, preflight.CPUManagerState, preflight.WouldRepair)
		}
		if got := defaultCPUSet(t, r.k); got != c.cpuSet {
			t.Errorf("%s: cpu_manager_state defaultCpuSet %q after the remedy, want %s", c.name, got, c.cpuSet)
		}
	}
	at := map[string]time.Time{}
	for _, call := range r.k.callsSince(smp.tw) {
		if _, seen := at[call.what]; !seen {
			at[call.what] = call.at
		}
	}
	correctAt := smp.t0.Add(took)
	smp.asked = at["restart"].Sub(smp.t0)
	smp.stop = at["preflight"].Sub(at["stop"])
	smp.preflight = at["start"].Sub(at["preflight"])
	smp.up = correctAt.Sub(at["start"])
	if reg, ok := klogTime(lineWith(r.k.logSince(offset), "Successfully registered node"), smp.t0); ok {
		smp.registered = reg.Sub(at["start"])
	}
	note := ""
	if r.load != nil {
		smp.probed, smp.podUpdates, smp.podFields = r.load.checkWindow(t, r.k, c.name, smp.tw, at["start"])
		note = fmt.Sprintf("; %d pods unchanged and Ready throughout (%d pod updates seen), every probed pod probed %s after the kubelet's start",
			len(r.load.pods), smp.podUpdates, seconds(smp.probed))
	}
	r.samples = append(r.samples, smp)
	r.pending = smp
	t.Logf("%s, %s #%d: change -> Node correct %s (restart asked +%s, kubelet stop %s, preflight %s, kubelet start -> Node correct %s, of which start -> registered %s; hotplugd's remedy %s)%s",
		r.state, c.name, r.count(c.name), seconds(took), seconds(smp.asked), seconds(smp.stop), seconds(smp.preflight), seconds(smp.up), seconds(smp.registered), seconds(smp.remedy), note)
}

// count is how many samples of change were taken.
func (r *latencyRun) count(change string) int {
	n := 0
	for _, s := range r.samples {
		if s.change == change {
			n++
		}
	}
	return n
}

// lastStart is the kubelet's last start, by the scripts or the harness.
func (r *latencyRun) lastStart() time.Time {
	last := r.k.Started
	for _, c := range r.k.callsSince(r.k.Started) {
		if c.what == "start" && c.at.After(last) {
			last = c.at
		}
	}
	return last
}

// judgePending checks what the last change caused until now: exactly one
// restart, and (within the spam filter's burst) one CapacityDrift and one
// Remediated Event and no failed, withheld or refused remedy; and records
// its writes and Events.
func (r *latencyRun) judgePending(t *testing.T) {
	t.Helper()
	p := r.pending
	if p == nil {
		return
	}
	r.pending = nil
	if why := r.k.oneSupervisedRestart(p.tw); why != "" {
		t.Errorf("%s, %s, until the next change: %s", r.state, p.change, why)
	}
	p.writes = hotplugdWrites(t, r.d) - p.writes0
	p.events = eventCounts(t, r.s).since(p.events0)
	if len(r.samples) > spamBurst { // changes this hotplugd has remedied
		return
	}
	if why := notRemediatedOnce(p.events); why != "" {
		t.Errorf("%s, %s: %s", r.state, p.change, why)
	}
}

// finish judges the last change once hotplugd's writes have settled.
func (r *latencyRun) finish(t *testing.T) {
	t.Helper()
	settleWrites(t, r.d)
	r.judgePending(t)
}

// report logs the samples' distributions, per change and pooled per
// incident and over all changes, and adds a row per change and one for all
// of them to the results table.
func (r *latencyRun) report(t *testing.T, hugeUp, hugeDown, cpuOff, cpuOn string, repeats int) {
	t.Helper()
	groups := []struct {
		label   string
		changes []string
		row     bool
	}{
		{hugeUp, []string{hugeUp}, true},
		{hugeDown, []string{hugeDown}, true},
		{cpuOff, []string{cpuOff}, true},
		{cpuOn, []string{cpuOn}, true},
		{"hugepages, both ways", []string{hugeUp, hugeDown}, false},
		{"cpu1, both ways", []string{cpuOff, cpuOn}, false},
		{"every change", []string{hugeUp, hugeDown, cpuOff, cpuOn}, true},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d samples per change (p50 nearest rank; p99 of fewer than 100 samples is the largest)\n", r.state, repeats)
	fmt.Fprintln(&b, "| change | n | change -> Node correct p50 | p99 | min | restart asked p50 / p99 | kubelet stop p50 / p99 | preflight p50 | kubelet start -> Node correct p50 / p99 | kubelet start -> registered p50 / p99 | restarts | writes per change | goals (p50 <= 1.5 s, p99 <= 2.5 s) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, g := range groups {
		var took, asked, stop, pre, up, reg, probed []time.Duration
		writes, restarts, updates := 0.0, 0, 0
		events := eventCount{}
		fields := map[string]int{}
		for i, s := range r.samples {
			if !slices.Contains(g.changes, s.change) {
				continue
			}
			took, asked, stop, pre, up = append(took, s.took), append(asked, s.asked), append(stop, s.stop), append(pre, s.preflight), append(up, s.up)
			probed, reg = append(probed, s.probed), append(reg, s.registered)
			writes += s.writes
			updates += s.podUpdates
			for f, n := range s.podFields {
				fields[f] += n
			}
			for reason, n := range s.events {
				events[reason] += n
			}
			// The kubelet's starts from this change to the next (exactly
			// one was asserted).
			end := time.Now()
			if i+1 < len(r.samples) {
				end = r.samples[i+1].tw
			}
			restarts += startsBetween(r.k, s.tw, end)
		}
		if len(took) == 0 {
			continue
		}
		p50, p99 := percentile(took, 50), percentile(took, 99)
		perChange := float64(int(writes/float64(len(took))*10+0.5)) / 10
		goals := fmt.Sprintf("p50 %s, p99 %s", goalWord(p50, latencyGoalP50), goalWord(p99, latencyGoalP99))
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s / %s | %s / %s | %s | %s / %s | %s / %s | %d | %.1f | %s |\n", g.label, len(took),
			seconds(p50), seconds(p99), seconds(slices.Min(took)),
			seconds(percentile(asked, 50)), seconds(percentile(asked, 99)), seconds(percentile(stop, 50)), seconds(percentile(stop, 99)),
			seconds(percentile(pre, 50)), seconds(percentile(up, 50)), seconds(percentile(up, 99)),
			seconds(percentile(reg, 50)), seconds(percentile(reg, 99)), restarts, perChange, goals)
		if !g.row {
			continue
		}
		note := fmt.Sprintf("%d samples, p99 = the largest; min %s; restart asked +%s (p50), kubelet stop %s / %s, preflight %s, kubelet start -> Node correct %s / %s (p50 / p99; start -> registered %s / %s); goals: %s; events %s",
			len(took), seconds(slices.Min(took)), seconds(percentile(asked, 50)), seconds(percentile(stop, 50)), seconds(percentile(stop, 99)),
			seconds(percentile(pre, 50)), seconds(percentile(up, 50)), seconds(percentile(up, 99)), seconds(percentile(reg, 50)), seconds(percentile(reg, 99)),
			goals, events.String())
		if r.load != nil {
			note += fmt.Sprintf("; pods: every one unchanged and Ready throughout, %d pod updates seen in %d remedies, probes resumed %s after the kubelet's start (p50)",
				updates, len(took), seconds(percentile(probed, 50)))
			if updates > 0 {
				note += "; the updates changed " + countsString(fields)
			}
		}
		results.add(result{scenario: "12 latency", side: "hotplugd, " + r.state, change: g.label,
			correct: fmt.Sprintf("p50 %s, p99 %s", seconds(p50), seconds(p99)), restarts: restarts, writes: perChange, note: note})
	}
	t.Logf("latency:\n%s", b.String())
}

// startsBetween counts the kubelet's starts in [from, to).
func startsBetween(k *kubelet, from, to time.Time) int {
	n := 0
	for _, c := range k.callsSince(from) {
		if c.what == "start" && c.at.Before(to) {
			n++
		}
	}
	return n
}

// percentile is the nearest-rank p-th percentile of ds (p99 of fewer than
// 100 samples is the largest).
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// goalWord says whether took met goal: reported, never a failure.
func goalWord(took, goal time.Duration) string {
	if took <= goal {
		return "met"
	}
	return fmt.Sprintf("missed by %s", seconds(took-goal))
}

// klogTime is the time of a klog line ("I1127 12:13:14.123456 ..."), in
// the year of ref.
func klogTime(line string, ref time.Time) (time.Time, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f[0]) != 5 {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", f[0][1:]+" "+f[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	return at.AddDate(ref.Year(), 0, 0), true
}
