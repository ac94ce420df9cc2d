package kubeletconfig

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stat is /proc/<pid>/stat of a kubelet on a test machine, starttime 4217.
const stat = "4242 (kubelet) S 1 4242 4242 0 -1 4194560 93613 0 23 0 2043 1160 0 0 20 0 17 0 4217 2155151360 24717 " +
	"18446744073709551615 1 1 0 0 0 0 0 0 1073808632 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n"

func TestParseStartTime(t *testing.T) {
	tests := []struct {
		name, in string
		want     uint64
		wantErr  string
	}{
		{name: "kubelet", in: stat, want: 4217},
		{name: "a comm with spaces and parentheses", in: strings.Replace(stat, "(kubelet)", "(a) b (c))", 1), want: 4217},
		{name: "a comm that looks like fields", in: strings.Replace(stat, "(kubelet)", "(S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20)", 1), want: 4217},
		{name: "large", in: strings.Replace(stat, " 4217 ", " 18446744073709551615 ", 1), want: 1<<64 - 1},
		{name: "empty", in: "", wantErr: "no comm"},
		{name: "no closing parenthesis", in: "4242 (kubelet S 1", wantErr: "no comm"},
		{name: "truncated", in: "4242 (kubelet) S 1 4242 4242 0 -1", wantErr: "6 fields after comm, want at least 20"},
		{name: "not a number", in: strings.Replace(stat, " 4217 ", " x ", 1), wantErr: `starttime "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStartTime([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseStartTime() = %d, %v, want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("parseStartTime() = %d, %v, want %d", got, err, tt.want)
			}
		})
	}
}

func TestProcessStart(t *testing.T) {
	procRoot := filepath.Join(t.TempDir(), "proc")
	mustWrite(t, filepath.Join(procRoot, "4242", "stat"), stat)
	if got, err := ProcessStart(procRoot, 4242); err != nil || got != 4217 {
		t.Errorf("ProcessStart(fake, 4242) = %d, %v, want 4217", got, err)
	}
	_, err := ProcessStart(procRoot, 4243)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "kubeletconfig: read "+procRoot+"/4243/stat") {
		t.Errorf("ProcessStart of a process that is gone = %v, want ErrNotExist naming the file", err)
	}
	mustWrite(t, filepath.Join(procRoot, "1", "stat"), "garbage")
	if _, err := ProcessStart(procRoot, 1); err == nil || !strings.Contains(err.Error(), "kubeletconfig: parse "+procRoot+"/1/stat: ") {
		t.Errorf("ProcessStart of a malformed stat = %v, want a parse error naming the file", err)
	}
}

// TestProcessStartReal: in the real /proc, a process's start is stable, and
// a process started later has a later (or, within a clock tick, the same)
// start.
func TestProcessStartReal(t *testing.T) {
	self, err := ProcessStart("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ProcessStart("/proc", os.Getpid()); err != nil || again != self || self == 0 {
		t.Errorf("ProcessStart(self) = %d then %d, %v; want the same non-zero value", self, again, err)
	}
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	child, err := ProcessStart("/proc", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if child < self {
		t.Errorf("the child started at %d, before its parent (%d)", child, self)
	}
}
