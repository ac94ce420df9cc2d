package kubeletctl

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap/zaptest"
)

func TestNewCommands(t *testing.T) {
	tests := []struct {
		name    string
		opts    CommandOptions
		wantErr string // "" means no error
	}{
		{"both", CommandOptions{Stop: "rc-service kubelet stop", Start: "rc-service kubelet start"}, ""},
		{"no stop", CommandOptions{Start: "true"}, "kubeletctl: commands: the stop command is empty"},
		{"no start", CommandOptions{Stop: "true"}, "kubeletctl: commands: the start command is empty"},
		{"blank", CommandOptions{Stop: " ", Start: "\t\n"}, "the stop and the start command is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := NewCommands(tt.opts)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("NewCommands: %v", err)
				}
				if got := c.String(); got != "commands" {
					t.Errorf("String() = %q, want %q", got, "commands")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("NewCommands error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func newTestCommands(t *testing.T, stop, start string) *Commands {
	t.Helper()
	c, err := NewCommands(CommandOptions{Stop: stop, Start: start, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCommandsRun(t *testing.T) {
	tests := []struct {
		name   string
		script string
		// wantErr lists what the error must contain; nil means success.
		wantErr []string
		// notInErr lists what it must not contain.
		notInErr []string
	}{
		{name: "success", script: "echo stopping kubelet; exit 0"},
		{name: "no output", script: "true"},
		{
			name:    "failure carries status and output",
			script:  "echo on stdout; echo on stderr >&2; exit 3",
			wantErr: []string{`kubeletctl: stop command "echo on stdout; echo on stderr >&2; exit 3": exit status 3`, `output: "on stdout\non stderr"`},
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCommands(t, tt.script, "true")
			err := c.Stop(t.Context())
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Stop: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Stop succeeded, want an error")
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

// TestCommandsStartStop checks that each method runs its own command.
func TestCommandsStartStop(t *testing.T) {
	dir := t.TempDir()
	record := filepath.Join(dir, "record")
	c := newTestCommands(t, "echo stop >>"+record, "echo start >>"+record)
	if err := c.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff("stop\nstart\n", string(b)); diff != "" {
		t.Errorf("commands run (-want +got):\n%s", diff)
	}
}

// TestCommandsClose: Commands holds nothing, but is an io.Closer like
// Systemd so that the caller can close whichever controller it got; it
// still works after Close.
func TestCommandsClose(t *testing.T) {
	record := filepath.Join(t.TempDir(), "record")
	var c io.Closer = newTestCommands(t, "echo stop >>"+record, "true")
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v", err)
	}
	if err := c.(*Commands).Stop(t.Context()); err != nil {
		t.Errorf("Stop after Close: %v", err)
	}
}

func TestCommandsTimeout(t *testing.T) {
	c := newTestCommands(t, "true", "sleep 100")
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := c.Start(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want an error matching context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), "killed its process group") {
		t.Errorf("error %q does not say the command was killed", err)
	}
	// A bound for a broken kill, far below the command's 100s.
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("Start returned after %v", took)
	}
}

// TestCommandsCancelKillsProcessGroup cancels a command whose shell waits
// for a child it started in the background: the child, in the shell's
// process group, must die too.
func TestCommandsCancelKillsProcessGroup(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "pid")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	c := newTestCommands(t, "sleep 100 & echo $! >"+fifo+"; wait", "true")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	returned := make(chan error, 1)
	go func() { returned <- c.Stop(ctx) }()

	pid := readPID(t, fifo) // the child runs once the shell wrote its pid
	// Leave nothing behind should the test fail.
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	cancel()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Stop = %v, want an error matching context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return after ctx was canceled")
	}
	waitGone(t, pid)
}

// TestCommandsBackgroundHolder runs a start command that leaves a process
// holding its output (a kubelet started with `&`): Start returns once the
// shell exited, and the process is left alone.
func TestCommandsBackgroundHolder(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	c := newTestCommands(t, "true", "sleep 100 & echo $! >"+pidFile+"; echo started")
	c.drainGrace = 10 * time.Millisecond
	if err := c.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
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

// procState is the state letter in /proc/pid/stat, or "" when there is no
// such process.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...; comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
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

func TestTail(t *testing.T) {
	tests := []struct {
		name          string
		writes        []string
		want          string
		wantTruncated bool
	}{
		{"nothing", nil, "", false},
		{"fits", []string{"ab", "cd"}, "abcd", false},
		{"exactly full", []string{"ab", "cde"}, "abcde", false},
		{"drops the oldest", []string{"abc", "def"}, "bcdef", true},
		{"one large write", []string{"a", "0123456789"}, "56789", true},
		{"large then small", []string{"0123456789", "xy"}, "789xy", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tail{max: 5}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			got, truncated := b.text()
			if got != tt.want || truncated != tt.wantTruncated {
				t.Errorf("text() = %q, %v, want %q, %v", got, truncated, tt.want, tt.wantTruncated)
			}
		})
	}
}
