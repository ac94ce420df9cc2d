package remedy

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/procfs"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The remedy's tests run in a synctest bubble: time is the bubble's, and
// advances only when every goroutine of the test is durably blocked, so a
// wait of the remedy's (the settle time, the rate limit, the verification's
// timeout) passes in no real time and exactly.

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

func (f *fakeNode) set(change func(*nodepatch.State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(&f.st)
	close(f.ch)
	f.ch = make(chan struct{})
}

func (f *fakeNode) setDrift(d nodepatch.Drift) { f.set(func(s *nodepatch.State) { s.Drift = d }) }

func (f *fakeNode) setPrediction(p nodepatch.Prediction) {
	f.set(func(s *nodepatch.State) { s.Prediction = &p })
}

// fakeKubelet is the kubelet as discovered: fixed facts, whose process
// changes when the supervisor restarts it.
type fakeKubelet struct {
	mu       sync.Mutex
	f        kubeletwatch.Facts
	refreshs int
}

func (k *fakeKubelet) Current() *kubeletwatch.Facts {
	k.mu.Lock()
	defer k.mu.Unlock()
	f := k.f
	kk := *k.f.Kubelet
	f.Kubelet = &kk
	return &f
}

// Changed never fires: the remedy asks Refresh when it needs to know.
func (k *fakeKubelet) Changed() <-chan struct{} { return nil }

func (k *fakeKubelet) Refresh(context.Context) *kubeletwatch.Facts {
	k.mu.Lock()
	k.refreshs++
	k.mu.Unlock()
	return k.Current()
}

func (k *fakeKubelet) newProcess() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.f.Kubelet.PID++
	k.f.Start += 1000
}

func (k *fakeKubelet) refreshes() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refreshs
}

// fakeSupervisor is systemd as the remedy sees it: Restart queues one job
// that runs to its end on its own (a goroutine of the supervisor's, not of
// the caller's): stop, the unit's ExecStartPre (hotplugd preflight,
// repairing the state files with the machine as it is then), start, the
// new kubelet reporting the machine when fixes. Restart returns when the
// job is done, or when the caller's ctx ends (the job goes on).
type fakeSupervisor struct {
	r *rig

	mu       sync.Mutex
	calls    []string
	fixes    bool
	err      error         // Restart's error, after the job
	hold     chan struct{} // when set, the job waits for it after the stop
	noop     bool          // the job does nothing (a supervisor that refused)
	down     bool          // the job stops the kubelet and its start fails
	reports  []preflight.Report
	atRepair func() // runs between the stop and preflight
}

func (s *fakeSupervisor) String() string { return "fake supervisor" }

func (s *fakeSupervisor) Restart(ctx context.Context) error {
	s.mu.Lock()
	s.calls = append(s.calls, "restart")
	hold, fixes, noop, down, atRepair := s.hold, s.fixes, s.noop, s.down, s.atRepair
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { // systemd's job
		defer close(done)
		if noop {
			return
		}
		if down {
			s.r.kubelet.mu.Lock()
			s.r.kubelet.f.Kubelet.PID, s.r.kubelet.f.Start = 0, 0
			s.r.kubelet.mu.Unlock()
			return
		}
		if hold != nil {
			<-hold
		}
		if atRepair != nil {
			atRepair()
		}
		rep := s.r.preflightNow(false)
		s.mu.Lock()
		s.reports = append(s.reports, rep)
		s.mu.Unlock()
		s.r.kubelet.newProcess()
		if fixes {
			s.r.node.setDrift(nil)
		}
	}()
	select {
	case <-done:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *fakeSupervisor) Start(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "start")
	return nil
}

func (s *fakeSupervisor) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

type rig struct {
	t          *testing.T
	node       *fakeNode
	kubelet    *fakeKubelet
	supervisor *fakeSupervisor
	m          *Remedier
	o          Options
	fs         topology.FS
	root       string // the fixture machine
	state      string // cpu_manager_state path
	podLogs    string // the kubelet's podLogsDir
	journal    *journal.Journal
	cancel     context.CancelFunc
	done       chan error
}

// rigOptions shape a rig.
type rigOptions struct {
	cpus    int
	journal *journal.Journal
	// prepare sees the rig before the remedier is made.
	prepare func(*rig)
	// change sees the options.
	change func(*Options)
}

// newRig: a machine of cpus CPUs, a static-policy kubelet 1.36 whose state
// file was written for 8 CPUs (the CPU-upgrade incident), drift cpu 2 -> 1
// on the Node; the remedier runs until the test ends. Call it inside the
// bubble.
func newRig(t *testing.T, ro rigOptions) *rig {
	t.Helper()
	if ro.cpus == 0 {
		ro.cpus = 16
	}
	root := t.TempDir()
	if err := fixturegen.OneNode(ro.cpus, 8<<20, 0).WriteDir(root); err != nil {
		t.Fatal(err)
	}
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
	r := &rig{t: t, root: root, state: state, podLogs: podLogs, journal: ro.journal,
		fs: topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))}
	if r.journal == nil {
		if r.journal, err = journal.Open(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	r.node = newFakeNode(cpuDrift)
	r.kubelet = &fakeKubelet{f: kubeletwatch.Facts{
		Kubelet:  &kubeletconfig.Kubelet{PID: 4242, Config: cfg, RootDir: kubeletRoot, Cmdline: []string{"/usr/bin/kubelet", "--config", "test"}},
		Start:    100,
		Version:  kubeletversion.MustParse("v1.36.3"),
		Release:  kubeletversion.ByMinor(36),
		StateDir: kubeletRoot,
	}}
	r.supervisor = &fakeSupervisor{r: r, fixes: true}
	if ro.prepare != nil {
		ro.prepare(r)
	}
	r.o = Options{
		Mode: ModeRestartKubelet, Settle: 3 * time.Second, Interval: 10 * time.Minute, Timeout: 30 * time.Second,
		Kubelet: r.kubelet, Journal: r.journal,
		Control: r.supervisor, Node: r.node, Snapshot: r.fs.Snapshot,
	}
	if ro.change != nil {
		ro.change(&r.o)
	}
	r.start()
	return r
}

// start runs a Remedier on the rig's options until the test ends or stop.
func (r *rig) start() {
	var err error
	if r.m, err = New(r.o); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	m := r.m
	go func() { r.done <- m.Run(ctx) }()
	r.t.Cleanup(r.stop)
}

// stop cancels the remedier and waits for Run to return (hotplugd's
// SIGTERM).
func (r *rig) stop() {
	if r.cancel == nil {
		return
	}
	r.cancel()
	if err := <-r.done; err != nil {
		r.t.Error(err)
	}
	r.cancel = nil
}

// preflightNow is hotplugd preflight in the kubelet's start: the machine
// as it is now, the kubelet's configuration.
func (r *rig) preflightNow(dry bool) preflight.Report {
	snap, err := r.fs.Snapshot()
	if err != nil {
		r.t.Error(err)
		return preflight.Report{}
	}
	f := r.kubelet.Current()
	pf := preflightOptions(f, time.Now())
	pf.DryRun = dry
	return preflight.Run(snap, pf)
}

// after lets d pass and everything settle.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// reasons are the journal entries' reasons (what the reporter would say).
func (r *rig) reasons() []string {
	var out []string
	for _, e := range r.journal.Attempts() {
		out = append(out, e.Reason)
	}
	return out
}

func (r *rig) attempts(n int) []Attempt {
	r.t.Helper()
	synctest.Wait()
	a := r.m.Attempts()
	if len(a) != n {
		r.t.Fatalf("%d attempts, want %d: %+v", len(a), n, a)
	}
	return a
}

func (r *rig) stateFile() string {
	b, err := os.ReadFile(r.state)
	if err != nil {
		r.t.Fatal(err)
	}
	return string(b)
}

// TestOneRestartPerSettledChange: one restart, asked of the supervisor once
// the machine has settled; the state file is repaired by preflight in the
// kubelet's start (the supervisor's job), never by the daemon; the journal
// says "restarting" while the supervisor works; nothing more while the Node
// matches.
func TestOneRestartPerSettledChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var atRepair []journal.Phase
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.supervisor.atRepair = func() {
				if u := r.journal.Underway(); u != nil {
					atRepair = append(atRepair, u.Phase)
				}
			}
		}})
		old := r.stateFile()
		after(2 * time.Second)
		r.attempts(0) // not settled yet
		if r.stateFile() != old {
			t.Fatal("the state file changed before the restart")
		}
		after(time.Second)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeRemediated || !a[0].Restarted {
			t.Fatalf("attempt %+v, want remediated", a[0])
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
		if got := r.stateFile(); !strings.Contains(got, `"defaultCpuSet":"0-1,6-15"`) {
			t.Errorf("the kubelet started with %s", got)
		}
		if diff := cmp.Diff([]journal.Phase{journal.PhaseRestarting}, atRepair); diff != "" {
			t.Errorf("journal phase during the supervisor's job (-want +got):\n%s", diff)
		}
		e := r.journal.Attempts()
		if len(e) != 1 || e[0].Reason != nodepatch.ReasonRemediated || !e[0].Restarted ||
			!strings.Contains(e[0].Message, "hotplugd preflight repaired cpu_manager_state in its start") {
			t.Errorf("journal %+v", e)
		}
		if u := r.journal.Underway(); u != nil {
			t.Errorf("still under way: %+v", u)
		}
		after(time.Hour)
		r.attempts(1)
	})
}

// TestTheDaemonWritesNoStateFile (issue 19, point 4): a supervisor whose
// job does nothing; the daemon itself writes nothing, and the remedy fails
// on "not restarted" without touching the kubelet again.
func TestTheDaemonWritesNoStateFile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.noop = true }})
		old := r.stateFile()
		after(3 * time.Second)
		after(time.Minute)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeFailed || !errors.Is(a[0].Err, errNotRestarted) {
			t.Fatalf("attempt %+v, want failed: not restarted", a[0])
		}
		if r.stateFile() != old {
			t.Error("the daemon wrote the state file")
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
		matches, _ := filepath.Glob(r.state + ".hotplugd-backup-*")
		if len(matches) != 0 {
			t.Errorf("backups written by the daemon: %v", matches)
		}
	})
}

// TestVerificationFailureIsNotRolledBack: the restarted kubelet still
// reports the old capacity; the remedy fails, the kubelet is left to its
// supervisor (one restart, no stop, no start), and the key is not tried
// again; a new prediction is, after the rate limit.
func TestVerificationFailureIsNotRolledBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.fixes = false }})
		after(3 * time.Second)
		after(r.o.Timeout)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeFailed || a[0].Err == nil || !strings.Contains(a[0].Err.Error(), "still reports capacity cpu 2 -> 1") {
			t.Fatalf("attempt %+v, want failed verification", a[0])
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
		if e := r.journal.Attempts(); len(e) != 1 || !e[0].Warning || !strings.Contains(e[0].Message, "left to its supervisor") {
			t.Errorf("journal entry %+v", e)
		}
		after(time.Hour)
		r.attempts(1)
		r.m.Activity(time.Now())
		r.node.setPrediction(nodepatch.Prediction{Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("15")}})
		after(3 * time.Second)
		after(r.o.Timeout)
		r.attempts(2)
	})
}

// TestAPIOutageDuringVerificationIsNotAKubeletFailure: the kubelet was
// restarted and runs; the Node cannot be read: unverified, not failed.
func TestAPIOutageDuringVerificationIsNotAKubeletFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.supervisor.fixes = false
			r.supervisor.atRepair = func() { r.node.set(func(s *nodepatch.State) { s.Node = nil }) }
		}})
		after(3 * time.Second)
		after(r.o.Timeout)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeUnverified || !errors.Is(a[0].Err, errNodeUnknown) || !a[0].Restarted {
			t.Fatalf("attempt %+v, want unverified", a[0])
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
	})
}

// TestKilledWhileTheSupervisorRestarts (issue 19, points 5 and 6):
// hotplugd is stopped while the supervisor's job runs. The job goes on to
// the kubelet's start without it; the next hotplugd only verifies (no
// restart, no stop, no start) and records the remedy.
func TestKilledWhileTheSupervisorRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold := make(chan struct{})
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.hold = hold }})
		after(3 * time.Second)
		if u := r.journal.Underway(); u == nil || u.Phase != journal.PhaseRestarting || u.Before == nil || u.Before.PID != 4242 {
			t.Fatalf("under way %+v, want restarting from PID 4242", u)
		}
		r.stop() // SIGTERM while systemd's job runs
		if a := r.m.Attempts(); len(a) != 1 || a[0].Outcome != OutcomeInterrupted {
			t.Fatalf("attempts %+v, want one interrupted", a)
		}
		close(hold) // the job finishes without hotplugd
		synctest.Wait()
		if !strings.Contains(r.stateFile(), `"defaultCpuSet":"0-1,6-15"`) {
			t.Error("the supervisor's start did not repair the state file")
		}
		// The next hotplugd.
		r.start()
		a := r.attempts(1)
		if a[0].Outcome != OutcomeRemediated || !strings.Contains(a[0].Message, "a previous hotplugd asked for is verified") {
			t.Fatalf("attempt %+v, want the restart verified", a[0])
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
		if u := r.journal.Underway(); u != nil {
			t.Errorf("still under way: %+v", u)
		}
	})
}

// TestKilledBeforeTheRestartWasAsked: the journal says restarting but the
// supervisor was never asked (hotplugd died in between): the kubelet that
// ran still runs; the next hotplugd concludes nothing about the key
// (interrupted, not failed), asks nothing of the supervisor for the record,
// and the drift is remedied again after the rate limit.
func TestKilledBeforeTheRestartWasAsked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := journal.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Begin(journal.Underway{Key: "k", Phase: journal.PhaseRestarting, Start: time.Now().Add(-time.Second), Before: &journal.Process{PID: 4242, Start: 100}}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j})
		synctest.Wait()
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Fatalf("the recovery asked the supervisor: %v", calls)
		}
		after(r.o.Timeout)
		a := r.m.Attempts()
		if len(a) == 0 || a[0].Outcome != OutcomeInterrupted || !errors.Is(a[0].Err, errNotRestarted) {
			t.Fatalf("attempts %+v, want the record interrupted", a)
		}
		if e := r.journal.Attempts(); len(e) == 0 || e[0].Restarted {
			t.Errorf("journal %+v: a restart that never happened counts against the budget", e)
		}
		// The interrupted record concluded nothing: the drift is
		// remedied once the rate limit from that record's start is over.
		after(10 * time.Minute)
		after(time.Second)
		a = r.m.Attempts()
		if len(a) != 2 || a[1].Outcome != OutcomeRemediated {
			t.Fatalf("attempts %+v, want the drift remedied after the interrupted record", a)
		}
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
	})
}

// TestKilledBeforeTheRestartNoProcessKnown: the same with --kubelet-config
// (no kubelet process known): the next hotplugd cannot tell whether the
// restart was asked, and concludes nothing either.
func TestKilledBeforeTheRestartNoProcessKnown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := journal.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Begin(journal.Underway{Key: "k", Phase: journal.PhaseRestarting, Start: time.Now().Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j, change: func(o *Options) { o.Mode = ModeReport }})
		after(r.o.Timeout)
		a := r.m.Attempts()
		if len(a) != 1 || a[0].Outcome != OutcomeInterrupted || a[0].Restarted {
			t.Fatalf("attempts %+v, want the record interrupted", a)
		}
	})
}

// TestNoKubeletAfterTheRestart: the old kubelet went away and no new one
// runs within the timeout: failed, the restart counted, and the message
// says no kubelet runs (not that the old one still does).
func TestNoKubeletAfterTheRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.down = true }})
		after(3 * time.Second)
		after(r.o.Timeout)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeFailed || !errors.Is(a[0].Err, errNoKubelet) || !a[0].Restarted {
			t.Fatalf("attempt %+v, want failed: no kubelet", a[0])
		}
	})
}

// TestSIGTERMBeforeTheAsk: hotplugd stopping at the moment it would ask
// asks nothing, and the record is closed.
func TestSIGTERMBeforeTheAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *Options) { o.Settle = time.Hour }})
		r.cancel() // stopping before the settle time is over
		<-r.done
		r.cancel = nil
		p := Plan{Action: ActionRestart, Key: "k", Drift: cpuDrift}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a := r.m.restart(ctx, p, time.Now())
		if a.Outcome != "" && a.Outcome != OutcomeInterrupted {
			t.Fatalf("attempt %+v", a)
		}
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("asked the supervisor while stopping: %v", calls)
		}
		if u := r.journal.Underway(); u != nil {
			t.Errorf("left under way: %+v", u)
		}
	})
}

// TestOldUnderwayRecordIsNotActedOn: a record older than the bound is
// closed as interrupted: no stop, no start, no restart, no wait.
func TestOldUnderwayRecordIsNotActedOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := journal.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Begin(journal.Underway{Key: "k", Phase: journal.PhaseVerifying, Start: time.Now().Add(-2 * time.Hour)}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j, change: func(o *Options) { o.Mode = ModeReport }})
		a := r.attempts(1)
		if a[0].Outcome != OutcomeInterrupted || !strings.Contains(a[0].Err.Error(), "too old to verify") {
			t.Fatalf("attempt %+v", a[0])
		}
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
	})
}

// TestLegacyRecordStartsTheKubelet: a record an earlier hotplugd left
// while it had the kubelet stopped gets one start from the supervisor
// (a no-op when it runs), even in report mode.
func TestLegacyRecordStartsTheKubelet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := journal.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Begin(journal.Underway{Key: "k", Phase: journal.LegacyPhaseRepairing, Start: time.Now().Add(-time.Minute)}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j, change: func(o *Options) { o.Mode = ModeReport }})
		a := r.attempts(1)
		if a[0].Outcome != OutcomeInterrupted {
			t.Fatalf("attempt %+v", a[0])
		}
		if diff := cmp.Diff([]string{"start"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
	})
}

// TestMachineChangesDuringTheRestart (issue 19, point 7): the machine
// changes between the kubelet's stop and its start; the repair is made in
// the start, for the machine as it is then, not for the snapshot the
// daemon judged.
func TestMachineChangesDuringTheRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.supervisor.atRepair = func() {
				// Two more CPUs arrive while the kubelet is down.
				next := r.t.TempDir()
				if err := fixturegen.OneNode(18, 8<<20, 0).WriteDir(next); err != nil {
					r.t.Error(err)
				}
				for _, d := range []string{"sys", "proc"} {
					if err := os.RemoveAll(filepath.Join(r.root, d)); err != nil {
						r.t.Error(err)
					}
					if err := os.Rename(filepath.Join(next, d), filepath.Join(r.root, d)); err != nil {
						r.t.Error(err)
					}
				}
			}
		}})
		after(3 * time.Second)
		r.attempts(1)
		if got := r.stateFile(); !strings.Contains(got, `"defaultCpuSet":"0-1,6-17"`) {
			t.Errorf("the kubelet started with %s, want the machine at its start (18 CPUs)", got)
		}
	})
}

// withheldCase runs the rig with change and wants the restart withheld,
// the reason saying want, no supervisor call and the state file untouched.
func withheldCase(t *testing.T, ro rigOptions, want string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, ro)
		old := r.stateFile()
		after(3 * time.Second)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeWithheld || a[0].Restarted {
			t.Fatalf("attempt %+v, want withheld", a[0])
		}
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
		if r.stateFile() != old {
			t.Error("state file changed")
		}
		e := r.journal.Attempts()
		if len(e) != 1 || e[0].Reason != nodepatch.ReasonRestartWithheld || !e[0].Warning || !strings.Contains(e[0].Message, want) ||
			!strings.Contains(e[0].Message, "what to do: ") {
			t.Errorf("journal %+v, want a RestartWithheld warning saying %q and what to do", e, want)
		}
		// One Event: not repeated for the key.
		after(time.Hour)
		r.attempts(1)
	})
}

// TestWithheld: each way a restart would start something hotplugd has not
// judged, or do what the operator did not accept (issue 19, points 1-3 and
// the readiness rule).
func TestWithheld(t *testing.T) {
	t.Run("symlinked state file: unknown verdict", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			target := r.state + ".real"
			if err := os.Rename(r.state, target); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, r.state); err != nil {
				t.Fatal(err)
			}
		}}, "hotplugd cannot judge cpu_manager_state")
	})
	t.Run("configuration changed since the kubelet started", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			r.kubelet.f.ConfigChanged = true
			r.kubelet.f.Limits = []string{"the kubelet's configuration /etc/kubernetes/kubelet.yaml changed after the kubelet started"}
		}}, "/etc/kubernetes/kubelet.yaml changed after the kubelet started")
	})
	t.Run("binary replaced since the kubelet started", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			bin := filepath.Join(t.TempDir(), "kubelet")
			if err := os.WriteFile(bin, []byte("new"), 0o755); err != nil {
				t.Fatal(err)
			}
			r.kubelet.f.Kubelet.Cmdline[0] = bin
			r.kubelet.f.Started = time.Unix(1, 0) // long before the file
		}}, "changed at")
	})
	t.Run("kubelet 1.34 resets readiness", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			r.kubelet.f.Version, r.kubelet.f.Release = kubeletversion.MustParse("v1.34.4"), kubeletversion.ByMinor(34)
		}}, "sets every running container's ready status to false")
	})
	t.Run("1.36 with ChangeContainerStatusOnKubeletRestart", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			c := *r.kubelet.f.Kubelet.Config
			c.FeatureGates = map[string]bool{kubeletversion.GateChangeContainerStatusOnKubeletRestart: true}
			r.kubelet.f.Kubelet.Config = &c
		}}, "ChangeContainerStatusOnKubeletRestart")
	})
	t.Run("the unit says no", func(t *testing.T) {
		withheldCase(t, rigOptions{change: func(o *Options) {
			o.Unit = func(_ context.Context, _ *kubeletwatch.Facts, needsRepair bool) UnitVerdict {
				if !needsRepair {
					t.Error("a static CPU manager's restart does not need the repair in the start")
				}
				return UnitVerdict{Why: "the kubelet's unit kubelet.service is masked", Todo: "unmask it"}
			}
		}}, "kubelet.service is masked")
	})
}

// TestBinaryChanged: the binary's change time against the kubelet's start.
func TestBinaryChanged(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kubelet")
	if err := os.WriteFile(bin, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	facts := func(argv0 string, started time.Time) *kubeletwatch.Facts {
		return &kubeletwatch.Facts{Kubelet: &kubeletconfig.Kubelet{PID: 7, Cmdline: []string{argv0, "--config=x"}}, Started: started}
	}
	for _, tt := range []struct {
		name string
		f    *kubeletwatch.Facts
		want string // "" or a part of the reason
	}{
		{"unchanged since the start", facts(bin, fi.ModTime().Add(time.Second)), ""},
		{"changed after the start", facts(bin, fi.ModTime().Add(-time.Minute)), "changed at"},
		{"gone", facts(bin+".gone", fi.ModTime().Add(time.Second)), "cannot be looked at"},
		{"relative path", facts("kubelet", fi.ModTime().Add(time.Second)), "not by an absolute path"},
		{"no process: the operator's word", &kubeletwatch.Facts{Kubelet: &kubeletconfig.Kubelet{Cmdline: []string{"--config=x"}}}, ""},
	} {
		got := binaryChanged(tt.f)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("%s: binaryChanged = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// TestAllowReadinessReset: --allow-readiness-reset restarts a 1.34 kubelet.
func TestAllowReadinessReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.kubelet.f.Version, r.kubelet.f.Release = kubeletversion.MustParse("v1.34.4"), kubeletversion.ByMinor(34)
		}, change: func(o *Options) { o.AllowReadinessReset = true }})
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != OutcomeRemediated {
			t.Fatalf("attempt %+v", a[0])
		}
	})
}

// TestDailyBudget: with one restart a day, a restart an hour ago holds the
// next back for 23 hours (the rate limit of 10 minutes is long over); then
// it is made.
func TestDailyBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j, err := journal.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Finish(journal.Entry{Key: "earlier", Start: time.Now().Add(-time.Hour), Outcome: OutcomeRemediated, Restarted: true}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j, change: func(o *Options) { o.MaxPerDay = 1 }})
		after(3 * time.Second)
		after(22 * time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Fatalf("restarted within the budget's day: %v", calls)
		}
		after(time.Hour)
		if a := r.attempts(1); a[0].Outcome != OutcomeRemediated {
			t.Fatalf("attempt %+v", a[0])
		}
	})
}

// TestNeedsPersonLeavesTheKubeletAlone: the pinned containers' CPUs are
// gone; the kubelet is left running, and the NeedsDrain entry names the
// pod to drain.
func TestNeedsPersonLeavesTheKubeletAlone(t *testing.T) {
	const podDB = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd" // db on CPUs 4-5
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{cpus: 4, prepare: func(r *rig) {
			if err := os.MkdirAll(filepath.Join(r.podLogs, "databases_db-0.primary_"+podDB, "db"), 0o755); err != nil {
				t.Fatal(err)
			}
		}})
		old := r.stateFile()
		after(3 * time.Second)
		a := r.attempts(1)
		if a[0].Outcome != OutcomeNeedsPerson {
			t.Fatalf("outcome %s", a[0].Outcome)
		}
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
		if r.stateFile() != old {
			t.Error("state file changed")
		}
		e := r.journal.Attempts()
		if len(e) != 1 || e[0].Reason != nodepatch.ReasonNeedsDrain || !strings.Contains(e[0].Message, "; what to do: drain pods databases/db-0.primary") {
			t.Errorf("journal %+v", e)
		}
	})
}

// withEarlierRestart is a journal with a remediated restart (for another
// key) a minute before now: the rate limit (10 minutes) holds the next
// restart back.
func withEarlierRestart(t *testing.T) *journal.Journal {
	t.Helper()
	j, err := journal.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Finish(journal.Entry{Key: "earlier", Start: time.Now().Add(-time.Minute), Outcome: OutcomeRemediated, Reason: nodepatch.ReasonRemediated, Restarted: true}); err != nil {
		t.Fatal(err)
	}
	return j
}

// TestRateLimitedNeedsPersonIsReportedAtOnce: the rate limit holds
// restarts back, not findings.
func TestRateLimitedNeedsPersonIsReportedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{cpus: 4, journal: withEarlierRestart(t)})
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != OutcomeNeedsPerson {
			t.Fatalf("outcome %s, want %s within the rate limit", a[0].Outcome, OutcomeNeedsPerson)
		}
		if diff := cmp.Diff([]string{nodepatch.ReasonRemediated, nodepatch.ReasonNeedsDrain}, r.reasons()); diff != "" {
			t.Errorf("journal entries (-want +got):\n%s", diff)
		}
		after(time.Hour)
		r.attempts(1)
	})
}

// TestRateLimitedRestartWaits: within the rate limit, a drift a restart
// would fix is judged once and then waits until the interval is over.
func TestRateLimitedRestartWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{journal: withEarlierRestart(t)})
		after(3 * time.Second)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("restarted within the rate limit: %v", calls)
		}
		if n := r.kubelet.refreshes(); n != 1 {
			t.Errorf("the kubelet was judged %d times within the rate limit, want once", n)
		}
		after(9*time.Minute - 3*time.Second)
		if a := r.attempts(1); a[0].Outcome != OutcomeRemediated {
			t.Fatalf("outcome %s (%v)", a[0].Outcome, a[0].Err)
		}
	})
}

func TestNoRestartDuringBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		busy := true
		r := newRig(t, rigOptions{change: func(o *Options) {
			o.Busy = func() bool { mu.Lock(); defer mu.Unlock(); return busy }
		}})
		after(50 * time.Second) // a burst that never goes quiet
		r.attempts(0)
		mu.Lock()
		busy = false
		mu.Unlock()
		r.m.Activity(time.Now()) // the burst's last event
		after(3 * time.Second)
		r.attempts(1)
	})
}

func TestActivityRestartsTheSettleTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		after(2 * time.Second)
		r.m.Activity(time.Now())
		after(2 * time.Second)
		r.attempts(0)
		after(time.Second)
		r.attempts(1)
	})
}

func TestDryRunChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *Options) { o.DryRun = true }})
		old := r.stateFile()
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != OutcomeDryRun {
			t.Fatalf("outcome %s", a[0].Outcome)
		}
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
		if r.stateFile() != old {
			t.Error("state file changed")
		}
		if n := len(r.journal.Attempts()); n != 0 {
			t.Errorf("%d journal entries in a dry run", n)
		}
	})
}

func TestReportOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *Options) { o.Mode = ModeReport }})
		after(time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
	})
}

// TestFailedAttemptSurvivesRestarts: a failed attempt is not repeated by
// the next hotplugd (the journal).
func TestFailedAttemptSurvivesRestarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.fixes = false }})
		after(3 * time.Second)
		after(r.o.Timeout)
		r.attempts(1)
		r.stop()
		r.start()
		after(time.Hour)
		r.attempts(0) // the new remedier's own attempts
		if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
			t.Errorf("supervisor calls (-want +got):\n%s", diff)
		}
	})
}

func TestSuperReadOnly(t *testing.T) {
	mount := func(mp string, superRO bool) *procfs.MountInfo {
		super := map[string]string{"rw": ""}
		if superRO {
			super = map[string]string{"ro": ""}
		}
		// The mount's own options are read-only for the kubelet's root
		// dir, as in hotplugd's sandbox: they do not count.
		return &procfs.MountInfo{MountPoint: mp, Options: map[string]string{"ro": ""}, SuperOptions: super}
	}
	mounts := []*procfs.MountInfo{mount("/", false), mount("/var/lib/kubelet", false), mount("/mnt/ro disk", true)}
	for _, tt := range []struct {
		dir  string
		want bool
	}{
		{"/var/lib/kubelet", false}, // a read-only view of a writable file system
		{"/var/lib/kubelet/pods", false},
		{"/mnt/ro disk/x", true},
		{"/mnt/ro", false},
		{"/etc", false},
	} {
		got, err := superReadOnlyIn(mounts, tt.dir)
		if err != nil || got != tt.want {
			t.Errorf("superReadOnly(%q) = %v, %v; want %v", tt.dir, got, err, tt.want)
		}
	}
	// This machine's own mounts are read.
	if _, err := superReadOnly("/"); err != nil {
		t.Errorf("superReadOnly(/): %v", err)
	}
}

// memDrift: the Node reports 1Gi more memory than the machine has.
var memDrift = nodepatch.Drift{{Field: nodepatch.FieldCapacity, Resource: v1.ResourceMemory,
	Reported: resource.MustParse("9Gi"), Predicted: resource.MustParse("8Gi")}}

// TestBalloonIsReportedNotRestarted (issue 19): memory capacity going
// down with no memory offline or remove uevent is a balloon, reported
// only, however long it lasts; after a memory block's offline uevent the
// same drift is a hot-remove, and remedied.
func TestBalloonIsReportedNotRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.node.st.Drift = memDrift }})
		after(time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Fatalf("restarted for a balloon: %v", calls)
		}
		r.m.MemoryDown(time.Now())
		r.m.Activity(time.Now())
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != OutcomeRemediated {
			t.Fatalf("attempt %+v", a[0])
		}
	})
}
