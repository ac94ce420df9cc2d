package integration

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/test/systemd"
)

// TestIntegrationJournaldAndNotify runs `hotplugd run` as systemd would:
// stderr is a journal stream (JOURNAL_STREAM names its device:inode), a
// NOTIFY_SOCKET and WATCHDOG_USEC are set. With a real standalone journald,
// a CPU change must be read back with `journalctl -o json` with its
// structured fields and priority, and READY, STATUS and WATCHDOG must
// arrive on the notify socket.
func TestIntegrationJournaldAndNotify(t *testing.T) {
	m := machinetest.Acquire(t)
	j := systemd.StartJournald(t)

	dir := t.TempDir()
	notifyPath := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	messages := make(chan string, 1000)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				close(messages)
				return
			}
			messages <- string(buf[:n])
		}
	}()

	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(stderr.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "run", "--standalone", "--metrics-addr", daemontest.FreeAddr(t))
	cmd.Env = append(daemontest.Env(),
		"JOURNAL_STREAM="+strconv.FormatUint(st.Dev, 10)+":"+strconv.FormatUint(st.Ino, 10),
		"NOTIFY_SOCKET="+notifyPath,
		"WATCHDOG_USEC=200000")
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	pid := strconv.Itoa(cmd.Process.Pid)

	ready := waitMessage(t, messages, 10*time.Second, "READY=1")
	if !strings.Contains(ready, "STATUS=capacity cpu=2") {
		t.Errorf("READY message %q has no capacity STATUS", ready)
	}
	waitMessage(t, messages, 2*time.Second, "WATCHDOG=1")

	m.SetCPUOnline(t, 1, false)
	entries := j.WaitEntries(t, 10*time.Second, 1, "hotplugd", "_PID="+pid, "HOTPLUG_RESOURCE=cpu")
	e := entries[0]
	want := map[string]string{
		"PRIORITY": "6", "HOTPLUG_RESOURCE": "cpu", "HOTPLUG_OLD": "2", "HOTPLUG_NEW": "1",
		"HOTPLUG_TRIGGER": "uevent", "HOTPLUG_LOGGER": "daemon", "SYSLOG_IDENTIFIER": "hotplugd",
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("journal entry %s = %q, want %q (entry %v)", k, e[k], v, e)
		}
	}
	if !strings.HasPrefix(e["MESSAGE"], "topology changed: cpu: 2 -> 1") {
		t.Errorf("MESSAGE = %q", e["MESSAGE"])
	}
	waitMessage(t, messages, 5*time.Second, "STATUS=capacity cpu=1")

	if b, _ := os.ReadFile(stderr.Name()); len(b) != 0 {
		t.Errorf("the daemon wrote to stderr instead of the journal:\n%s", b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("hotplugd exited with %v", err)
	}
	waitMessage(t, messages, time.Second, "STOPPING=1")
}

// waitMessage returns the first notify message containing want.
func waitMessage(t *testing.T, messages <-chan string, timeout time.Duration, want string) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case m, ok := <-messages:
			if !ok {
				t.Fatalf("notify socket closed before %q", want)
			}
			if strings.Contains(m, want) {
				return m
			}
		case <-deadline:
			t.Fatalf("no %q on the notify socket within %v", want, timeout)
		}
	}
}
