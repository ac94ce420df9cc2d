package kubeletctl

import (
	"bufio"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"
)

func TestNewCommand(t *testing.T) {
	tests := []struct {
		name    string
		restart string
		wantErr string // "" means no error
	}{
		{"given", "rc-service kubelet restart", ""},
		{"empty", "", "kubeletctl: the restart command is empty"},
		{"blank", " \t\n", "kubeletctl: the restart command is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCommand(CommandOptions{Restart: tt.restart})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewCommand: %v", err)
				}
				if got, want := c.String(), "restart command"; got != want {
					t.Errorf("String() = %q, want %q", got, want)
				}
				return
			}
			if err == nil || err.Error() != tt.wantErr {
				t.Fatalf("NewCommand error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func newTestCommand(t *testing.T, restart string) *Command {
	t.Helper()
	c, err := NewCommand(CommandOptions{Restart: restart, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCommandRestart(t *testing.T) {
	tests := []struct {
		name   string
		script string
		// wantErr lists what the error must contain; nil means success.
		wantErr []string
		// notInErr lists what it must not contain.
		notInErr []string
	}{
		{name: "success", script: "echo restarting kubelet; exit 0"},
		{name: "no output", script: "true"},
		{
			name:    "failure carries status and output",
			script:  "echo on stdout; echo on stderr >&2; exit 3",
			wantErr: []string{`kubeletctl: restart command "echo on stdout; echo on stderr >&2; exit 3": exit status 3`, `output: "on stdout\non stderr"`},
		},
		{
			name:    "failure without output",
			script:  "exit 1",
			wantErr: []string{"exit status 1, no output"},
		},
		{
			name:     "only the tail of long output",
			script:   "echo BEG''IN; i=0; while [ $i -lt 500 ]; do echo xxxxxxxxx; i=$((i+1)); done; echo END; exit 2",
			wantErr:  []string{"exit status 2", `output: "...`, `xxxxxxxxx\nEND"`},
			notInErr: []string{"BEGIN"},
		},
		{
			name:    "command not found",
			script:  "no-such-command-kubeletctl",
			wantErr: []string{"exit status 127", "no-such-command-kubeletctl: not found"},
		},
		{
			name:    "killed by a signal",
			script:  "kill -KILL $$",
			wantErr: []string{"signal: killed, no output"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := newTestCommand(t, tt.script).Restart(t.Context())
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Restart: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Restart succeeded, want an error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			for _, s := range tt.notInErr {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q contains %q", err, s)
				}
			}
			if len(err.Error()) > 2*errorOutput {
				t.Errorf("error is %d bytes long, want at most %d", len(err.Error()), 2*errorOutput)
			}
		})
	}
}

// TestCommandRunsOnce checks that one Restart runs the command once, with
// stdin from /dev/null.
func TestCommandRunsOnce(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	c := newTestCommand(t, "cat >>"+record+"; echo restart >>"+record)
	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), "restart\n"; got != want {
		t.Errorf("the command wrote %q, want %q", got, want)
	}
}

// TestCommandClose: Command holds nothing, but is an io.Closer like
// Systemd so that the caller can close whichever Restarter it got; it
// still works after Close.
func TestCommandClose(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	var c io.Closer = newTestCommand(t, "echo restart >>"+record)
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := c.(*Command).Restart(t.Context()); err != nil {
		t.Errorf("Restart after Close: %v", err)
	}
	if _, err := os.Stat(record); err != nil {
		t.Errorf("the command did not run after Close: %v", err)
	}
}

// TestCommandCancelGoesOn ends Restart's ctx while the command runs:
// Restart returns at once, saying so, and the command is neither killed nor
// cut short. The command writes its pid to one FIFO, then waits on another
// (the gate) before it writes the marker, so that the test knows it runs
// and that it has not ended when Restart returns.
//
// It runs in a synctest bubble, where the goroutines Restart leaves behind
// (one waiting for the shell, one draining its output) are the bubble's: a
// goroutine in a system call or waiting for I/O is not durably blocked, so
// synctest.Wait returns once both ended, i.e. once the command exited.
func TestCommandCancelGoesOn(t *testing.T) {
	dir := t.TempDir()
	started, gate, marker := filepath.Join(dir, "started"), filepath.Join(dir, "gate"), filepath.Join(dir, "marker")
	for _, fifo := range []string{started, gate} {
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := "echo $$ >" + started + "; read line <" + gate + "; echo $line >" + marker

	// The bubble's clock stands still while a process runs, so nothing in
	// the bubble can bound a wait for the command. This watchdog, outside
	// it, kills the shell after a minute of real time should Restart wait
	// for it: the test then fails rather than hangs.
	var shell atomic.Int64
	watchdog := time.AfterFunc(time.Minute, func() {
		if pid := shell.Load(); pid > 0 {
			_ = syscall.Kill(int(pid), syscall.SIGKILL)
		}
	})
	defer watchdog.Stop()

	synctest.Test(t, func(t *testing.T) {
		c := newTestCommand(t, script)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		returned := make(chan error, 1)
		go func() { returned <- c.Restart(ctx) }()

		pid := readPID(t, started) // the shell runs once it wrote its pid
		shell.Store(int64(pid))
		cancel()
		err := <-returned
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Restart = %v, want an error matching context.Canceled", err)
		}
		for _, want := range []string{`kubeletctl: restart command "echo $$ >`, "the command goes on, detached, pid " + strconv.Itoa(pid)} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}

		// The shell waits at the gate: Restart did not wait for it, and
		// did not kill it.
		if state := procState(pid); state == "" || state == "Z" {
			t.Fatalf("the command (pid %d) ended with Restart's ctx (state %q), want it running", pid, state)
		}
		if _, err := os.Stat(marker); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("marker before the gate opened: %v", err)
		}
		// Opening the gate blocks until the shell opens its end.
		if err := os.WriteFile(gate, []byte("finished\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the command ran to its end
		b, err := os.ReadFile(marker)
		if err != nil {
			t.Fatalf("the command did not run to its end after Restart returned: %v", err)
		}
		if got, want := string(b), "finished\n"; got != want {
			t.Errorf("marker = %q, want %q", got, want)
		}
	})
}

// TestCommandOwnSession checks that the command runs in a session and a
// process group of its own, without a controlling terminal: a signal to
// hotplugd's process group (a terminal's ^C, a kill of the group) does not
// reach it. The shell copies its own /proc/<pid>/stat.
func TestCommandOwnSession(t *testing.T) {
	out := filepath.Join(t.TempDir(), "stat")
	if err := newTestCommand(t, "cat /proc/$$/stat >"+out).Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := parseProcStat(string(b))
	if err != nil {
		t.Fatal(err)
	}
	b, err = os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	self, err := parseProcStat(string(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the command: %+v; the test: %+v", cmd, self)
	if cmd.session != cmd.pid || cmd.pgrp != cmd.pid {
		t.Errorf("the shell (pid %d) is in session %d, process group %d: want it the leader of both", cmd.pid, cmd.session, cmd.pgrp)
	}
	if cmd.session == self.session || cmd.pgrp == self.pgrp {
		t.Errorf("the shell is in session %d, process group %d; the test in %d, %d: want them apart", cmd.session, cmd.pgrp, self.session, self.pgrp)
	}
	if cmd.ttyNr != 0 {
		t.Errorf("the shell has controlling terminal %#x, want none", cmd.ttyNr)
	}
}

// TestCommandBackgroundHolder runs a restart command that leaves a process
// holding its output (a kubelet started with `&`): Restart returns once the
// shell exited, and the process is left alone.
func TestCommandBackgroundHolder(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	c := newTestCommand(t, "sleep 100 & echo $! >"+pidFile+"; echo started")
	began := time.Now()
	if err := c.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	// A bound far below the holder's 100s.
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Restart returned after %v", took)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		waitGone(t, pid)
	})
	if state := procState(pid); state == "" || state == "Z" {
		t.Errorf("background process %d is gone (state %q), want it left running", pid, state)
	}
}

func readPID(t *testing.T, fifo string) int {
	t.Helper()
	f, err := os.Open(fifo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// procStat is what the tests read of /proc/<pid>/stat (proc_pid_stat(5)).
type procStat struct {
	pid   int
	state string
	// pgrp and session are fields 5 and 6, ttyNr field 7 (0: no
	// controlling terminal).
	pgrp, session, ttyNr int
}

// parseProcStat parses a /proc/<pid>/stat line: pid (comm) state ppid pgrp
// session tty_nr ..., where comm may contain spaces and parentheses.
func parseProcStat(s string) (procStat, error) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, errors.New("proc stat: no (comm) in " + strconv.Quote(s))
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 5 {
		return procStat{}, errors.New("proc stat: too few fields in " + strconv.Quote(s))
	}
	var p procStat
	var errs [4]error
	p.pid, errs[0] = strconv.Atoi(strings.TrimSpace(s[:open]))
	p.state = f[0]
	p.pgrp, errs[1] = strconv.Atoi(f[2])
	p.session, errs[2] = strconv.Atoi(f[3])
	p.ttyNr, errs[3] = strconv.Atoi(f[4])
	if err := errors.Join(errs[:]...); err != nil {
		return procStat{}, errors.New("proc stat: " + err.Error() + " in " + strconv.Quote(s))
	}
	return p, nil
}

// procState is the state letter in /proc/pid/stat, or "" when there is no
// such process.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	p, err := parseProcStat(string(b))
	if err != nil {
		return ""
	}
	return p.state
}

// waitGone waits until pid is dead: gone, or a zombie its new parent has
// yet to reap. The 10s are a bound for a broken kill.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		state := procState(pid)
		if state == "" || state == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d still running (state %s)", pid, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		line    string
		want    procStat
		wantErr bool
	}{
		{
			name: "shell",
			line: "4242 (sh) S 4241 4242 4242 0 -1 4194560 120 0 0 0 0 0 0 0 20 0 1 0 1234 2666496 224 18446744073709551615\n",
			want: procStat{pid: 4242, state: "S", pgrp: 4242, session: 4242, ttyNr: 0},
		},
		{
			name: "comm with spaces and parentheses",
			line: "17 (a (b) c) R 1 16 15 34816 17 4194304\n",
			want: procStat{pid: 17, state: "R", pgrp: 16, session: 15, ttyNr: 34816},
		},
		{name: "no comm", line: "17 R 1 16 15 0", wantErr: true},
		{name: "truncated", line: "17 (sh) S 1 16", wantErr: true},
		{name: "not a number", line: "17 (sh) S 1 x 15 0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStat(tt.line)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseProcStat = %+v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("parseProcStat = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadTail(t *testing.T) {
	tests := []struct {
		name          string
		content       string
		want          string
		wantTruncated bool
	}{
		{"nothing", "", "", false},
		{"fits", "abcd", "abcd", false},
		{"exactly full", "abcde", "abcde", false},
		{"drops the oldest", "abcdef", "bcdef", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := memFile("test")
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteString(tt.content); err != nil {
				t.Fatal(err)
			}
			got, truncated := readTail(f, 5)
			if got != tt.want || truncated != tt.wantTruncated {
				t.Errorf("readTail = %q, %v, want %q, %v", got, truncated, tt.want, tt.wantTruncated)
			}
		})
	}
}

// TestCommandOutlivesHotplugd: a restart command that writes after the
// process that started it is gone (rc-service prints between its stop and
// its start) runs to its end: its output is no pipe whose reader died. The
// starter is a child process (the test binary, re-run as a helper) that
// starts the command and exits at once.
func TestCommandOutlivesHotplugd(t *testing.T) {
	if os.Getenv("HOTPLUGD_TEST_STARTER") == "1" {
		c, err := NewCommand(CommandOptions{Restart: os.Getenv("HOTPLUGD_TEST_SCRIPT")})
		if err != nil {
			os.Exit(3)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		_ = c.Restart(ctx)
		os.Exit(0) // hotplugd dies; the command is mid-way
	}
	// (The starter makes no directory: it exits without its cleanup.)
	dir := t.TempDir()
	marker := filepath.Join(dir, "started")
	// The command waits for its starter to be gone (and reaped), then for
	// the test's go-ahead (so the check below cannot race the command's
	// writes under load), then writes, as a restart prints between its
	// stop and its start.
	goAhead := filepath.Join(dir, "go")
	script := "p=$PPID; while kill -0 $p 2>/dev/null; do sleep 0.02; done; while [ ! -e " + goAhead + " ]; do sleep 0.02; done; echo stopped the kubelet; echo started the kubelet >&2; echo done >" + marker
	cmd := exec.Command(os.Args[0], "-test.run=^TestCommandOutlivesHotplugd$")
	cmd.Env = append(os.Environ(), "HOTPLUGD_TEST_STARTER=1", "HOTPLUGD_TEST_SCRIPT="+script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("starter: %v\n%s", err, out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command finished before its starter exited: the test proves nothing")
	}
	if err := os.WriteFile(goAhead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A bound for a command that runs for a moment after its starter.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == "done" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the restart command died with its starter: it never wrote its marker")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
