package systemd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Paths of a default-namespace journald: the native socket go-systemd's
// journal package writes to, and the volatile journal journalctl reads by
// default.
const (
	JournalSocket = "/run/systemd/journal/socket"
	journaldBin   = "/lib/systemd/systemd-journald"
	socketDir     = "/run/systemd/journal"
	runtimeDir    = "/run/log/journal"
	// lockPath is flocked for a test's whole use of journald, so tests in
	// other packages (go test runs packages in parallel) neither start a
	// second journald nor stop one another is reading. A directory that
	// always exists, so nothing is left behind.
	lockPath = "/run"
)

// Journald is a systemd-journald a test writes to and reads from.
type Journald struct {
	// Started is true when the test started journald; false when one was
	// already listening on JournalSocket and is used as it is.
	Started bool
	// StartTime is how long journald took to open its socket.
	StartTime time.Duration
}

// StartJournald makes a journald available on JournalSocket until the test
// ends. When none is listening it starts /lib/systemd/systemd-journald, waits
// for its socket, and in tb.Cleanup stops it by PID and removes the
// directories it created. It skips the test, saying why, when it is not root
// or journald or journalctl cannot run.
func StartJournald(tb testing.TB) *Journald {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: starting systemd-journald needs root")
	}
	if _, err := exec.LookPath("journalctl"); err != nil {
		tb.Skipf("skipping: journalctl not found: %v", err)
	}
	lock(tb)

	if isSocket(JournalSocket) {
		tb.Logf("using the journald already listening on %s", JournalSocket)
		return &Journald{}
	}
	if _, err := os.Stat(journaldBin); err != nil {
		tb.Skipf("skipping: no journald to start: %v", err)
	}

	var created []string
	for _, d := range []string{"/run/systemd", socketDir, "/run/log", runtimeDir} {
		if _, err := os.Lstat(d); errors.Is(err, os.ErrNotExist) {
			created = append(created, d)
		}
	}
	// Removed deepest first, after journald has stopped (cleanups run last
	// in, first out).
	tb.Cleanup(func() {
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.RemoveAll(created[i]); err != nil {
				tb.Errorf("remove %s: %v", created[i], err)
			}
		}
	})
	if err := os.MkdirAll(socketDir, 0o755); err != nil {
		tb.Skipf("skipping: cannot create %s: %v", socketDir, err)
	}

	var out bytes.Buffer
	cmd := exec.Command(journaldBin)
	cmd.Stdout, cmd.Stderr = &out, &out
	// Should the test binary die without its cleanups (a timeout panic),
	// the kernel still stops journald.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Skipf("skipping: start %s: %v", journaldBin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() { stop(tb, cmd, exited) })

	for !isSocket(JournalSocket) {
		select {
		case err := <-exited:
			exited <- err // for stop
			tb.Skipf("skipping: %s exited before opening %s: %v\n%s", journaldBin, JournalSocket, err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Since(begin) > 10*time.Second {
			tb.Skipf("skipping: %s did not open %s within 10s\n%s", journaldBin, JournalSocket, out.String())
		}
	}
	j := &Journald{Started: true, StartTime: time.Since(begin)}
	tb.Logf("started %s (pid %d), socket up in %v", journaldBin, cmd.Process.Pid, j.StartTime)
	return j
}

// stop ends the journald this package started: SIGTERM (journald syncs
// its files and exits), SIGKILL after 10s.
func stop(tb testing.TB, cmd *exec.Cmd, exited chan error) {
	begin := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		tb.Errorf("stop journald (pid %d): %v", cmd.Process.Pid, err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		tb.Errorf("journald (pid %d) still running 10s after SIGTERM; killing it", cmd.Process.Pid)
		_ = cmd.Process.Kill()
		<-exited
	}
	tb.Logf("stopped journald (pid %d) in %v", cmd.Process.Pid, time.Since(begin))
}

// lock holds an exclusive flock on lockPath until the test ends.
func lock(tb testing.TB) {
	tb.Helper()
	fd, err := syscall.Open(lockPath, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		tb.Skipf("skipping: open %s to lock it: %v", lockPath, err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err = syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			syscall.Close(fd)
			tb.Fatalf("lock %s for journald: %v", lockPath, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	tb.Cleanup(func() { syscall.Close(fd) }) // closing releases the lock
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// Entries runs `journalctl -o json` for the entries of identifier
// (SYSLOG_IDENTIFIER) that also match every FIELD=VALUE in matches, and
// returns their fields. journalctl prints a field that is not valid UTF-8 or
// repeated in one entry as a JSON array; such a field is returned as its
// JSON text.
func (j *Journald) Entries(tb testing.TB, identifier string, matches ...string) []map[string]string {
	tb.Helper()
	entries, err := readEntries(identifier, matches)
	if err != nil {
		tb.Fatal(err)
	}
	return entries
}

// WaitEntries polls Entries until at least n entries match, and fails the
// test after timeout. journald writes an entry within milliseconds of
// receiving it.
func (j *Journald) WaitEntries(tb testing.TB, timeout time.Duration, n int, identifier string, matches ...string) []map[string]string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		entries, err := readEntries(identifier, matches)
		if err != nil {
			tb.Fatal(err)
		}
		if len(entries) >= n {
			return entries
		}
		if time.Now().After(deadline) {
			tb.Fatalf("journal: %d entries for -t %s %s after %v, want %d", len(entries), identifier, strings.Join(matches, " "), timeout, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readEntries(identifier string, matches []string) ([]map[string]string, error) {
	args := append([]string{"--no-pager", "-o", "json", "-t", identifier}, matches...)
	var stderr bytes.Buffer
	cmd := exec.Command("journalctl", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("journalctl %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var entries []map[string]string
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var raw map[string]json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("journalctl %s: decode: %v", strings.Join(args, " "), err)
		}
		e := make(map[string]string, len(raw))
		for k, v := range raw {
			var s string
			if json.Unmarshal(v, &s) == nil {
				e[k] = s
			} else {
				e[k] = string(v)
			}
		}
		entries = append(entries, e)
	}
	return entries, nil
}
