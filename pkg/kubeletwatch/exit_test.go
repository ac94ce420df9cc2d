package kubeletwatch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
)

// sleeper starts a process that runs until killed, and the facts of a
// kubelet that is that process.
func sleeper(t *testing.T) (*exec.Cmd, *Facts) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	start, err := kubeletconfig.ProcessStart("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return cmd, &Facts{Kubelet: &kubeletconfig.Kubelet{PID: cmd.Process.Pid}, Start: start}
}

// TestWatchExit: the exit of the process comes through the pidfd, also
// when it exits before anyone waits for it; a stopped watch sends nothing.
func TestWatchExit(t *testing.T) {
	if !ownProcess("/proc", os.Getpid()) {
		t.Skip("/proc is not this process's PID namespace's")
	}
	for _, c := range []struct {
		name           string
		before, reaped bool
	}{
		{"exits", false, false},
		{"exits and is reaped", false, true},
		// Not reaped, it keeps its PID and start: the watch opens on a
		// process that has already exited.
		{"exited before the watch", true, false},
	} {
		cmd, f := sleeper(t)
		if c.before {
			cmd.Process.Kill()
			// Until it has exited, without reaping it.
			var info unix.Siginfo
			if err := unix.Waitid(unix.P_PID, f.Kubelet.PID, &info, unix.WEXITED|unix.WNOWAIT, nil); err != nil {
				t.Fatal(err)
			}
		}
		e := watchExit("/proc", f)
		if e == nil {
			t.Skip("no pidfd here (pidfd_open with PIDFD_NONBLOCK needs Linux 5.10)")
		}
		if !c.before {
			cmd.Process.Kill()
		}
		if c.reaped {
			cmd.Wait()
		}
		select {
		case <-e.exited:
		case <-time.After(10 * time.Second): // a bound for a failure, not a wait for success
			t.Fatalf("%s: no exit through the pidfd of %d", c.name, f.Kubelet.PID)
		}
		e.stop()
	}

	_, f := sleeper(t)
	e := watchExit("/proc", f)
	e.stop()
	e.stop() // twice is fine
	select {
	case <-e.exited:
		t.Fatal("a stopped watch sent an exit")
	default:
	}
}

// TestWatchExitRefuses: no pidfd stands for a kubelet it cannot be sure
// of; the watcher polls then.
func TestWatchExitRefuses(t *testing.T) {
	if !ownProcess("/proc", os.Getpid()) {
		t.Skip("/proc is not this process's PID namespace's")
	}
	_, f := sleeper(t)
	other := *f
	other.Start++ // the PID reused by another process
	// A fixture with the very process: its PID, its start.
	proc := newFakeProc(t)
	proc.write(fmt.Sprintf("%d/stat", f.Kubelet.PID), fmt.Sprintf("%d (kubelet) S%s %d 0 0\n", f.Kubelet.PID, strings.Repeat(" 1", 18), f.Start))
	if start, err := kubeletconfig.ProcessStart(proc.root, f.Kubelet.PID); err != nil || start != f.Start {
		t.Fatalf("the fixture's start: %d, %v; want %d", start, err, f.Start)
	}
	for name, c := range map[string]struct {
		root string
		f    *Facts
	}{
		"no facts":              {"/proc", nil},
		"no kubelet":            {"/proc", &Facts{}},
		"given by the operator": {"/proc", &Facts{Kubelet: &kubeletconfig.Kubelet{}}},
		"another start":         {"/proc", &other},
		"a procfs fixture":      {proc.root, f},
		"a procfs of no PID":    {t.TempDir(), f},
	} {
		if e := watchExit(c.root, c.f); e != nil {
			e.stop()
			t.Errorf("%s: a pidfd watch, want none (poll)", name)
		}
	}
	if e := watchExit("/proc", f); e == nil {
		t.Skip("no pidfd here (pidfd_open with PIDFD_NONBLOCK needs Linux 5.10)")
	} else {
		e.stop()
	}
	// A tree whose pid entry links to /proc/<pid> is that process.
	linked := t.TempDir()
	if err := os.Symlink(fmt.Sprintf("/proc/%d", f.Kubelet.PID), filepath.Join(linked, fmt.Sprint(f.Kubelet.PID))); err != nil {
		t.Fatal(err)
	}
	if e := watchExit(linked, f); e == nil {
		t.Error("a tree linking to /proc/<pid>: no pidfd watch")
	} else {
		e.stop()
	}
}

// TestRunPollsOnlyWhenItMust: Run polls while it looks for a kubelet and
// for one it can have no pidfd of (a procfs fixture); it does not for a
// kubelet given by the operator (only its files are watched), nor for a
// process it has the pidfd of (TestWatchExit; test/integration's
// TestIntegrationFollowsKubeletRestart follows a real one through it).
func TestRunPollsOnlyWhenItMust(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(cfgHead), 0o644); err != nil {
		t.Fatal(err)
	}
	proc := newFakeProc(t)
	withKubelet := newFakeProc(t)
	withKubelet.process(100, time.Now(), "/usr/bin/kubelet", "--config", cfg)
	for _, c := range []struct {
		name string
		o    Options
		poll bool
	}{
		{"no kubelet", Options{ProcRoot: proc.root}, true},
		{"a kubelet in a procfs fixture", Options{ProcRoot: withKubelet.root}, true},
		{"given by the operator", Options{ProcRoot: proc.root, Args: []string{"--config", cfg}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.o.Version, c.o.Poll, c.o.Clock = "v1.36.3", time.Second, testingclock.NewFakeClock(time.Now())
			w := New(c.o)
			armed := make(chan bool, 10)
			w.armed = func(poll bool) { armed <- poll }
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx) }()
			defer func() { cancel(); <-done }()
			select {
			case poll := <-armed:
				if poll != c.poll {
					t.Errorf("polls %v after its discovery, want %v", poll, c.poll)
				}
			case <-time.After(10 * time.Second): // a bound for a failure
				t.Fatal("Run did not discover")
			}
		})
	}
}
