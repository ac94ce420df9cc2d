package daemon

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/debounce"
	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// fakeUevents hands the daemon's handler to the test.
type fakeUevents struct{ h chan uevent.Handler }

func (f *fakeUevents) Run(ctx context.Context, h uevent.Handler) error {
	f.h <- h
	<-ctx.Done()
	return nil
}
func (f *fakeUevents) Close() error { return nil }

type fakeHugePages struct {
	h       chan hugepagewatch.Handler
	rescans int
}

func (f *fakeHugePages) Run(ctx context.Context, h hugepagewatch.Handler) error {
	f.h <- h
	<-ctx.Done()
	return nil
}
func (f *fakeHugePages) Rescan() ([]string, error) { f.rescans++; return nil, nil }
func (f *fakeHugePages) Close() error              { return nil }

type harness struct {
	t        *testing.T
	root     string
	clock    *clocktesting.FakeClock
	d        *Daemon
	uevents  uevent.Handler
	hp       hugepagewatch.Handler
	results  chan Result
	hugepage *fakeHugePages
}

const quiet = 500 * time.Millisecond

func start(t *testing.T) *harness {
	t.Helper()
	return startWith(t, nil, nil)
}

// startWith is start with the daemon's clock wrapping the harness' fake one
// (nil: the fake clock itself), and hook called in the reconcile goroutine
// before the result is handed to the test.
func startWith(t *testing.T, wrap func(*clocktesting.FakeClock) clock.WithTicker, hook func(*Daemon, Result)) *harness {
	t.Helper()
	return startLogged(t, wrap, hook, nil)
}

// startLogged is startWith with the daemon logging to log (nil: nowhere).
func startLogged(t *testing.T, wrap func(*clocktesting.FakeClock) clock.WithTicker, hook func(*Daemon, Result), log *zap.Logger) *harness {
	t.Helper()
	root := t.TempDir()
	m := fixturegen.OneNode(2, 4194304, 0)
	if err := m.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, root: root, clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)), results: make(chan Result, 100)}
	var clk clock.WithTicker = h.clock
	if wrap != nil {
		clk = wrap(h.clock)
	}
	ue := &fakeUevents{h: make(chan uevent.Handler, 1)}
	h.hugepage = &fakeHugePages{h: make(chan hugepagewatch.Handler, 1)}
	d, err := New(Config{
		SysfsRoot: filepath.Join(root, "sys"), ProcfsRoot: filepath.Join(root, "proc"),
		QuietWindow: quiet, MaxDelay: 5 * time.Second, Resync: time.Minute,
		Clock: clk, Uevents: ue, HugePages: h.hugepage, Log: log,
		OnReconcile: func(r Result) {
			if hook != nil {
				hook(h.d, r)
			}
			h.results <- r
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run() = %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	h.uevents, h.hp = <-ue.h, <-h.hugepage.h
	if r := h.next(); !r.Initial || r.Batch.Cause != debounce.TriggerStart {
		t.Fatalf("first result = %+v, want the initial snapshot", r)
	}
	return h
}

// next waits for the next reconcile result.
func (h *harness) next() Result {
	h.t.Helper()
	select {
	case r := <-h.results:
		return r
	case <-time.After(5 * time.Second):
		h.t.Fatal("no reconcile")
		return Result{}
	}
}

// settle steps the fake clock through the quiet window once the debouncer
// has armed its timer, and returns the reconcile. The debouncer may still
// be re-arming its timer for a burst sent just before, from a time it read
// before the step: that timer is then due a quiet window after the step.
// So until the reconcile arrives, the clock is stepped by another quiet
// window (no trigger is pending, so this adds no reconcile).
func (h *harness) settle() Result {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for h.clock.Waiters() < 2 { // the resync ticker and the debounce timer
		if time.Now().After(deadline) {
			h.t.Fatal("the debouncer never armed its timer")
		}
		time.Sleep(100 * time.Microsecond) // yield; the fake clock does not move
	}
	h.clock.Step(quiet)
	for {
		select {
		case r := <-h.results:
			return r
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				h.t.Fatal("no reconcile")
			}
			h.clock.Step(quiet)
		}
	}
}

// waitIdle waits for the daemon to be idle: start returns from within the
// first snapshot's hook, while the daemon is still busy.
func (h *harness) waitIdle() {
	h.t.Helper()
	select {
	case <-h.d.Idle():
	case <-time.After(5 * time.Second):
		h.t.Fatal("the daemon never became idle")
	}
}

func (h *harness) write(rel, content string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.root, rel), []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) expectNoResult() {
	h.t.Helper()
	select {
	case r := <-h.results:
		h.t.Fatalf("unexpected reconcile %+v", r)
	default:
	}
}

func TestCPUOfflineIsOneChange(t *testing.T) {
	h := start(t)
	h.write("sys/devices/system/cpu/online", "0\n")
	h.write("sys/devices/system/node/node0/cpulist", "0\n")
	os.RemoveAll(filepath.Join(h.root, "sys/devices/system/cpu/cpu1/topology"))
	h.uevents.Event(uevent.Event{Action: uevent.ActionOffline, Subsystem: "cpu", DevPath: "/devices/system/cpu/cpu1"})

	r := h.settle()
	want := []topology.Change{
		{Resource: "cpu", Node: -1, Old: "2", New: "1"},
		{Resource: "cpus", Node: 0, Old: "0-1", New: "0"},
	}
	if diff := cmp.Diff(want, r.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if r.Batch.Cause != debounce.TriggerUevent || r.Latency != quiet {
		t.Errorf("batch cause %s latency %v, want uevent after %v", r.Batch.Cause, r.Latency, quiet)
	}
	m := h.d.Metrics()
	if got := testutil.ToFloat64(m.TopologyChanges); got != 1 {
		t.Errorf("topology changes = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Capacity.WithLabelValues("cpu", "core")); got != 1 {
		t.Errorf("capacity gauge cpu = %v, want 1", got)
	}
	if got := testutil.ToFloat64(m.Uevents.WithLabelValues("cpu", "offline")); got != 1 {
		t.Errorf("uevents{cpu,offline} = %v, want 1", got)
	}
	if got := testutil.CollectAndCount(m.DetectionLatency); got != 1 {
		t.Errorf("detection latency samples = %d, want 1", got)
	}
	h.expectNoResult()
}

// TestMetricsUncompressed: /metrics answers uncompressed also to a scraper
// that accepts gzip (as Prometheus does), and has the daemon's metrics.
func TestMetricsUncompressed(t *testing.T) {
	h := start(t)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	h.d.handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", rec.Code, rec.Body)
	}
	if enc := rec.Header().Get("Content-Encoding"); enc != "" {
		t.Errorf("/metrics: Content-Encoding %q, want none", enc)
	}
	if !strings.Contains(rec.Body.String(), "hotplugd_reconciles_total") {
		t.Errorf("/metrics has no hotplugd_reconciles_total:\n%s", rec.Body)
	}
}

// TestReconcileTiming: a reconcile's stages are in order from its batch's
// due time on, and at debug level they are logged after the changes, so that
// the log entries a reader waits for are not delayed by it.
func TestReconcileTiming(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	h := startLogged(t, nil, nil, zap.New(core))
	started := logs.Len() // the first snapshot's entries
	h.write("sys/devices/system/cpu/online", "0\n")
	h.write("sys/devices/system/node/node0/cpulist", "0\n")
	os.RemoveAll(filepath.Join(h.root, "sys/devices/system/cpu/cpu1/topology"))
	h.uevents.Event(uevent.Event{Action: uevent.ActionOffline, Subsystem: "cpu", DevPath: "/devices/system/cpu/cpu1"})
	r := h.settle()

	tm := r.Timing
	if tm.Start.Before(r.Batch.Due) || tm.Read.Before(tm.Start) || tm.Diffed.Before(tm.Read) || tm.Reported.Before(tm.Diffed) {
		t.Errorf("stages out of order: due %v, timing %+v", r.Batch.Due, tm)
	}
	var msgs []string
	var timing map[string]any
	for _, e := range logs.All()[started:] {
		if e.LoggerName != "daemon" {
			continue
		}
		msgs = append(msgs, e.Message)
		if e.Message == "reconcile timing" {
			timing = e.ContextMap()
		}
	}
	want := []string{"topology changed: cpu: 2 -> 1", "topology changed: node 0 cpus: 0-1 -> 0", "reconcile timing"}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Fatalf("daemon log (-want +got):\n%s", diff)
	}
	wantTiming := map[string]any{
		"trigger": "uevent", "events": int64(1),
		"first_trigger": r.Batch.First, "last_trigger": r.Batch.Last, "due": r.Batch.Due,
		"late": tm.Start.Sub(r.Batch.Due), "read": tm.Read.Sub(tm.Start), "diff": tm.Diffed.Sub(tm.Read),
		"report": tm.Reported.Sub(tm.Diffed), "reported": tm.Reported,
	}
	if diff := cmp.Diff(wantTiming, timing); diff != "" {
		t.Errorf("reconcile timing fields (-want +got):\n%s", diff)
	}
}

func TestBurstIsOneReconcileWithoutChange(t *testing.T) {
	h := start(t)
	for i := 0; i < 10000; i++ {
		h.uevents.Event(uevent.Event{Action: uevent.ActionOnline, Subsystem: "memory", DevPath: "/devices/system/memory/memory1"})
	}
	r := h.settle()
	if r.Batch.Count != 10000 || len(r.Changes) != 0 {
		t.Errorf("reconcile of %d events with %d changes, want 10000 and none", r.Batch.Count, len(r.Changes))
	}
	h.expectNoResult()
	if got := testutil.ToFloat64(h.d.Metrics().Reconciles.WithLabelValues("uevent")); got != 1 {
		t.Errorf("reconciles{uevent} = %v, want 1", got)
	}
}

func TestHugePagesWriteIsAChange(t *testing.T) {
	h := start(t)
	h.write("sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "16\n")
	h.write("sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages", "16\n")
	h.hp.Changed("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
	r := h.settle()
	want := []topology.Change{
		{Resource: "hugepages-2Mi", Node: -1, Old: "0", New: "32Mi"},
		{Resource: "hugepages-2Mi", Node: 0, Old: "0", New: "32Mi"},
	}
	if diff := cmp.Diff(want, r.Changes); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
	if r.Batch.Cause != debounce.TriggerHugePages {
		t.Errorf("cause = %s", r.Batch.Cause)
	}
}

func TestOverflowForcesAReread(t *testing.T) {
	h := start(t)
	h.uevents.Overflow(os.ErrDeadlineExceeded)
	r := h.settle()
	if r.Batch.Cause != debounce.TriggerOverflow || r.Err != nil {
		t.Errorf("result = %+v, want an overflow reconcile", r)
	}
	if got := testutil.ToFloat64(h.d.Metrics().UeventOverflows); got != 1 {
		t.Errorf("overflows = %v, want 1", got)
	}
}

func TestNodeUeventRescansHugePageFiles(t *testing.T) {
	h := start(t)
	h.uevents.Event(uevent.Event{Action: uevent.ActionAdd, Subsystem: "node", DevPath: "/devices/system/node/node1"})
	h.settle()
	if h.hugepage.rescans != 2 { // the first snapshot's, and this reconcile's
		t.Errorf("rescans = %d, want 2", h.hugepage.rescans)
	}
}

// TestEveryReconcileRescansHugePageFiles: whatever triggers a reconcile,
// it rescans the hugepage files before it reads the counts, as
// pkg/hugepagewatch's doc says the caller does.
func TestEveryReconcileRescansHugePageFiles(t *testing.T) {
	h := start(t)
	for i, trigger := range []func(){
		func() {
			h.uevents.Event(uevent.Event{Action: uevent.ActionOnline, Subsystem: "memory", DevPath: "/devices/system/memory/memory1"})
		},
		func() { h.hp.Changed("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages") },
		func() { h.hp.Overflow(os.ErrDeadlineExceeded) },
		func() { h.Trigger(debounce.TriggerSignal) },
	} {
		trigger()
		r := h.settle()
		if want := i + 2; h.hugepage.rescans != want { // the first snapshot's, and one per reconcile since
			t.Errorf("after a reconcile on %s: rescans = %d, want %d", r.Batch.Cause, h.hugepage.rescans, want)
		}
	}
}

func TestReadErrorIsReportedAndRetried(t *testing.T) {
	h := start(t)
	h.write("proc/meminfo", "garbage\n")
	h.Trigger(debounce.TriggerSignal)
	r := h.settle()
	if r.Err == nil || !strings.Contains(r.Err.Error(), "meminfo") {
		t.Fatalf("Err = %v, want the meminfo parse error", r.Err)
	}
	if got := testutil.ToFloat64(h.d.Metrics().ReconcileErrors); got != 1 {
		t.Errorf("reconcile errors = %v", got)
	}
	h.write("proc/meminfo", "MemTotal:        4194304 kB\n")
	h.Trigger(debounce.TriggerSignal)
	if r := h.settle(); r.Err != nil || len(r.Changes) != 0 {
		t.Errorf("after repair: %+v, want a clean reconcile", r)
	}
}

func (h *harness) Trigger(t debounce.Trigger) { h.d.Trigger(t) }

func TestResyncTicks(t *testing.T) {
	h := start(t)
	for h.clock.Waiters() < 1 {
		time.Sleep(100 * time.Microsecond)
	}
	h.clock.Step(time.Minute)
	r := h.settle()
	if r.Batch.Cause != debounce.TriggerResync {
		t.Errorf("cause = %s, want resync", r.Batch.Cause)
	}
	if h.hugepage.rescans != 2 {
		t.Errorf("rescans = %d, want 2 (start and resync)", h.hugepage.rescans)
	}
}

func TestStatusLine(t *testing.T) {
	h := start(t)
	if got := statusLine(h.d.Last()); got != "capacity cpu=2 hugepages-2Mi=0 memory=4Gi" {
		t.Errorf("statusLine = %q", got)
	}
}

// lifecycle records how a fake source was run and closed.
type lifecycle struct {
	mu                             sync.Mutex
	ran, running, closed, tooEarly bool
}

func (l *lifecycle) run(ctx context.Context) error {
	l.mu.Lock()
	l.ran, l.running = true, true
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
	return nil
}

func (l *lifecycle) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.tooEarly = l.tooEarly || l.running
	return nil
}

// check reports how the source was left when Run returned: its Run must
// have been called and have returned, and Close called after that.
func (l *lifecycle) check(t *testing.T, name string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case !l.ran:
		t.Errorf("%s: Run returned before the source's Run was called", name)
	case l.running:
		t.Errorf("%s: the source's Run still runs after Run returned", name)
	}
	if !l.closed {
		t.Errorf("%s: not closed", name)
	}
	if l.tooEarly {
		t.Errorf("%s: closed while its Run was running", name)
	}
}

type lifecycleUevents struct{ lifecycle }

func (s *lifecycleUevents) Run(ctx context.Context, _ uevent.Handler) error { return s.run(ctx) }

type lifecycleHugePages struct{ lifecycle }

func (s *lifecycleHugePages) Run(ctx context.Context, _ hugepagewatch.Handler) error {
	return s.run(ctx)
}
func (s *lifecycleHugePages) Rescan() ([]string, error) { return nil, nil }

// TestRunReturnsAfterItsGoroutines: whatever Run returns with, the
// goroutines it started have returned and the sources are closed after
// them (the parent context is never cancelled here).
func TestRunReturnsAfterItsGoroutines(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name    string
		setup   func(root string, cfg *Config)
		wantErr string
	}{
		{
			name:    "metrics address in use",
			setup:   func(_ string, cfg *Config) { cfg.MetricsAddr = busy.Addr().String() },
			wantErr: "daemon: metrics: listen tcp " + busy.Addr().String(),
		},
		{
			name: "first snapshot fails",
			setup: func(root string, _ *Config) {
				os.WriteFile(filepath.Join(root, "proc/meminfo"), []byte("garbage\n"), 0o644)
			},
			wantErr: "daemon: first snapshot: ",
		},
		{
			name: "a task fails",
			setup: func(_ string, cfg *Config) {
				cfg.MetricsAddr = "127.0.0.1:0"
				cfg.Resync = time.Minute
			},
			wantErr: "task failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if err := fixturegen.OneNode(2, 4194304, 0).WriteDir(root); err != nil {
				t.Fatal(err)
			}
			ue, hp := &lifecycleUevents{}, &lifecycleHugePages{}
			cfg := Config{
				SysfsRoot: filepath.Join(root, "sys"), ProcfsRoot: filepath.Join(root, "proc"),
				QuietWindow: quiet, MaxDelay: 5 * time.Second,
				Clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)), Uevents: ue, HugePages: hp,
			}
			tt.setup(root, &cfg)
			d, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			d.AddTask(func(context.Context) error { return errors.New("task failed") })
			err = d.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Run() = %v, want an error containing %q", err, tt.wantErr)
			}
			ue.check(t, "uevents")
			hp.check(t, "hugepages")
		})
	}
}

// holdClock holds the reconcile at its first read of the clock until the
// test releases it: the moment after the debouncer handed a batch over and
// before the reconcile runs. It recognizes the reconcile by its caller.
type holdClock struct {
	*clocktesting.FakeClock
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (c *holdClock) Now() time.Time {
	if c.armed.Load() && calledFrom("(*Daemon).reconcile") && c.armed.CompareAndSwap(true, false) {
		c.held <- struct{}{}
		<-c.release
	}
	return c.FakeClock.Now()
}

// calledFrom reports whether the caller's caller is the function whose
// name ends in fn.
func calledFrom(fn string) bool {
	pc, _, _, ok := runtime.Caller(2)
	return ok && strings.HasSuffix(runtime.FuncForPC(pc).Name(), fn)
}

// TestBusyHasNoGap: Busy is true from a trigger until the reconcile of its
// batch is done, including the moment between the debouncer handing the
// batch over and the reconcile starting: the remedy must not act on a
// drift that is being re-read.
func TestBusyHasNoGap(t *testing.T) {
	hold := &holdClock{held: make(chan struct{}), release: make(chan struct{})}
	var busyInHook atomic.Bool
	h := startWith(t, func(c *clocktesting.FakeClock) clock.WithTicker {
		hold.FakeClock = c
		return hold
	}, func(d *Daemon, _ Result) { busyInHook.Store(d.Busy()) })
	h.waitIdle()
	hold.armed.Store(true)
	h.uevents.Event(uevent.Event{Action: uevent.ActionOnline, Subsystem: "memory", DevPath: "/devices/system/memory/memory1"})
	if !h.d.Busy() {
		t.Error("Busy() = false with a trigger pending")
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.clock.Waiters() < 2 { // the resync ticker and the debounce timer
		if time.Now().After(deadline) {
			t.Fatal("the debouncer never armed its timer")
		}
		time.Sleep(100 * time.Microsecond) // yield; the fake clock does not move
	}
	h.clock.Step(quiet)
	// The debouncer may have armed its timer from a time read before the
	// step (see settle): step again until the batch is handed over.
	for held := false; !held; {
		select {
		case <-hold.held:
			held = true
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the batch was never handed over")
			}
			h.clock.Step(quiet)
		}
	}
	if !h.d.Busy() {
		t.Error("Busy() = false between the debouncer handing the batch over and the reconcile")
	}
	close(hold.release)
	h.next()
	if !busyInHook.Load() {
		t.Error("Busy() = false in the reconcile's hooks")
	}
}

// TestIdle: a consumer woken by Idle instead of polling Busy sees the end
// of every burst, once the reconcile and its hooks are done.
func TestIdle(t *testing.T) {
	type seen struct {
		busy, idleClosed bool
	}
	inHook := make(chan seen, 10)
	h := startWith(t, nil, func(d *Daemon, _ Result) {
		select {
		case <-d.Idle():
			inHook <- seen{d.Busy(), true}
		default:
			inHook <- seen{d.Busy(), false}
		}
	})
	if got := <-inHook; !got.busy || got.idleClosed {
		t.Errorf("in the first snapshot's hook: %+v, want busy and not idle", got)
	}
	// start returned from within the hook: idle once it is done.
	h.waitIdle()
	if h.d.Busy() {
		t.Error("Busy() = true once idle")
	}

	h.uevents.Event(uevent.Event{Action: uevent.ActionOnline, Subsystem: "memory", DevPath: "/devices/system/memory/memory1"})
	idle := h.d.Idle()
	select {
	case <-idle:
		t.Fatal("Idle() closed with a burst pending")
	default:
	}
	h.settle()
	if got := <-inHook; !got.busy || got.idleClosed {
		t.Errorf("in the reconcile's hook: %+v, want busy and not idle", got)
	}
	select {
	case <-idle:
	case <-time.After(5 * time.Second):
		t.Fatal("Idle() channel not closed after the reconcile")
	}
	if h.d.Busy() {
		t.Error("Busy() = true once idle")
	}
}
