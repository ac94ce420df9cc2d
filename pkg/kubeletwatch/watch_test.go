package kubeletwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// fakeProc is a procfs with a boot time 1000 s ago (its uptime is not
// updated: the tests run within seconds).
type fakeProc struct {
	t    *testing.T
	root string
	boot time.Time
}

func newFakeProc(t *testing.T) *fakeProc {
	p := &fakeProc{t: t, root: filepath.Join(t.TempDir(), "proc"), boot: time.Now().Add(-1000 * time.Second).Truncate(time.Second)}
	p.write("uptime", fmt.Sprintf("%.2f 100.00\n", time.Since(p.boot).Seconds()))
	// A process that is not a kubelet.
	p.process(1, time.Now(), "/sbin/init")
	return p
}

func (p *fakeProc) write(name, body string) {
	p.t.Helper()
	path := filepath.Join(p.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// process adds a process started at started with argv; its root is "/".
func (p *fakeProc) process(pid int, started time.Time, argv ...string) {
	p.t.Helper()
	ticks := started.Sub(p.boot) / (time.Second / userHZ)
	p.write(fmt.Sprintf("%d/cmdline", pid), strings.Join(argv, "\x00")+"\x00")
	p.write(fmt.Sprintf("%d/stat", pid), fmt.Sprintf("%d (%s) S%s %d 0 0\n", pid, filepath.Base(argv[0]), strings.Repeat(" 1", 18), ticks))
	for name, target := range map[string]string{"root": "/", "cwd": "/"} {
		if err := os.Symlink(target, filepath.Join(p.root, fmt.Sprint(pid), name)); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *fakeProc) exit(pid int) {
	if err := os.RemoveAll(filepath.Join(p.root, fmt.Sprint(pid))); err != nil {
		p.t.Fatal(err)
	}
}

const cfgHead = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// waitFacts waits until the watcher's facts satisfy ok, stepping the fake
// clock by poll (when not 0) whenever the watcher waits on it: the steps of
// a change (a file truncated then written, a process gone then another
// one) may each be published on the way.
func waitFacts(t *testing.T, w *Watcher, clk *testingclock.FakeClock, poll time.Duration, ok func(*Facts) bool) *Facts {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		ch := w.Changed()
		if f := w.Current(); f != nil && ok(f) {
			return f
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("the facts did not come: %+v (limits %q)", w.Current(), w.Current().Limit())
		case <-time.After(5 * time.Millisecond):
			if poll > 0 && clk.HasWaiters() {
				clk.Step(poll)
			}
		}
	}
}

// TestFollowsTheKubelet: no kubelet yet is "look again", a kubelet that
// starts later is found at the next poll, a write to its configuration is
// seen at once (and marks the running kubelet's allocatable as unknown), and
// a kubelet restarted by someone else with that configuration is the new
// kubelet, whose configuration is predicted again (issue 11, point 2).
func TestFollowsTheKubelet(t *testing.T) {
	proc := newFakeProc(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgHead+"systemReserved:\n  cpu: 100m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(cfg, old, old); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := testingclock.NewFakeClock(time.Now())
	const poll = 5 * time.Second
	w := New(Options{ProcRoot: proc.root, Version: "v1.36.3", Poll: poll, Log: zaptest.NewLogger(t), Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	// 1. No kubelet yet.
	f := waitFacts(t, w, clk, 0, func(f *Facts) bool { return true })
	if f.Kubelet != nil || !strings.Contains(f.Limit(), "no kubelet running yet") || f.Config() != nil || f.Remediable() {
		t.Fatalf("before any kubelet: %+v", f)
	}

	// 2. It starts: found at the next poll.
	// Started 30 s ago: the fake uptime does not advance, so the start
	// hotplugd computes moves later as the test runs.
	proc.process(100, time.Now().Add(-30*time.Second), "/usr/bin/kubelet", "--config", cfg, "--root-dir", root)
	f = waitFacts(t, w, clk, poll, func(f *Facts) bool { return f.Kubelet != nil })
	if f.Kubelet.PID != 100 || f.Release == nil || f.Release.Minor != 36 || !f.Remediable() || f.ConfigChanged {
		t.Fatalf("kubelet 100: %+v (limits %q)", f, f.Limit())
	}
	if got := f.Config().SystemReserved["cpu"]; got != "100m" {
		t.Errorf("systemReserved cpu %q, want 100m", got)
	}
	first := f.Fingerprint()

	// 3. The operator raises systemReserved: seen through inotify, no
	// poll needed. The running kubelet still uses the old value.
	if err := os.WriteFile(cfg, []byte(cfgHead+"systemReserved:\n  cpu: 500m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f = waitFacts(t, w, clk, 0, func(f *Facts) bool { return f.Kubelet != nil && f.Fingerprint() != first })
	if !f.ConfigChanged || f.Config() != nil || f.Fingerprint() == first || !strings.Contains(f.Limit(), "changed after the kubelet started") {
		t.Fatalf("after the edit: ConfigChanged %v, limits %q", f.ConfigChanged, f.Limit())
	}

	// 4. ...and restarts the kubelet: a new process, the new configuration.
	proc.exit(100)
	proc.process(200, time.Now().Add(2*time.Second), "/usr/bin/kubelet", "--config", cfg, "--root-dir", root)
	f = waitFacts(t, w, clk, poll, func(f *Facts) bool { return f.Kubelet != nil && f.Kubelet.PID == 200 })
	if f.Kubelet.PID != 200 || f.ConfigChanged || f.Config() == nil {
		t.Fatalf("kubelet 200: %+v (limits %q)", f, f.Limit())
	}
	if got := f.Config().SystemReserved["cpu"]; got != "500m" {
		t.Errorf("systemReserved cpu %q after the restart, want 500m", got)
	}

	// 5. It stops: "look again", not a permanent downgrade.
	proc.exit(200)
	f = waitFacts(t, w, clk, poll, func(f *Facts) bool { return f.Kubelet == nil })
	if f.Remediable() || !strings.Contains(f.Limit(), "no kubelet running yet") {
		t.Fatalf("after the kubelet exited: %+v", f)
	}
	proc.process(300, time.Now().Add(3*time.Second), "/usr/bin/kubelet", "--config", cfg, "--root-dir", root)
	waitFacts(t, w, clk, poll, func(f *Facts) bool { return f.Kubelet != nil && f.Kubelet.PID == 300 })
}

// TestIdlePollReadsOneFile: while the kubelet it knows runs, a poll
// changes nothing and publishes nothing.
func TestIdlePollPublishesNothing(t *testing.T) {
	proc := newFakeProc(t)
	proc.process(100, time.Now(), "/usr/bin/kubelet")
	clk := testingclock.NewFakeClock(time.Now())
	w := New(Options{ProcRoot: proc.root, Version: "v1.36.3", Poll: time.Second, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFacts(t, w, clk, 0, func(f *Facts) bool { return f.Kubelet != nil })
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond) // Run is past its start-up discoveries
	}
	ch := w.Changed()
	for range 5 {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(time.Second)
	}
	select {
	case <-ch:
		t.Fatalf("facts published on an idle poll: %+v", w.Current())
	case <-time.After(50 * time.Millisecond):
	}
}

// TestVersionOf: which version the daemon predicts for: the flag, else the
// kubelet's binary, else the Node; and a kubelet it does not know leaves it
// capacity only, with the reason.
func TestVersionOf(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.34.4'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	proc.process(7, time.Now(), bin)
	if err := os.Symlink(bin, filepath.Join(proc.root, "7", "exe")); err != nil {
		t.Fatal(err)
	}
	proc.process(8, time.Now(), "/nonexistent/kubelet")
	// The unit's and the pod's case: /proc/<pid>/exe cannot be read (no
	// ptrace), but preflight cached the answer of the binary at the
	// kubelet's start.
	cached, other := filepath.Join(dir, "usr-bin-kubelet"), filepath.Join(dir, "other-kubelet")
	for _, p := range []string{cached, other} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'Kubernetes v1.35.4'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "kubelet-version.json")
	if c, err := kubeletversion.FromBinaryCached(context.Background(), cached, cache, false); err != nil || c.Warning != "" {
		t.Fatal(c, err)
	}
	proc.process(9, time.Now(), cached)
	proc.process(10, time.Now(), other)
	node := func(v string, err error) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { return v, err }
	}
	for _, tt := range []struct {
		name      string
		flag      string
		pid       int
		node      func(context.Context) (string, error)
		wantMinor int
		wantLimit string
	}{
		{"the flag wins", "v1.37.2", 7, node("v1.36.3", nil), 37, ""},
		{"the binary wins over the Node", "", 7, node("v1.36.3", nil), 34, ""},
		{"the Node without a process", "", 0, node("v1.35.4", nil), 35, ""},
		{"the Node when the binary cannot be read", "", 8, node("v1.36.3", nil), 36, ""},
		{"preflight's answer for the binary wins over the Node", "", 9, node("v1.36.3", nil), 35, ""},
		{"not preflight's answer for another binary", "", 10, node("v1.36.3", nil), 36, ""},
		{"a pre-release", "", 0, node("v1.38.0-alpha.0", nil), 0, "capacity only, no remedy: kubelet v1.38.0-alpha.0 is not a release hotplugd knows (it knows 1.34, 1.35, 1.36, 1.37)"},
		{"too old", "v1.33.1", 7, nil, 0, "kubelet v1.33.1 is not a release hotplugd knows"},
		{"nothing to tell", "", 0, node("", errors.New("reading Node n: not found")), 0, "capacity only, no remedy: the kubelet's version is unknown (reading Node n: not found)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			w := New(Options{ProcRoot: proc.root, Version: tt.flag, NodeVersion: tt.node, VersionCache: cache})
			f := &Facts{}
			argv := map[int][]string{7: {bin}, 8: {"/nonexistent/kubelet"}, 9: {cached}, 10: {other}}[tt.pid]
			v, _, err := w.versionOf(context.Background(), tt.pid, 0, argv)
			w.release(f, v, err)
			switch {
			case tt.wantMinor == 0 && (f.Release != nil || !strings.Contains(f.Limit(), tt.wantLimit)):
				t.Errorf("got %v, %q; want no release and %q", f.Release, f.Limit(), tt.wantLimit)
			case tt.wantMinor != 0 && (f.Release == nil || f.Release.Minor != tt.wantMinor || f.Limit() != ""):
				t.Errorf("got %v, %q; want 1.%d", f.Release, f.Limit(), tt.wantMinor)
			}
		})
	}
}

// TestVersionAskedAgain (issue 19, found in the node VM): a kubelet whose
// version could not be found at discovery (the Node read timed out) is
// asked again at the next poll, not left without a remedy for as long as
// it runs; one whose version is found is not.
func TestVersionAskedAgain(t *testing.T) {
	proc := newFakeProc(t)
	proc.process(100, time.Now(), "/usr/bin/kubelet")
	var mu sync.Mutex
	asks, fail := 0, true
	node := func(context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asks++
		if fail {
			return "", errors.New("client rate limiter Wait returned an error: context deadline exceeded")
		}
		return "v1.36.3", nil
	}
	clk := testingclock.NewFakeClock(time.Now())
	const poll = 5 * time.Second
	w := New(Options{ProcRoot: proc.root, RootDir: t.TempDir(), NodeVersion: node, Poll: poll, Log: zaptest.NewLogger(t), Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	f := waitFacts(t, w, clk, 0, func(f *Facts) bool { return f.Kubelet != nil })
	if f.Release != nil || f.Remediable() || !strings.Contains(f.Limit(), "version is unknown") {
		t.Fatalf("with the Node unreadable: %+v (limits %q)", f, f.Limit())
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	f = waitFacts(t, w, clk, poll, func(f *Facts) bool { return f.Release != nil })
	if f.Release.Minor != 36 || !f.Remediable() {
		t.Fatalf("after the Node came back: %+v (limits %q)", f, f.Limit())
	}
	mu.Lock()
	before := asks
	mu.Unlock()
	for range 3 {
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(poll)
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if asks != before {
		t.Errorf("the Node was asked %d more times once the version was known", asks-before)
	}
}
