package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/strategicpatch"

	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/allocated"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// The loop's tests run the real Loop and the real remedy executor against
// fakes of the kubelet, its supervisor and the Node, in a synctest bubble:
// time is the bubble's and advances only when every goroutine of the test
// is durably blocked, so a wait (the settle time, the rate limit, the
// verification's timeout) passes in no real time and exactly.

// reportOld is the kubelet reporting the machine it started on: 8 CPUs
// (the CPU-upgrade incident; the rig's machine has 16).
func reportOld(pred nodepatch.Prediction) v1.NodeStatus {
	st := reportMachine(pred)
	st.Capacity[v1.ResourceCPU] = resource.MustParse("8")
	if st.Allocatable != nil {
		st.Allocatable[v1.ResourceCPU] = resource.MustParse("7")
	}
	return st
}

// reportMachine is a kubelet reporting the prediction.
func reportMachine(pred nodepatch.Prediction) v1.NodeStatus {
	return v1.NodeStatus{Capacity: pred.Capacity.DeepCopy(), Allocatable: pred.Allocatable.DeepCopy()}
}

// reportMoreMemory is the kubelet reporting 1Gi more memory than the
// machine has (a balloon inflated, or a hot-remove).
func reportMoreMemory(pred nodepatch.Prediction) v1.NodeStatus {
	st := reportMachine(pred)
	for _, l := range []v1.ResourceList{st.Capacity, st.Allocatable} {
		if q, ok := l[v1.ResourceMemory]; ok {
			q.Add(resource.MustParse("1Gi"))
			l[v1.ResourceMemory] = q
		}
	}
	return st
}

// fakeNode is the Node as watched: its status is what report makes of the
// prediction for the machine the kubelet last started on.
type fakeNode struct {
	r *rig

	mu     sync.Mutex
	node   *v1.Node
	report func(nodepatch.Prediction) v1.NodeStatus
	labels map[string]string
	ann    map[string]string
	ch     chan struct{}
}

// annotate sets an annotation on the Node, as kubectl annotate would.
func (f *fakeNode) annotate(k, v string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ann == nil {
		f.ann = map[string]string{}
	}
	f.ann[k] = v
	n := f.node.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[k] = v
	f.node = n
	close(f.ch)
	f.ch = make(chan struct{})
}

// setLabels replaces the Node's labels, as kubectl label would.
func (f *fakeNode) setLabels(l map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.labels = l
	n := f.node.DeepCopy()
	n.Labels = l
	f.node = n
	close(f.ch)
	f.ch = make(chan struct{})
}

func (f *fakeNode) Node() (*v1.Node, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.node, true
}

func (f *fakeNode) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ch
}

// kubeletStarted has the Node report what a kubelet started now reports.
func (f *fakeNode) kubeletStarted() {
	pred := f.r.predict()
	f.mu.Lock()
	defer f.mu.Unlock()
	n := &v1.Node{}
	n.Name = "n"
	n.Labels = f.labels
	n.Annotations = maps.Clone(f.ann)
	n.Status = f.report(pred)
	f.node = n
	close(f.ch)
	f.ch = make(chan struct{})
}

// patch applies a strategic-merge patch to the Node, as the API server
// does, and has the watch see the result.
func (f *fakeNode) patch(data []byte) (*v1.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cur, err := json.Marshal(f.node)
	if err != nil {
		return nil, err
	}
	if cur, err = strategicpatch.StrategicMergePatch(cur, data, v1.Node{}); err != nil {
		return nil, err
	}
	n := &v1.Node{}
	if err := json.Unmarshal(cur, n); err != nil {
		return nil, err
	}
	f.node = n
	close(f.ch)
	f.ch = make(chan struct{})
	return n.DeepCopy(), nil
}

// gone: the Node cannot be seen (deleted, or never listed again).
func (f *fakeNode) gone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.node = nil
	close(f.ch)
	f.ch = make(chan struct{})
}

// fakeWriter records what the loop writes.
type fakeWriter struct {
	mu      sync.Mutex
	patches [][]byte
	events  []nodepatch.Event
	fail    error     // every Patch fails with it
	apply   *fakeNode // when set, a patch is applied to its Node, as the API server and the watch would
}

func (w *fakeWriter) Patch(_ context.Context, data []byte, _ v1.NodeCondition) (*v1.Node, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.patches = append(w.patches, data)
	if w.fail != nil || w.apply == nil {
		return nil, w.fail
	}
	return w.apply.patch(data)
}

func (w *fakeWriter) count(reason string) (patches, events int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range w.events {
		if e.Reason == reason {
			events++
		}
	}
	return len(w.patches), events
}

func (w *fakeWriter) Event(e nodepatch.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, e)
}

func (w *fakeWriter) SetStale(bool) {}

func (w *fakeWriter) SetHeartbeat(time.Time) {}

func (w *fakeWriter) reasons() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, e := range w.events {
		out = append(out, e.Reason)
	}
	return out
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

// Changed never fires: the loop reads Current at every turn, the remedy
// asks Refresh when it needs to know.
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
			s.r.node.mu.Lock()
			s.r.node.report = reportMachine
			s.r.node.mu.Unlock()
			s.r.node.kubeletStarted()
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

// rigConfig is what a test may change of the loop's and the remedy's
// options.
type rigConfig struct {
	Mode                remedy.Mode
	Settle, Interval    time.Duration
	Timeout             time.Duration
	MaxPerDay           int
	DryRun              bool
	AllowReadinessReset bool
	Heartbeat           time.Duration
	Pause               PauseSource
	Unit                func(context.Context, *kubeletwatch.Facts, bool) remedy.UnitVerdict
	Busy                func() bool
	GetNode             func(context.Context) (*v1.Node, error)
}

type rig struct {
	t          *testing.T
	node       *fakeNode
	kubelet    *fakeKubelet
	supervisor *fakeSupervisor
	writer     *fakeWriter
	rem        *remedy.Remedier
	loop       *Loop
	o          rigConfig
	fs         topology.FS
	root       string // the fixture machine
	state      string // cpu_manager_state path
	podLogs    string // the kubelet's podLogsDir
	journal    *journal.Journal
	// arriving: each start of the loop comes just after a CPU device was
	// hot-added (rigOptions.complete false).
	arriving bool
	cancel   context.CancelFunc
	done     chan error
}

// rigOptions shape a rig.
type rigOptions struct {
	cpus    int
	journal *journal.Journal
	// prepare sees the rig before the loop is made.
	prepare func(*rig)
	// change sees the options.
	change func(*rigConfig)
	// complete: the change has fully arrived when the loop starts (a
	// hugepage write, a CPU onlined); otherwise the CPUs of the upgrade
	// were hot-added just now, and hypervisors add them one at a time.
	complete bool
}

// newRig: a machine of cpus CPUs, a static-policy kubelet 1.36 whose state
// file was written for 8 CPUs and whose Node reports 8 (the CPU-upgrade
// incident); the loop runs until the test ends. Call it inside the bubble.
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
	r := &rig{t: t, root: root, state: state, podLogs: podLogs, journal: ro.journal, writer: &fakeWriter{},
		fs: topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))}
	if r.journal == nil {
		if r.journal, err = journal.Open(t.TempDir()); err != nil {
			t.Fatal(err)
		}
	}
	r.kubelet = &fakeKubelet{f: kubeletwatch.Facts{
		Kubelet:  &kubeletconfig.Kubelet{PID: 4242, Config: cfg, RootDir: kubeletRoot, Cmdline: []string{"/usr/bin/kubelet", "--config", "test"}},
		Start:    100,
		Version:  kubeletversion.MustParse("v1.36.3"),
		Release:  kubeletversion.ByMinor(36),
		StateDir: kubeletRoot,
	}}
	r.node = &fakeNode{r: r, report: reportOld, ch: make(chan struct{})}
	r.supervisor = &fakeSupervisor{r: r, fixes: true}
	if ro.prepare != nil {
		ro.prepare(r)
	}
	r.node.kubeletStarted()
	r.o = rigConfig{Mode: remedy.ModeRestartKubelet, Settle: 3 * time.Second, Interval: 10 * time.Minute, Timeout: 30 * time.Second}
	if ro.change != nil {
		ro.change(&r.o)
	}
	r.arriving = !ro.complete
	r.start()
	return r
}

// predict is what a kubelet started now on the rig's machine reports.
func (r *rig) predict() nodepatch.Prediction {
	snap, err := r.fs.CapacitySnapshot()
	if err != nil {
		r.t.Fatal(err)
	}
	p, err := Predict(snap, r.kubelet.Current())
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

// feed hands the loop a snapshot of the machine, as the daemon's hook
// does after an event.
func (r *rig) feed() {
	snap, err := r.fs.CapacitySnapshot()
	if err != nil {
		r.t.Error(err)
		return
	}
	r.loop.Snapshot(snap, time.Now())
}

// setMachine replaces the machine with one of cpus CPUs and feeds its
// snapshot.
func (r *rig) setMachine(cpus int) {
	next := r.t.TempDir()
	if err := fixturegen.OneNode(cpus, 8<<20, 0).WriteDir(next); err != nil {
		r.t.Fatal(err)
	}
	for _, d := range []string{"sys", "proc"} {
		if err := os.RemoveAll(filepath.Join(r.root, d)); err != nil {
			r.t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(next, d), filepath.Join(r.root, d)); err != nil {
			r.t.Fatal(err)
		}
	}
	r.feed()
}

// start runs a remedy executor and a Loop on the rig's options (a new
// hotplugd) until the test ends or stop.
func (r *rig) start() {
	obs := NewObservations()
	var err error
	r.rem, err = remedy.New(remedy.Options{
		Interval: r.o.Interval, Timeout: r.o.Timeout, DryRun: r.o.DryRun, AllowReadinessReset: r.o.AllowReadinessReset,
		Unit: r.o.Unit, Kubelet: r.kubelet, Journal: r.journal, Control: r.supervisor, Node: obs, Snapshot: r.fs.Snapshot,
		GetNode: r.o.GetNode,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	r.loop, err = New(Options{
		Config:  Config{Mode: r.o.Mode, Settle: r.o.Settle, Interval: r.o.Interval, MaxPerDay: r.o.MaxPerDay, Heartbeat: r.o.Heartbeat},
		Kubelet: r.kubelet, Node: r.node, Writer: r.writer, Remedy: r.rem, Journal: r.journal, Observations: obs,
		Busy: r.o.Busy, Pause: r.o.Pause,
	})
	if err != nil {
		r.t.Fatal(err)
	}
	snap, err := r.fs.CapacitySnapshot()
	if err != nil {
		r.t.Fatal(err)
	}
	r.loop.Snapshot(snap, time.Time{}) // the daemon's first snapshot
	if r.arriving {
		r.loop.Uevent(uevent.Event{Action: uevent.ActionAdd, Subsystem: "cpu", DevPath: "/devices/system/cpu/cpu15"}, time.Now())
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	l := r.loop
	go func() { r.done <- l.Run(ctx) }()
	r.t.Cleanup(r.stop)
}

// stop cancels the loop and waits for Run to return (hotplugd's SIGTERM).
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
	return preflight.Run(snap, preflight.Options{RootDir: f.StateDir, PodLogsDir: f.Kubelet.PodLogsDir(), Config: f.Kubelet.Config,
		Release: f.Release, Version: f.Version, Now: time.Now(), DryRun: dry})
}

// after lets d pass and everything settle.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// reasons are the journal entries' reasons (what the Node's Events say).
func (r *rig) reasons() []string {
	var out []string
	for _, e := range r.journal.Attempts() {
		out = append(out, e.Reason)
	}
	return out
}

func (r *rig) attempts(n int) []remedy.Attempt {
	r.t.Helper()
	synctest.Wait()
	a := r.rem.Attempts()
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
		if a[0].Outcome != remedy.OutcomeRemediated || !a[0].Restarted {
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
		// The Node's Events: the drift once, the remedy once.
		if diff := cmp.Diff([]string{nodepatch.ReasonCapacityDrift, nodepatch.ReasonRemediated}, r.writer.reasons()); diff != "" {
			t.Errorf("Events (-want +got):\n%s", diff)
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
		if a[0].Outcome != remedy.OutcomeFailed || !errors.Is(a[0].Err, remedy.ErrNotRestarted) {
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
		if a[0].Outcome != remedy.OutcomeFailed || a[0].Err == nil || !strings.Contains(a[0].Err.Error(), "still reports capacity cpu 8 -> 16") {
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
		r.loop.Activity(time.Now())
		r.setMachine(15) // a new prediction: a new key
		after(3 * time.Second)
		after(r.o.Timeout)
		r.attempts(2)
	})
}

// TestAPIOutageDuringVerificationIsNotAKubeletFailure: the kubelet was
// restarted and runs; the Node cannot be read: unverified, not failed.
// Whether the watch lost the Node or (as a real watch does while the API
// server is away) keeps the last one it saw, still stale: the API server is
// asked once more before the kubelet is called failed.
func TestAPIOutageDuringVerificationIsNotAKubeletFailure(t *testing.T) {
	away := func(context.Context) (*v1.Node, error) { return nil, errors.New("connection refused") }
	for _, tt := range []struct {
		name    string
		prepare func(*rig)
	}{
		{"the watch lost the Node", func(r *rig) { r.supervisor.atRepair = func() { r.node.gone() } }},
		{"the watch keeps the stale Node", func(*rig) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, rigOptions{prepare: func(r *rig) {
					r.supervisor.fixes = false
					tt.prepare(r)
				}, change: func(o *rigConfig) { o.GetNode = away }})
				after(3 * time.Second)
				after(r.o.Timeout)
				a := r.attempts(1)
				if a[0].Outcome != remedy.OutcomeUnverified || !errors.Is(a[0].Err, remedy.ErrNodeUnknown) || !a[0].Restarted {
					t.Fatalf("attempt %+v, want unverified", a[0])
				}
				if diff := cmp.Diff([]string{"restart"}, r.supervisor.Calls()); diff != "" {
					t.Errorf("supervisor calls (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// TestLaggingWatchIsNotAKubeletFailure: the watch still shows the old
// Node at the verification's end, the API server shows the new one:
// verified.
func TestLaggingWatchIsNotAKubeletFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r *rig
		current := func(context.Context) (*v1.Node, error) {
			n := &v1.Node{}
			n.Status = reportMachine(r.predict())
			return n, nil
		}
		newRig(t, rigOptions{prepare: func(rr *rig) {
			r = rr // before the loop runs
			r.supervisor.fixes = false
		}, change: func(o *rigConfig) { o.GetNode = current }})
		after(3 * time.Second)
		after(r.o.Timeout)
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
			t.Fatalf("attempt %+v, want remediated", a[0])
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
		if a := r.rem.Attempts(); len(a) != 1 || a[0].Outcome != remedy.OutcomeInterrupted {
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
		if a[0].Outcome != remedy.OutcomeRemediated || !strings.Contains(a[0].Message, "a previous hotplugd asked for is verified") {
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
		a := r.rem.Attempts()
		if len(a) == 0 || a[0].Outcome != remedy.OutcomeInterrupted || !errors.Is(a[0].Err, remedy.ErrNotRestarted) {
			t.Fatalf("attempts %+v, want the record interrupted", a)
		}
		if e := r.journal.Attempts(); len(e) == 0 || e[0].Restarted {
			t.Errorf("journal %+v: a restart that never happened counts against the budget", e)
		}
		// The interrupted record concluded nothing: the drift is
		// remedied once the rate limit from that record's start is over.
		after(10 * time.Minute)
		after(time.Second)
		a = r.rem.Attempts()
		if len(a) != 2 || a[1].Outcome != remedy.OutcomeRemediated {
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
		r := newRig(t, rigOptions{journal: j, change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		after(r.o.Timeout)
		a := r.rem.Attempts()
		if len(a) != 1 || a[0].Outcome != remedy.OutcomeInterrupted || a[0].Restarted {
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
		if a[0].Outcome != remedy.OutcomeFailed || !errors.Is(a[0].Err, remedy.ErrNoKubelet) || !a[0].Restarted {
			t.Fatalf("attempt %+v, want failed: no kubelet", a[0])
		}
	})
}

// TestSIGTERMBeforeTheAsk: hotplugd stopping at the moment it would ask
// asks nothing, and the record is closed.
func TestSIGTERMBeforeTheAsk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *rigConfig) { o.Settle = time.Hour }})
		r.cancel() // stopping before the settle time is over
		<-r.done
		r.cancel = nil
		p := remedy.Plan{Action: remedy.ActionRestart, Key: r.predict().Key}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		a, _ := r.rem.Restart(ctx, p)
		if a.Outcome != "" && a.Outcome != remedy.OutcomeInterrupted {
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
		r := newRig(t, rigOptions{journal: j, change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		a := r.attempts(1)
		if a[0].Outcome != remedy.OutcomeInterrupted || !strings.Contains(a[0].Err.Error(), "too old to verify") {
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
		r := newRig(t, rigOptions{journal: j, change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		a := r.attempts(1)
		if a[0].Outcome != remedy.OutcomeInterrupted {
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
				r.feed() // the daemon's snapshot of the change
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
		if a[0].Outcome != remedy.OutcomeWithheld || a[0].Restarted {
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
	t.Run("reserved CPUs hotplugd cannot predict: unknown verdict", func(t *testing.T) {
		// The kubelet picks the reserved CPUs itself (a cpu reservation,
		// no reservedSystemCPUs) by distribute-cpus-across-numa's rules.
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n" +
				"systemReserved: {cpu: \"1\"}\ncpuManagerPolicyOptions: {distribute-cpus-across-numa: \"true\"}\npodLogsDir: " + r.podLogs + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			r.kubelet.f.Kubelet.Config = cfg
		}}, "hotplugd cannot judge cpu_manager_state")
	})
	t.Run("oversized state file: unknown verdict", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			b, err := os.ReadFile(r.state)
			if err != nil {
				t.Fatal(err)
			}
			// The kubelet reads it (JSON allows the trailing spaces);
			// hotplugd does not read more than statefile.MaxSize.
			if err := os.WriteFile(r.state, append(b, bytes.Repeat([]byte(" "), statefile.MaxSize)...), 0o644); err != nil {
				t.Fatal(err)
			}
		}}, "hotplugd cannot judge cpu_manager_state")
	})
	t.Run("memory_manager_state hotplugd cannot judge", func(t *testing.T) {
		withheldCase(t, rigOptions{prepare: func(r *rig) {
			target := filepath.Join(t.TempDir(), "memory_manager_state")
			if err := os.WriteFile(target, []byte(`{"policyName":"None","machineState":{},"checksum":1}`), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(filepath.Dir(r.state), preflight.MemoryManagerState)); err != nil {
				t.Fatal(err)
			}
		}}, "hotplugd cannot judge memory_manager_state")
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
		withheldCase(t, rigOptions{change: func(o *rigConfig) {
			o.Unit = func(_ context.Context, _ *kubeletwatch.Facts, needsRepair bool) remedy.UnitVerdict {
				if !needsRepair {
					t.Error("a static CPU manager's restart does not need the repair in the start")
				}
				return remedy.UnitVerdict{Why: "the kubelet's unit kubelet.service is masked", Todo: "unmask it"}
			}
		}}, "kubelet.service is masked")
	})
}

// TestAllowReadinessReset: --allow-readiness-reset restarts a 1.34 kubelet.
func TestAllowReadinessReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.kubelet.f.Version, r.kubelet.f.Release = kubeletversion.MustParse("v1.34.4"), kubeletversion.ByMinor(34)
		}, change: func(o *rigConfig) { o.AllowReadinessReset = true }})
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
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
		if err := j.Finish(journal.Entry{Key: "earlier", Start: time.Now().Add(-time.Hour), Outcome: remedy.OutcomeRemediated, Restarted: true}); err != nil {
			t.Fatal(err)
		}
		r := newRig(t, rigOptions{journal: j, change: func(o *rigConfig) { o.MaxPerDay = 1 }})
		after(3 * time.Second)
		after(22 * time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Fatalf("restarted within the budget's day: %v", calls)
		}
		after(time.Hour)
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
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
		if a[0].Outcome != remedy.OutcomeNeedsPerson {
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
	if err := j.Finish(journal.Entry{Key: "earlier", Start: time.Now().Add(-time.Minute), Outcome: remedy.OutcomeRemediated, Reason: nodepatch.ReasonRemediated, Restarted: true}); err != nil {
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
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeNeedsPerson {
			t.Fatalf("outcome %s, want %s within the rate limit", a[0].Outcome, remedy.OutcomeNeedsPerson)
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
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
			t.Fatalf("outcome %s (%v)", a[0].Outcome, a[0].Err)
		}
	})
}

func TestNoRestartDuringBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		busy := true
		r := newRig(t, rigOptions{change: func(o *rigConfig) {
			o.Busy = func() bool { mu.Lock(); defer mu.Unlock(); return busy }
		}})
		after(50 * time.Second) // a burst that never goes quiet
		r.attempts(0)
		mu.Lock()
		busy = false
		mu.Unlock()
		r.loop.Activity(time.Now()) // the burst's last event
		after(3 * time.Second)
		r.attempts(1)
	})
}

// TestCompleteChangeRestartsOnceQuiet: a change the kernel has finished
// (nothing arriving) restarts the kubelet as soon as its burst is quiet,
// with no settle wait; one still arriving waits (TestOneRestartPerSettledChange).
func TestCompleteChangeRestartsOnceQuiet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		busy := true
		r := newRig(t, rigOptions{complete: true, change: func(o *rigConfig) {
			o.Busy = func() bool { mu.Lock(); defer mu.Unlock(); return busy }
		}})
		after(time.Hour)
		r.attempts(0) // the burst is still being debounced
		mu.Lock()
		busy = false
		mu.Unlock()
		r.loop.Activity(time.Now()) // the burst's last event, with its snapshot
		synctest.Wait()
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
			t.Fatalf("attempt %+v, want remediated", a[0])
		}
		if got := r.journal.Attempts()[0].Start; !got.Equal(time.Now()) {
			t.Errorf("the restart began %v after the burst went quiet, want at once", time.Since(got))
		}
	})
}

func TestActivityRestartsTheSettleTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		after(2 * time.Second)
		r.loop.Activity(time.Now())
		after(2 * time.Second)
		r.attempts(0)
		after(time.Second)
		r.attempts(1)
	})
}

func TestDryRunChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *rigConfig) { o.DryRun = true }})
		old := r.stateFile()
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeDryRun {
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
		r := newRig(t, rigOptions{change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		after(time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v", calls)
		}
		if patches, events := r.writer.count(nodepatch.ReasonCapacityDrift); patches == 0 || events != 1 {
			t.Errorf("%d patches and %d CapacityDrift Events, want the drift reported: at least one patch, one Event", patches, events)
		}
	})
}

// TestHeartbeatWrites: the cost of the heartbeat, counted. A current Node
// (no drift) over an hour and a half: the first write, then one write of
// the condition every 5 minutes (12 per hour), each moving its
// lastHeartbeatTime and nothing else; no Event. Without a heartbeat, the
// first write only.
func TestHeartbeatWrites(t *testing.T) {
	for _, tc := range []struct {
		heartbeat time.Duration
		want      int
	}{{5 * time.Minute, 1 + 18}, {0, 1}} {
		t.Run(fmt.Sprint(tc.heartbeat), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				r := newRig(t, rigOptions{
					prepare: func(r *rig) { r.node.report = reportMachine; r.writer.apply = r.node },
					change:  func(o *rigConfig) { o.Mode = remedy.ModeReport; o.Heartbeat = tc.heartbeat },
				})
				after(90*time.Minute + time.Second)
				patches, events := r.writer.count(nodepatch.ReasonCapacityDrift)
				if patches != tc.want || events != 0 {
					t.Errorf("%d patches and %d drift Events in 90 minutes, want %d and none", patches, events, tc.want)
				}
				n, _ := r.node.Node()
				var c *v1.NodeCondition
				for i := range n.Status.Conditions {
					if n.Status.Conditions[i].Type == nodepatch.ConditionType {
						c = &n.Status.Conditions[i]
					}
				}
				wantBeat := start.Truncate(time.Second)
				if tc.heartbeat > 0 {
					wantBeat = start.Add(90 * time.Minute).Truncate(time.Second)
				}
				if c == nil || c.Status != v1.ConditionFalse || !c.LastHeartbeatTime.Time.Equal(wantBeat) || !c.LastTransitionTime.Time.Equal(start.Truncate(time.Second)) {
					t.Errorf("condition %+v, want False, its transition at the start and its heartbeat at %v", c, wantBeat)
				}
			})
		})
	}
}

// TestFailedWriteSendsTheDriftEventOnce: while a failed Node write waits
// for its retry, the drift changes (the machine changes again) and other
// inputs turn the loop; each drift's Event is sent once, not at every
// turn, and the write is retried.
func TestFailedWriteSendsTheDriftEventOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.writer.fail = errors.New("the API server is away") },
			change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		after(time.Second) // the first drift's Event; its write fails
		r.setMachine(4)    // another drift, while the write waits for its retry
		for range 20 {
			r.loop.Activity(time.Now())
			after(10 * time.Millisecond)
		}
		after(time.Minute)
		if patches, events := r.writer.count(nodepatch.ReasonCapacityDrift); patches < 2 || events != 2 {
			t.Errorf("%d patches and %d CapacityDrift Events, want the write retried and one Event per drift (2)", patches, events)
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

// TestBalloonIsReportedNotRestarted (issue 19): memory capacity going
// down with no memory offline or remove uevent is a balloon, reported
// only, however long it lasts; after a memory block's offline uevent the
// same drift is a hot-remove, and remedied.
func TestBalloonIsReportedNotRestarted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) {
			r.node.report = reportMoreMemory
			// The kubelet's checkpoint: one pod, which fits what is left
			// (a hot-remove shrinks allocatable, so the re-admission is
			// judged).
			writeAllocated(t, r.kubelet.f.StateDir, "1")
		}})
		after(time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Fatalf("restarted for a balloon: %v", calls)
		}
		r.loop.MemoryDown(time.Now())
		r.loop.Activity(time.Now())
		after(3 * time.Second)
		if a := r.attempts(1); a[0].Outcome != remedy.OutcomeRemediated {
			t.Fatalf("attempt %+v", a[0])
		}
	})
}

// writeAllocated writes the kubelet's allocated_pods_state into dir: one
// pod per cpu request, each with one container "app", uids in order.
func writeAllocated(t *testing.T, dir string, cpus ...string) []string {
	t.Helper()
	var entries []string
	var uids []string
	for i, c := range cpus {
		uid := fmt.Sprintf("%08d-aaaa-4000-8000-%012d", i+1, i+1)
		uids = append(uids, uid)
		entries = append(entries, fmt.Sprintf(`%q:{"ContainerResources":{"app":{"requests":{"cpu":%q}}},"PodLevelResources":null}`, uid, c))
	}
	data := `{"entries":{` + strings.Join(entries, ",") + `}}`
	b, err := json.Marshal(map[string]any{"data": data, "checksum": checksum.Of(dump.ForHash(data))})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, allocated.FileName), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return uids
}

// TestRestartThatWouldRejectPods (issue 19: re-admission): the machine
// lost two CPUs (allocatable cpu 7 -> 5) and the pods that run request 6:
// a restarted kubelet would reject some of them, so it is not restarted;
// the NeedsDrain entry names the pods. The same machine with pods that fit
// is restarted; a checkpoint that cannot be read while allocatable shrinks
// withholds the restart; one the kubelet would refuse at its start (it
// panics) needs a person, whether allocatable shrinks or grows (the machine
// gained CPUs: before, a restart was asked for and the kubelet panicked at
// every start).
func TestRestartThatWouldRejectPods(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cpus    []string // the pods' requests; nil: no checkpoint
		corrupt bool
		machine int // the machine's CPUs (the Node says 8); 0: 6
		outcome remedy.Outcome
		reason  string
		message []string
	}{
		{"pods would be rejected", []string{"2", "2", "2"}, false, 0, remedy.OutcomeNeedsPerson, nodepatch.ReasonNeedsDrain,
			[]string{"cpu: pods request 6, the restarted kubelet would allow 5", "default/web-0", "drain the pods named"}},
		{"pods fit", []string{"2", "2", "1"}, false, 0, remedy.OutcomeRemediated, nodepatch.ReasonRemediated, nil},
		{"no checkpoint: no pod admitted", nil, false, 0, remedy.OutcomeRemediated, nodepatch.ReasonRemediated, nil},
		{"a checkpoint that cannot be read, running pods unknown", []string{}, false, 0, remedy.OutcomeWithheld, nodepatch.ReasonRestartWithheld,
			[]string{"allocatable shrinks (cpu 7 -> 5)", "cannot tell whether the restart would reject running pods"}},
		{"a checkpoint the kubelet refuses", []string{"1"}, true, 0, remedy.OutcomeNeedsPerson, nodepatch.ReasonNeedsDrain,
			[]string{"allocated_pods_state: kubelet 1.36 would refuse it at its start and panic (checkpoint is corrupted)", "drain the node, delete "}},
		{"a checkpoint the kubelet refuses, CPUs added", []string{"1"}, true, 10, remedy.OutcomeNeedsPerson, nodepatch.ReasonNeedsDrain,
			[]string{"allocated_pods_state: kubelet 1.36 would refuse it at its start and panic (checkpoint is corrupted)", "drain the node, delete "}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cpus := tt.machine
				if cpus == 0 {
					cpus = 6
				}
				r := newRig(t, rigOptions{cpus: cpus, prepare: func(r *rig) {
					if tt.cpus == nil {
						return
					}
					if len(tt.cpus) == 0 { // not a regular file: unreadable
						if err := os.Mkdir(filepath.Join(r.kubelet.f.StateDir, allocated.FileName), 0o755); err != nil {
							t.Fatal(err)
						}
						return
					}
					uids := writeAllocated(t, r.kubelet.f.StateDir, tt.cpus...)
					if tt.corrupt {
						p := filepath.Join(r.kubelet.f.StateDir, allocated.FileName)
						b, _ := os.ReadFile(p)
						os.WriteFile(p, []byte(strings.Replace(string(b), `\"1\"`, `\"9\"`, 1)), 0o600)
					}
					if err := os.MkdirAll(filepath.Join(r.podLogs, "default_web-0_"+uids[0]), 0o755); err != nil {
						t.Fatal(err)
					}
				}})
				after(3 * time.Second)
				a := r.attempts(1)
				if a[0].Outcome != tt.outcome {
					t.Fatalf("attempt %+v, want %s", a[0], tt.outcome)
				}
				if tt.outcome != remedy.OutcomeRemediated {
					if calls := r.supervisor.Calls(); len(calls) != 0 {
						t.Errorf("supervisor calls %v", calls)
					}
				}
				e := r.journal.Attempts()
				if len(e) != 1 || e[0].Reason != tt.reason {
					t.Fatalf("journal %+v, want %s", e, tt.reason)
				}
				for _, m := range tt.message {
					if !strings.Contains(e[0].Message, m) {
						t.Errorf("message %q does not say %q", e[0].Message, m)
					}
				}
			})
		})
	}
}

// TestRemedyOutcomesHaveZeroSeries: hotplugd_remedies_total has a series
// for every outcome, at 0, before any attempt, so that increase() sees
// each outcome's first attempt.
func TestRemedyOutcomesHaveZeroSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{change: func(o *rigConfig) { o.Mode = remedy.ModeReport }})
		reg := prometheus.NewRegistry()
		if _, err := remedy.New(remedy.Options{Kubelet: r.kubelet, Node: NewObservations(), Snapshot: r.fs.Snapshot, Registerer: reg}); err != nil {
			t.Fatal(err)
		}
		var want strings.Builder
		want.WriteString("# HELP hotplugd_remedies_total Remedy attempts by outcome: remediated, failed, unverified (restarted); needs_person, refused, withheld (nothing done); interrupted, dry_run.\n# TYPE hotplugd_remedies_total counter\n")
		outcomes := journal.Outcomes()
		names := make([]string, len(outcomes))
		for i, o := range outcomes {
			names[i] = string(o)
		}
		slices.Sort(names)
		for _, o := range names {
			fmt.Fprintf(&want, "hotplugd_remedies_total{outcome=%q} 0\n", o)
		}
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), "hotplugd_remedies_total"); err != nil {
			t.Error(err)
		}
	})
}

// TestStatus: the loop's Status follows its decisions. In the CPU-upgrade
// incident (CPUs hot-added just now) it shows the drift and the wait for
// the change to arrive, then, once the restart
// worked, the kubelet current and the attempt; its text names each part.
func TestStatus(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{})
		after(time.Second)
		st, ok := r.loop.Status()
		if !ok {
			t.Fatal("no status after the first decision")
		}
		if st.Mode != "restart-kubelet" || !strings.Contains(st.Drift, "capacity cpu 8 -> 16") || st.Next.Action != string(remedy.ActionWait) ||
			st.Kubelet == nil || st.Kubelet.PID != 4242 || st.Kubelet.Version != "v1.36.3" || st.Machine == nil || !strings.HasPrefix(st.Machine.Capacity, "cpu=16,") ||
			st.Node == nil || len(st.Attempts) != 0 {
			t.Errorf("during the settle time: %+v", st)
		}
		var b bytes.Buffer
		if err := st.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`Remedy +restart-kubelet`, `Kubelet +pid 4242, v1\.36\.3`, `Drift +capacity cpu 8 -> 16`, `Next +wait: the change is still arriving \(a CPU device was added`} {
			if !regexp.MustCompile(`(?m)^` + want).MatchString(b.String()) {
				t.Errorf("text lacks a line %q:\n%s", want, b.String())
			}
		}
		after(time.Minute)
		r.attempts(1)
		st, _ = r.loop.Status()
		if st.Drift != "" || len(st.Attempts) != 1 || st.Attempts[0].Outcome != journal.OutcomeRemediated || st.Next.Action != string(remedy.ActionNone) {
			t.Errorf("after the restart: %+v", st)
		}
	})
}

// TestRemedyOffLabel: the Node's label hotplugd.io/remedy=off keeps the
// remedy from restarting the kubelet on that node (the drift is reported,
// the status says why); once the label is gone, the restart comes.
func TestRemedyOffLabel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.node.labels = map[string]string{LabelRemedy: "off"} }})
		after(time.Hour)
		r.attempts(0)
		if calls := r.supervisor.Calls(); len(calls) != 0 {
			t.Errorf("supervisor calls %v with the remedy off", calls)
		}
		if _, events := r.writer.count(nodepatch.ReasonCapacityDrift); events != 1 {
			t.Errorf("%d CapacityDrift Events, want the drift reported once", events)
		}
		if st, _ := r.loop.Status(); st.Next.Action != string(remedy.ActionReport) || !strings.Contains(st.Next.Why, "label hotplugd.io/remedy=off") {
			t.Errorf("status next %+v, want report, saying the label", st.Next)
		}
		r.node.setLabels(map[string]string{LabelRemedy: "on"})
		after(time.Minute)
		if a := r.attempts(1); a[0].Outcome != journal.OutcomeRemediated {
			t.Errorf("after the label: %+v", a)
		}
	})
}

// TestRetryAnnotation: a failed attempt is not repeated for the same
// machine and configuration, until a person sets hotplugd.io/retry on the
// Node: then one more attempt (here it works); the same value again is
// not a second retry.
func TestRetryAnnotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, rigOptions{prepare: func(r *rig) { r.supervisor.fixes = false }})
		after(time.Hour)
		if a := r.attempts(1); a[0].Outcome != journal.OutcomeFailed {
			t.Fatalf("first attempt %+v, want failed", a[0])
		}
		r.supervisor.mu.Lock()
		r.supervisor.fixes = true
		r.supervisor.mu.Unlock()
		r.node.annotate(nodepatch.AnnotationRetry, "1")
		after(time.Minute)
		a := r.attempts(2)
		if a[1].Outcome != journal.OutcomeRemediated {
			t.Errorf("after the retry: %+v, want remediated", a[1])
		}
		st, _ := r.loop.Status()
		if st.Retry == nil || st.Retry.Token != "1" {
			t.Errorf("status retry %+v, want token 1", st.Retry)
		}
		// The same value again, and a new drift that fails: no retry.
		r.supervisor.mu.Lock()
		r.supervisor.fixes = false
		r.supervisor.mu.Unlock()
		r.node.annotate(nodepatch.AnnotationRetry, "1")
		r.setMachine(4)
		after(time.Hour)
		r.attempts(3)
		after(time.Hour)
		r.attempts(3)
	})
}

// fakePause is the cluster-wide pause (pkg/pause's Watch).
type fakePause struct {
	mu     sync.Mutex
	paused string
	ch     chan struct{}
}

func (p *fakePause) Paused() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

func (p *fakePause) Changed() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ch
}

func (p *fakePause) set(why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = why
	close(p.ch)
	p.ch = make(chan struct{})
}

// TestClusterPause: while remedies are paused cluster-wide, the drift is
// reported and nothing restarted (the plan says why); the pause lifted,
// the restart comes.
func TestClusterPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakePause{paused: "remedies are paused cluster-wide (test)", ch: make(chan struct{})}
		r := newRig(t, rigOptions{change: func(o *rigConfig) { o.Pause = p }})
		after(time.Hour)
		r.attempts(0)
		if st, _ := r.loop.Status(); st.Next.Action != string(remedy.ActionReport) || !strings.Contains(st.Next.Why, "paused cluster-wide") {
			t.Errorf("status next %+v while paused", st.Next)
		}
		p.set("")
		after(time.Minute)
		if a := r.attempts(1); a[0].Outcome != journal.OutcomeRemediated {
			t.Errorf("after the pause: %+v", a)
		}
	})
}
