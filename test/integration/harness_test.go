package integration

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/hotplugd/hotplugd/internal/daemontest"
)

// binary is the hotplugd built for this test run.
var binary string

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeKubeletEnv); mode == fakeKubeletProcessMode {
		os.Exit(fakeKubeletProcess())
	} else if mode != "" {
		os.Exit(fakeKubelet(mode))
	}
	dir, err := os.MkdirTemp("", "hotplugd-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // TestIntegrationUnprivileged runs it as nobody
	if binary, err = daemontest.Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	stopSharedAPIServer()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The daemon as tests see it: internal/daemontest.
type (
	logEntry   = daemontest.Entry
	daemonProc = daemontest.Daemon
)

// startDaemon runs hotplugd with JSON logs on stderr and metrics on a free
// loopback port, and waits until it logged its first snapshot. It is
// stopped (SIGTERM, then SIGKILL) by PID when the test ends.
func startDaemon(t testing.TB, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonAs(t, nil, extra...)
}

// startDaemonAs is startDaemon with the daemon running under cred (nil: as
// the test).
func startDaemonAs(t testing.TB, cred *syscall.Credential, extra ...string) *daemonProc {
	t.Helper()
	return daemontest.Start(t, binary, cred, append([]string{"--standalone"}, extra...)...)
}

// startClusterDaemon is startDaemon without --standalone: extra says where
// the API server and the Node are.
func startClusterDaemon(t testing.TB, extra ...string) *daemonProc {
	t.Helper()
	return daemontest.Start(t, binary, nil, extra...)
}

// isChange matches the daemon's log entry for a changed capacity resource.
func isChange(resource, old, new string) func(logEntry) bool {
	return func(e logEntry) bool {
		return strings.HasPrefix(e.Msg, "topology changed") && e.Str("resource") == resource &&
			e.Fields["numa_node"] == nil && e.Str("old") == old && e.Str("new") == new
	}
}

// capacityChanges returns the capacity (not per-node) changes among entries.
func capacityChanges(entries []logEntry) []string {
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Msg, "topology changed") && e.Fields["numa_node"] == nil {
			out = append(out, e.Str("resource")+": "+e.Str("old")+" -> "+e.Str("new"))
		}
	}
	return out
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}
