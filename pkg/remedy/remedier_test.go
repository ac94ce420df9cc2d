package remedy

import (
	"context"
	"errors"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// fakeNode is the node reporter as the remedy sees it.
type fakeNode struct {
	mu sync.Mutex
	st nodepatch.State
	ch chan struct{}
}

func newFakeNode(drift nodepatch.Drift) *fakeNode {
	p := nodepatch.Prediction{}
	return &fakeNode{st: nodepatch.State{Node: &v1.Node{}, Prediction: &p, Drift: drift}, ch: make(chan struct{})}
}

func (f *fakeNode) State() nodepatch.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

func (f *fakeNode) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

func (f *fakeNode) setDrift(d nodepatch.Drift) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.Drift = d
	close(f.ch)
	f.ch = make(chan struct{})
}

func (f *fakeNode) setPrediction(p nodepatch.Prediction) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st.Prediction = &p
	close(f.ch)
	f.ch = make(chan struct{})
}

// reasons are the journal entries' reasons (what the reporter would say).
func (r *rig) reasons() []string {
	var out []string
	for _, e := range r.journal.Attempts() {
		out = append(out, e.Reason)
	}
	return out
}

// fakeKubelet records stops and starts; a start "restarts the kubelet",
// which then reports the machine when fixes is true.
type fakeKubelet struct {
	mu    sync.Mutex
	calls []string
	node  *fakeNode
	fixes bool
	// seen is the cpu_manager_state content at each start, phases the
	// journal's phase then.
	seen    []string
	phases  []journal.Phase
	path    string
	journal *journal.Journal
}

func (k *fakeKubelet) Stop(context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, "stop")
	return nil
}

func (k *fakeKubelet) Start(context.Context) error {
	k.mu.Lock()
	k.calls = append(k.calls, "start")
	b, _ := os.ReadFile(k.path)
	k.seen = append(k.seen, string(b))
	if k.journal != nil {
		if u := k.journal.Underway(); u != nil {
			k.phases = append(k.phases, u.Phase)
		}
	}
	fixes := k.fixes
	k.mu.Unlock()
	if fixes {
		k.node.setDrift(nil)
	}
	return nil
}

func (k *fakeKubelet) String() string { return "fake kubelet" }

func (k *fakeKubelet) Calls() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

type rig struct {
	t       *testing.T
	clock   *testingclock.FakeClock
	node    *fakeNode
	kubelet *fakeKubelet
	m       *Remedier
	mu      sync.Mutex
	isBusy  bool
	state   string // cpu_manager_state path
	podLogs string // the kubelet's podLogsDir
	facts   *fixedKubelet
	journal *journal.Journal
	stop    func()
	old     string // the state file before the test's change
	idleCh  chan struct{}
}

// fixedKubelet is a kubelet that never changes; gone: none is running
// (discovery finds nothing), as after a stop.
type fixedKubelet struct {
	mu       sync.Mutex
	f        *kubeletwatch.Facts
	gone     bool
	refreshs int
}

func (k *fixedKubelet) Current() *kubeletwatch.Facts {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gone {
		return &kubeletwatch.Facts{Limits: []string{"no kubelet running yet: capacity only"}}
	}
	return k.f
}

// Changed never fires: the facts are fixed.
func (k *fixedKubelet) Changed() <-chan struct{} { return nil }

func (k *fixedKubelet) Refresh(context.Context) *kubeletwatch.Facts {
	k.mu.Lock()
	k.refreshs++
	k.mu.Unlock()
	return k.Current()
}

// newRig: a 16-CPU machine, a static-policy kubelet whose state file was
// written for 8 CPUs (the CPU-upgrade incident), drift cpu 8 -> 16.
func newRig(t *testing.T, cpus int, change func(*Options)) *rig {
	t.Helper()
	return newRigWith(t, cpus, nil, nil, change)
}

// newRigWithJournal is newRig with journal j; prepare sees the rig before
// the remedier runs.
func newRigWithJournal(t *testing.T, cpus int, j *journal.Journal, prepare func(*rig)) *rig {
	t.Helper()
	return newRigWith(t, cpus, j, prepare, nil)
}

func newRigWith(t *testing.T, cpus int, j *journal.Journal, prepare func(*rig), change func(*Options)) *rig {
	t.Helper()
	root := t.TempDir()
	if err := fixturegen.OneNode(cpus, 8<<20, 0).WriteDir(root); err != nil {
		t.Fatal(err)
	}
	fs := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	// Its own pod log directory, not this machine's /var/log/pods.
	podLogs := t.TempDir()
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\npodLogsDir: " + podLogs + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	kubeletRoot := t.TempDir()
	state := filepath.Join(kubeletRoot, preflight.CPUManagerState)
	b, err := os.ReadFile("../cpumgr/testdata/c03-static-8cpu-2entries.cpu_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(state, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, clock: testingclock.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)), state: state, podLogs: podLogs}
	if r.journal = j; j == nil {
		if r.journal, err = journal.Open(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	r.node = newFakeNode(cpuDrift)
	r.kubelet = &fakeKubelet{node: r.node, fixes: true, path: state}
	r.facts = &fixedKubelet{f: &kubeletwatch.Facts{
		Kubelet:  &kubeletconfig.Kubelet{Config: cfg, RootDir: kubeletRoot, Cmdline: []string{"--config", "test"}},
		Version:  kubeletversion.MustParse("v1.36.3"),
		Release:  kubeletversion.ByMinor(36),
		StateDir: kubeletRoot,
	}}
	r.kubelet.journal = r.journal
	if prepare != nil {
		prepare(r)
	}
	o := Options{
		Mode: ModeRestartKubelet, Settle: 3 * time.Second, Interval: 10 * time.Minute, Timeout: 300 * time.Millisecond,
		Kubelet: r.facts, Journal: r.journal,
		Control: r.kubelet, Node: r.node, Snapshot: fs.Snapshot,
		Busy:  func() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.isBusy },
		Clock: r.clock,
	}
	if change != nil {
		change(&o)
	}
	if r.m, err = New(o); err != nil {
		t.Fatal(err)
	}
	r.run()
	return r
}

// run runs the remedier until the test ends or r.stop.
func (r *rig) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.m.Run(ctx) }()
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				r.t.Error(err)
			}
		})
	}
	r.t.Cleanup(r.stop)
}

func (r *rig) setBusy(b bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case b && !r.isBusy:
		r.idleCh = make(chan struct{})
	case !b && r.isBusy && r.idleCh != nil:
		close(r.idleCh)
	}
	r.isBusy = b
}

// idle is the daemon's Idle.
func (r *rig) idle() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idleCh == nil {
		r.idleCh = make(chan struct{})
		close(r.idleCh)
	}
	return r.idleCh
}

// advance steps the fake clock once the remedy is waiting on it.
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !r.clock.HasWaiters() {
		if time.Now().After(deadline) {
			r.t.Fatal("the remedy never waited on the clock")
		}
		time.Sleep(time.Millisecond)
	}
	r.clock.Step(d)
}

// attempts waits until n attempts were made (and no more for a moment).
func (r *rig) attempts(n int) []Attempt {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for len(r.m.Attempts()) < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	a := r.m.Attempts()
	if len(a) != n {
		r.t.Fatalf("%d attempts, want %d: %+v", len(a), n, a)
	}
	return a
}

func TestOneRestartPerSettledChange(t *testing.T) {
	r := newRig(t, 16, nil)
	r.advance(2 * time.Second)
	r.attempts(0) // not settled yet
	r.advance(time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeRemediated {
		t.Fatalf("outcome %s (%v)", a[0].Outcome, a[0].Err)
	}
	if diff := cmp.Diff([]string{"stop", "start"}, r.kubelet.Calls()); diff != "" {
		t.Errorf("kubelet calls (-want +got):\n%s", diff)
	}
	// The kubelet started with the repaired file.
	if !strings.Contains(r.kubelet.seen[0], `"defaultCpuSet":"0-1,6-15"`) {
		t.Errorf("the kubelet started with %s", r.kubelet.seen[0])
	}
	if diff := cmp.Diff([]string{nodepatch.ReasonRemediated}, r.reasons()); diff != "" {
		t.Errorf("journal entries (-want +got):\n%s", diff)
	}
	// The restart was under way (the reporter holds its writes) from the
	// stop to the start.
	if diff := cmp.Diff([]journal.Phase{journal.PhaseStarting}, r.kubelet.phases); diff != "" {
		t.Errorf("journal phase at the kubelet's start (-want +got):\n%s", diff)
	}
	if u := r.journal.Underway(); u != nil {
		t.Errorf("still under way: %+v", u)
	}
	// Nothing more, ever, while the Node matches.
	r.clock.Step(time.Hour)
	r.attempts(1)
}

func TestNoRestartDuringBurst(t *testing.T) {
	r := newRig(t, 16, nil)
	r.setBusy(true)
	for range 50 {
		r.advance(time.Second) // 50 s of a burst that never goes quiet
	}
	r.attempts(0)
	r.setBusy(false)
	r.m.Activity(r.clock.Now()) // the burst's last event
	r.advance(3 * time.Second)
	r.attempts(1)
}

func TestActivityRestartsTheSettleTime(t *testing.T) {
	r := newRig(t, 16, nil)
	r.advance(2 * time.Second)
	r.m.Activity(r.clock.Now())
	r.advance(2 * time.Second)
	r.attempts(0)
	r.advance(time.Second)
	r.attempts(1)
}

func TestVerificationFailureRollsBackAndIsRateLimited(t *testing.T) {
	r := newRig(t, 16, nil)
	r.kubelet.fixes = false // the restarted kubelet still reports the old capacity
	old, _ := os.ReadFile(r.state)
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed || a[0].Err == nil || !strings.Contains(a[0].Err.Error(), "still reports capacity cpu 2 -> 1") {
		t.Fatalf("attempt %+v, want failed verification", a[0])
	}
	// stop, start (repaired), then the rollback: stop, start as it was,
	// but with the repaired file: the old one (8 CPUs on this 16-CPU
	// machine) is one the kubelet refuses, and a rollback never puts back a
	// file that keeps the kubelet down.
	if diff := cmp.Diff([]string{"stop", "start", "stop", "start"}, r.kubelet.Calls()); diff != "" {
		t.Errorf("kubelet calls (-want +got):\n%s", diff)
	}
	if got, _ := os.ReadFile(r.state); string(got) == string(old) || !strings.Contains(string(got), `"defaultCpuSet":"0-1,6-15"`) {
		t.Errorf("state file after the rollback:\n%s\nwant the repaired one", got)
	}
	if r.kubelet.seen[1] != r.kubelet.seen[0] {
		t.Errorf("the rollback started the kubelet with %s", r.kubelet.seen[1])
	}
	if diff := cmp.Diff([]string{nodepatch.ReasonRemediationFailed}, r.reasons()); diff != "" {
		t.Errorf("journal entries (-want +got):\n%s", diff)
	}
	if e := r.journal.Attempts(); len(e) != 1 || !e[0].Warning || !strings.Contains(e[0].Message, "rolled back") {
		t.Errorf("journal entry %+v, want a warning that says rolled back", e)
	}
	// Not repeated for the same machine and configuration, however long.
	time.Sleep(20 * time.Millisecond)
	r.clock.Step(time.Hour)
	r.attempts(1)
	// A new prediction (the machine changed again) is tried once more,
	// after the rate limit. The machine's event comes first, as in the
	// daemon (a uevent, then the re-read that predicts anew): the other
	// way round, the remedier could decide on the new prediction before
	// the event and restart at once, without waiting on the clock.
	r.m.Activity(r.clock.Now())
	r.node.setPrediction(nodepatch.Prediction{Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("15")}})
	r.advance(3 * time.Second)
	r.attempts(2)
}

// TestNeedsPersonLeavesTheKubeletAlone: the pinned containers' CPUs are
// gone; the kubelet is left running, and the NeedsDrain entry (the Node's
// Event and condition) names the pod to drain, from the kubelet's pod log
// directory, with its container and UID.
func TestNeedsPersonLeavesTheKubeletAlone(t *testing.T) {
	const podDB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd" // db on CPUs 4-5
	r := newRigWith(t, 4, nil, func(r *rig) {
		if err := os.MkdirAll(filepath.Join(r.podLogs, "databases_db-0.primary_"+podDB, "db"), 0o755); err != nil {
			t.Fatal(err)
		}
	}, nil)
	old, _ := os.ReadFile(r.state)
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeNeedsPerson {
		t.Fatalf("outcome %s", a[0].Outcome)
	}
	if calls := r.kubelet.Calls(); len(calls) != 0 {
		t.Errorf("kubelet touched: %v", calls)
	}
	if got, _ := os.ReadFile(r.state); string(got) != string(old) {
		t.Error("state file changed")
	}
	if diff := cmp.Diff([]string{nodepatch.ReasonNeedsDrain}, r.reasons()); diff != "" {
		t.Errorf("journal entries (-want +got):\n%s", diff)
	}
	e := r.journal.Attempts()
	for _, want := range []string{
		"cpu_manager_state: cpumgr: assignments cannot be kept: drain their pods first: 1 assignment(s): pod databases/db-0.primary (uid " + podDB + ") container db 4-5: CPUs 4-5 are offline; ",
		"; what to do: drain pods databases/db-0.primary; drain the node (kubectl drain), then run hotplugd preflight --allow-drop-assignments",
	} {
		if !strings.Contains(e[0].Message, want) {
			t.Errorf("the entry does not say %q:\n%s", want, e[0].Message)
		}
	}
}

// withEarlierRestart is a journal with a remediated restart (for another
// key) a minute before the rig's clock: the rate limit (10 minutes) holds
// the next restart back.
func withEarlierRestart(t *testing.T) *journal.Journal {
	t.Helper()
	j, err := journal.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	if err := j.Finish(journal.Entry{Key: "earlier", Start: t0.Add(-time.Minute), Outcome: OutcomeRemediated, Reason: nodepatch.ReasonRemediated}); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestRateLimitedNeedsPersonIsReportedAtOnce: a restart a minute ago holds
// the next one back for nine more; state files that need a person are
// reported once the machine settles all the same (the rate limit is against
// restart loops, and no restart is made), and the kubelet is left alone.
func TestRateLimitedNeedsPersonIsReportedAtOnce(t *testing.T) {
	const podDB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd" // db on CPUs 4-5
	r := newRigWithJournal(t, 4, withEarlierRestart(t), func(r *rig) {
		if err := os.MkdirAll(filepath.Join(r.podLogs, "databases_db-0.primary_"+podDB, "db"), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	old, _ := os.ReadFile(r.state)
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeNeedsPerson {
		t.Fatalf("outcome %s, want %s within the rate limit", a[0].Outcome, OutcomeNeedsPerson)
	}
	if calls := r.kubelet.Calls(); len(calls) != 0 {
		t.Errorf("kubelet touched: %v", calls)
	}
	if got, _ := os.ReadFile(r.state); string(got) != string(old) {
		t.Error("state file changed")
	}
	if diff := cmp.Diff([]string{nodepatch.ReasonRemediated, nodepatch.ReasonNeedsDrain}, r.reasons()); diff != "" {
		t.Errorf("journal entries (-want +got):\n%s", diff)
	}
	if e := r.journal.Attempts(); !strings.Contains(e[len(e)-1].Message, "drain pods databases/db-0.primary") {
		t.Errorf("the entry does not name the pod: %s", e[len(e)-1].Message)
	}
	// Not repeated when the interval is over.
	time.Sleep(20 * time.Millisecond)
	r.clock.Step(time.Hour)
	r.attempts(1)
}

// TestRateLimitedRestartWaits: within the rate limit, a drift a restart
// would fix is checked once and then waits: no stop, no start, no entry,
// until the interval is over; then the restart.
func TestRateLimitedRestartWaits(t *testing.T) {
	r := newRigWithJournal(t, 16, withEarlierRestart(t), nil)
	r.advance(3 * time.Second)
	r.attempts(0)
	if calls := r.kubelet.Calls(); len(calls) != 0 {
		t.Errorf("kubelet touched within the rate limit: %v", calls)
	}
	if n := len(r.journal.Attempts()); n != 1 {
		t.Errorf("%d journal entries, want only the earlier one", n)
	}
	r.facts.mu.Lock()
	checks := r.facts.refreshs
	r.facts.mu.Unlock()
	if checks != 1 {
		t.Errorf("the kubelet was judged %d times within the rate limit, want once", checks)
	}
	// The rest of the interval: 10 min after the earlier restart.
	r.advance(9*time.Minute - 3*time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeRemediated {
		t.Fatalf("outcome %s (%v)", a[0].Outcome, a[0].Err)
	}
	if diff := cmp.Diff([]string{"stop", "start"}, r.kubelet.Calls()); diff != "" {
		t.Errorf("kubelet calls (-want +got):\n%s", diff)
	}

	// The same drift again, within the interval that restart started: a
	// check made before it no longer stands (the state files may have
	// changed since), so it is judged once more, and waits.
	time.Sleep(20 * time.Millisecond)
	r.facts.mu.Lock()
	before := r.facts.refreshs
	r.facts.mu.Unlock()
	r.m.Activity(r.clock.Now())
	r.node.setDrift(cpuDrift)
	r.advance(3 * time.Second)
	r.attempts(1)
	time.Sleep(20 * time.Millisecond)
	r.facts.mu.Lock()
	checks = r.facts.refreshs - before
	r.facts.mu.Unlock()
	if checks != 1 {
		t.Errorf("the same key after a new restart was judged %d times within the rate limit, want once", checks)
	}
	if diff := cmp.Diff([]string{"stop", "start"}, r.kubelet.Calls()); diff != "" {
		t.Errorf("kubelet calls within the new interval (-want +got):\n%s", diff)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	r := newRig(t, 16, func(o *Options) { o.DryRun = true })
	old, _ := os.ReadFile(r.state)
	r.advance(3 * time.Second)
	if a := r.attempts(1); a[0].Outcome != OutcomeDryRun {
		t.Fatalf("outcome %s", a[0].Outcome)
	}
	if calls := r.kubelet.Calls(); len(calls) != 0 {
		t.Errorf("kubelet touched: %v", calls)
	}
	if got, _ := os.ReadFile(r.state); string(got) != string(old) {
		t.Error("state file changed")
	}
}

func TestReportOnly(t *testing.T) {
	for name, change := range map[string]func(*Options){
		"report mode": func(o *Options) { o.Mode = ModeReport },
		"kubelet of an unknown release": func(o *Options) {
			f := *o.Kubelet.Current()
			f.Release, f.Limits = nil, []string{"kubelet v1.38.0-alpha.0 is not a release hotplugd knows"}
			o.Kubelet = &fixedKubelet{f: &f}
		},
		"state files out of reach": func(o *Options) {
			f := *o.Kubelet.Current()
			f.StateDir = ""
			o.Kubelet = &fixedKubelet{f: &f}
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 16, change)
			time.Sleep(20 * time.Millisecond)
			r.clock.Step(time.Hour)
			r.attempts(0)
			if calls := r.kubelet.Calls(); len(calls) != 0 {
				t.Errorf("kubelet touched: %v", calls)
			}
		})
	}
}

func TestStopFailureStartsTheKubeletAgain(t *testing.T) {
	k := &failingKubelet{}
	r := newRig(t, 16, func(o *Options) { o.Control = k })
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed || !strings.Contains(a[0].Err.Error(), "stopping the kubelet") {
		t.Fatalf("attempt %+v", a[0])
	}
	if k.starts != 1 {
		t.Errorf("%d starts after a failed stop, want 1", k.starts)
	}
	// The files are left alone: the kubelet may still run.
	if a[0].Report.Results[0].Verdict != preflight.WouldRepair {
		t.Errorf("the state file was touched after a failed stop: %+v", a[0].Report.Results[0])
	}
}

// TestStopAndStartFailureSaysBoth: the start error after a failed stop is
// reported with it, not dropped (issue 11, point 5).
func TestStopAndStartFailureSaysBoth(t *testing.T) {
	k := &failingKubelet{startErr: errors.New("unit not found")}
	r := newRig(t, 16, func(o *Options) { o.Control = k })
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed || !strings.Contains(a[0].Err.Error(), "unit is masked") || !strings.Contains(a[0].Err.Error(), "unit not found") {
		t.Fatalf("attempt error %v, want both the stop's and the start's", a[0].Err)
	}
}

type failingKubelet struct {
	starts   int
	startErr error
}

func (k *failingKubelet) Stop(context.Context) error  { return errors.New("unit is masked") }
func (k *failingKubelet) Start(context.Context) error { k.starts++; return k.startErr }
func (k *failingKubelet) String() string              { return "failing kubelet" }

// TestSIGTERMAfterTheStopEndsWithTheKubeletRunning: hotplugd stopped (its
// context cancelled) right after the kubelet's stop still repairs, starts
// the kubelet and leaves the verification to the next hotplugd, which
// finishes it (issue 11, point 4).
func TestSIGTERMAfterTheStopEndsWithTheKubeletRunning(t *testing.T) {
	stopped := make(chan struct{})
	r := newRig(t, 16, func(o *Options) {
		o.Control = &hookKubelet{fakeKubelet: r2k(o), onStop: func() { close(stopped) }}
	})
	r.advance(3 * time.Second)
	<-stopped
	r.stop() // SIGTERM: returns only once the kubelet was started
	k := r.m.o.Control.(*hookKubelet)
	if diff := cmp.Diff([]string{"stop", "start"}, k.Calls()); diff != "" {
		t.Fatalf("kubelet calls (-want +got):\n%s", diff)
	}
	if !strings.Contains(k.seen[0], `"defaultCpuSet":"0-1,6-15"`) {
		t.Errorf("the kubelet started with %s", k.seen[0])
	}
	u := r.journal.Underway()
	if u == nil || u.Phase != journal.PhaseVerifying {
		t.Fatalf("journal under way %+v, want the verification left to the next hotplugd", u)
	}
	// The next hotplugd verifies: no further stop, the remedy recorded.
	j, err := journal.Open(filepath.Dir(r.journal.Path()))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := New(Options{Mode: ModeRestartKubelet, Settle: time.Second, Interval: 10 * time.Minute, Timeout: time.Second,
		Kubelet: r.facts, Journal: j, Control: k, Node: r.node, Snapshot: r.m.o.Snapshot, Clock: r.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m2.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(m2.Attempts()) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if a := m2.Attempts(); len(a) != 1 || a[0].Outcome != OutcomeRemediated {
		t.Fatalf("recovery attempts %+v", a)
	}
	if j.Underway() != nil {
		t.Errorf("still under way: %+v", j.Underway())
	}
	if calls := k.Calls(); slices.Contains(calls[2:], "stop") {
		t.Errorf("the recovery stopped the kubelet again: %v", calls)
	}
}

// r2k builds the rig's fake kubelet for a Control replacement.
func r2k(o *Options) *fakeKubelet { return o.Control.(*fakeKubelet) }

// hookKubelet calls onStop after each stop.
type hookKubelet struct {
	*fakeKubelet
	onStop func()
}

func (k *hookKubelet) Stop(ctx context.Context) error {
	err := k.fakeKubelet.Stop(ctx)
	if k.onStop != nil {
		k.onStop()
		k.onStop = nil
	}
	return err
}

// TestRecoverEachPhase: a journal left under way at each phase (hotplugd
// killed there) is finished by the next hotplugd before anything else: the
// kubelet ends up started on valid state files, the remedy recorded.
func TestRecoverEachPhase(t *testing.T) {
	for _, tt := range []struct {
		phase     journal.Phase
		repaired  bool // the state file was already rewritten
		wantCalls []string
		wantOut   Outcome
	}{
		{journal.PhaseStopping, false, []string{"stop", "start"}, OutcomeRemediated},
		{journal.PhaseRepairing, false, []string{"stop", "start"}, OutcomeRemediated},
		{journal.PhaseRepairing, true, []string{"stop", "start"}, OutcomeRemediated},
		{journal.PhaseStarting, true, []string{"stop", "start"}, OutcomeRemediated},
		{journal.PhaseVerifying, true, []string{"start"}, OutcomeRemediated},
		{journal.PhaseRollingBack, true, []string{"stop", "start"}, OutcomeFailed},
	} {
		name := string(tt.phase)
		if tt.repaired {
			name += ", file rewritten"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			j, err := journal.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			var r *rig
			r = newRigWithJournal(t, 16, j, func(r2 *rig) {
				r = r2
				at := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
				backup := statefile.BackupPath(r.state, at)
				old, _ := os.ReadFile(r.state)
				if tt.repaired {
					// As the killed hotplugd left it: the backup, the new file.
					b, err := statefile.Write(r.state, []byte(fixedState16), at)
					if err != nil || b != backup {
						t.Fatal(b, err)
					}
				}
				rec, err := recordKubelet(r.facts.f)
				if err != nil {
					t.Fatal(err)
				}
				if err := j.Begin(journal.Underway{Key: "k", Phase: tt.phase, Start: at, Files: []journal.FileBackup{{Path: r.state, Backup: backup}}, Kubelet: rec}); err != nil {
					t.Fatal(err)
				}
				r.old = string(old)
				// The kubelet reports the machine again only after a start.
				r.node.setDrift(cpuDrift)
				// The killed hotplugd may have stopped it: discovery finds
				// none, the journal says which kubelet it was.
				r.facts.gone = tt.phase != journal.PhaseVerifying
			})
			a := r.attempts(1)
			if a[0].Outcome != tt.wantOut {
				t.Fatalf("outcome %s (%v), want %s", a[0].Outcome, a[0].Err, tt.wantOut)
			}
			if diff := cmp.Diff(tt.wantCalls, r.kubelet.Calls()); diff != "" {
				t.Errorf("kubelet calls (-want +got):\n%s", diff)
			}
			got, _ := os.ReadFile(r.state)
			switch tt.wantOut {
			case OutcomeRemediated:
				if !strings.Contains(string(got), `"defaultCpuSet":"0-1,6-15"`) {
					t.Errorf("state file after recovery:\n%s", got)
				}
			case OutcomeFailed:
				// The old file is refused on this machine: kept repaired.
				if string(got) == r.old {
					t.Errorf("a state file the kubelet refuses was restored:\n%s", got)
				}
			}
			if j.Underway() != nil {
				t.Errorf("still under way: %+v", j.Underway())
			}
		})
	}
}

// fixedState16 is c03 repaired for 16 CPUs, as the remedy writes it.
const fixedState16 = `{"policyName":"static","defaultCpuSet":"0-1,6-15","entries":{"pod-a":{"c1":"2-3"},"pod-b":{"c2":"4-5"}},"checksum":0}`

// TestMalformedHealthzURLFailsCleanly: a healthz URL that cannot make a
// request is an error of the verification, not a panic (issue 11, point 5).
func TestMalformedHealthzURLFailsCleanly(t *testing.T) {
	r := newRig(t, 16, func(o *Options) {
		f := *o.Kubelet.Current()
		k := *f.Kubelet
		k.HealthzURL = "http://[::1:10248/healthz"
		f.Kubelet = &k
		o.Kubelet = &fixedKubelet{f: &f}
	})
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed || !strings.Contains(a[0].Err.Error(), "healthz URL") {
		t.Fatalf("attempt %+v", a[0])
	}
}

// TestFailedAttemptSurvivesRestarts: a failed remedy is not tried again by
// a new hotplugd with the same journal (a crash loop restarts nothing).
func TestFailedAttemptSurvivesRestarts(t *testing.T) {
	j, err := journal.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := newRigWithJournal(t, 16, j, func(r *rig) { r.kubelet.fixes = false })
	r.advance(3 * time.Second)
	if a := r.attempts(1); a[0].Outcome != OutcomeFailed {
		t.Fatalf("outcome %s", a[0].Outcome)
	}
	r.stop()
	for i := range 3 {
		j2, err := journal.Open(filepath.Dir(j.Path()))
		if err != nil {
			t.Fatal(err)
		}
		r2 := newRigWithJournal(t, 16, j2, func(r2 *rig) { r2.kubelet.fixes = false; r2.facts = r.facts })
		r2.clock.Step(time.Hour * time.Duration(i+1))
		time.Sleep(20 * time.Millisecond)
		r2.attempts(0)
		if calls := r2.kubelet.Calls(); len(calls) != 0 {
			t.Errorf("hotplugd restart %d touched the kubelet: %v", i+1, calls)
		}
		r2.stop()
	}
}

// TestIdleWakesTheRemedy: the end of a burst wakes the remedy through the
// daemon's Idle channel, with no polling (the fake clock is not stepped).
func TestIdleWakesTheRemedy(t *testing.T) {
	var r *rig
	r = newRigWith(t, 16, nil, func(r2 *rig) {
		r = r2
		r.setBusy(true)
		r.clock.Step(time.Minute) // settled long ago, but busy
	}, func(o *Options) { o.Idle, o.Settle = r.idle, 0 })
	time.Sleep(20 * time.Millisecond)
	r.attempts(0)
	r.setBusy(false)
	r.attempts(1)
}

// TestRollbackWithAFailedStopKeepsTheFiles: when the rollback's stop fails
// the kubelet may still run, and it writes its own state files: they are
// not restored under it; the kubelet is started (a no-op if it runs)
// (issue 11, point 5).
func TestRollbackWithAFailedStopKeepsTheFiles(t *testing.T) {
	k := &secondStopFails{}
	var r *rig
	r = newRigWith(t, 16, nil, func(r2 *rig) { r = r2; r.kubelet.fixes = false }, func(o *Options) {
		k.fakeKubelet = o.Control.(*fakeKubelet)
		o.Control = k
	})
	old, _ := os.ReadFile(r.state)
	r.advance(3 * time.Second)
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed {
		t.Fatalf("outcome %s (%v)", a[0].Outcome, a[0].Err)
	}
	if diff := cmp.Diff([]string{"stop", "start", "stop", "start"}, k.Calls()); diff != "" {
		t.Errorf("kubelet calls (-want +got):\n%s", diff)
	}
	if got, _ := os.ReadFile(r.state); string(got) == string(old) {
		t.Error("the state file was restored although the kubelet may have been running")
	}
}

// secondStopFails fails every stop after the first.
type secondStopFails struct {
	*fakeKubelet
	stops int
}

func (k *secondStopFails) Stop(ctx context.Context) error {
	k.stops++
	err := k.fakeKubelet.Stop(ctx)
	if k.stops > 1 {
		return errors.New("job for kubelet.service canceled")
	}
	return err
}

// TestRollbackRestoresOnlyWhatTheKubeletAccepts: the rollback's judge of a
// backup is the kubelet's start on the machine as it is now.
func TestRollbackRestoresOnlyWhatTheKubeletAccepts(t *testing.T) {
	// As in the DaemonSet, whose root file system is read-only: no /tmp.
	t.Setenv("TMPDIR", filepath.Join(t.TempDir(), "nonexistent"))
	r := newRig(t, 16, func(o *Options) { o.Mode = ModeReport })
	old, _ := os.ReadFile(r.state)
	if why := r.m.refusedOnThisMachine(r.facts.f, r.state, old); !strings.Contains(why, "would refuse") {
		t.Errorf("an 8-CPU file on 16 CPUs: %q, want the kubelet's refusal", why)
	}
	if why := r.m.refusedOnThisMachine(r.facts.f, r.state, []byte(fixedState16)); why != "" {
		t.Errorf("a file for these 16 CPUs refused: %s", why)
	}
}

// TestRecoverWithoutControlReportsAndLetsGo: a restart left under way that
// this hotplugd cannot finish (no kubelet control) is reported for a
// person, and the journal no longer holds the reporter's writes.
func TestRecoverWithoutControlReportsAndLetsGo(t *testing.T) {
	j, err := journal.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Begin(journal.Underway{Key: "k", Phase: journal.PhaseRepairing, Start: time.Now()}); err != nil {
		t.Fatal(err)
	}
	r := newRigWith(t, 16, j, nil, func(o *Options) { o.Mode, o.Control = ModeReport, nil })
	a := r.attempts(1)
	if a[0].Outcome != OutcomeFailed || !strings.Contains(a[0].Err.Error(), "make sure it runs") {
		t.Fatalf("attempt %+v", a[0])
	}
	if j.Underway() != nil {
		t.Errorf("still under way: %+v", j.Underway())
	}
	if e := j.Attempts(); len(e) != 1 || e[0].Reason != nodepatch.ReasonRemediationFailed {
		t.Errorf("journal entries %+v", e)
	}
}
