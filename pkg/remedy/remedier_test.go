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
	testingclock "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// fakeNode is the node reporter as the remedy sees it.
type fakeNode struct {
	mu     sync.Mutex
	st     nodepatch.State
	ch     chan struct{}
	notes  []nodepatch.Note
	events []string // "reason: message"
	holds  []bool
}

func (f *fakeNode) Hold(h bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.holds = append(f.holds, h)
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

func (f *fakeNode) SetNote(n nodepatch.Note) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notes = append(f.notes, n)
}

func (f *fakeNode) Event(_, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, reason+": "+message)
}

func (f *fakeNode) reasons() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, e := range f.events {
		out = append(out, strings.SplitN(e, ":", 2)[0])
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
	// seen is the cpu_manager_state content at each start.
	seen []string
	path string
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
}

// newRig: a 16-CPU machine, a static-policy kubelet whose state file was
// written for 8 CPUs (the CPU-upgrade incident), drift cpu 8 -> 16.
func newRig(t *testing.T, cpus int, change func(*Options)) *rig {
	t.Helper()
	root := t.TempDir()
	if err := fixturegen.OneNode(cpus, 8<<20, 0).WriteDir(root); err != nil {
		t.Fatal(err)
	}
	fs := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"))
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
	r := &rig{t: t, clock: testingclock.NewFakeClock(time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)), state: state}
	r.node = newFakeNode(cpuDrift)
	r.kubelet = &fakeKubelet{node: r.node, fixes: true, path: state}
	o := Options{
		Mode: ModeRestartKubelet, Settle: 3 * time.Second, Interval: 10 * time.Minute, Timeout: 300 * time.Millisecond,
		RootDir: kubeletRoot, Config: cfg, Release: kubeletversion.ByMinor(36),
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return r
}

func (r *rig) setBusy(b bool) {
	r.mu.Lock()
	r.isBusy = b
	r.mu.Unlock()
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
	if diff := cmp.Diff([]string{nodepatch.ReasonRemediated}, r.node.reasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]bool{true, false}, r.node.holds); diff != "" {
		t.Errorf("Node writes held (-want +got):\n%s", diff)
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
	// stop, start (repaired), then the rollback: stop, start (restored).
	if diff := cmp.Diff([]string{"stop", "start", "stop", "start"}, r.kubelet.Calls()); diff != "" {
		t.Errorf("kubelet calls (-want +got):\n%s", diff)
	}
	if got, _ := os.ReadFile(r.state); string(got) != string(old) {
		t.Errorf("state file not restored:\n%s\nwant\n%s", got, old)
	}
	if r.kubelet.seen[1] != string(old) {
		t.Errorf("the rollback started the kubelet with %s", r.kubelet.seen[1])
	}
	if diff := cmp.Diff([]string{nodepatch.ReasonRemediationFailed}, r.node.reasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	notes := r.node.notes
	if len(notes) == 0 || notes[len(notes)-1].Reason != nodepatch.ReasonRemediationFailed || !strings.Contains(notes[len(notes)-1].Message, "rolled back") {
		t.Errorf("condition note %+v", notes)
	}
	// The rate limit holds: nothing for 10 minutes, then one more try.
	r.advance(9*time.Minute + 59*time.Second)
	r.attempts(1)
	r.advance(time.Second)
	r.attempts(2)
}

func TestNeedsPersonLeavesTheKubeletAlone(t *testing.T) {
	r := newRig(t, 4, nil) // the pinned containers' CPUs are gone
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
	if diff := cmp.Diff([]string{nodepatch.ReasonNeedsDrain}, r.node.reasons()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if ev := r.node.events[0]; !strings.Contains(ev, "drain") {
		t.Errorf("event does not say what to do: %s", ev)
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
		"report mode":     func(o *Options) { o.Mode = ModeReport },
		"in-place resize": func(o *Options) { o.InPlaceResize = true },
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
}

type failingKubelet struct{ starts int }

func (k *failingKubelet) Stop(context.Context) error  { return errors.New("unit is masked") }
func (k *failingKubelet) Start(context.Context) error { k.starts++; return nil }
func (k *failingKubelet) String() string              { return "failing kubelet" }
