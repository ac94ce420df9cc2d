package machinetest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// LockPath is the file that serialises machine-changing tests.
const LockPath = "/tmp/hotplugd-machinetest.lock"

// Machine changes this machine's CPUs and hugepages while its test holds
// the machine lock.
type Machine struct{}

// Acquire skips the test unless it runs as root, then takes the machine
// lock for the rest of the test. Call it once per top-level test; subtests
// use the Machine it returns.
func Acquire(t testing.TB) *Machine {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("machinetest: needs root to change CPUs and hugepages; run the tests as root")
	}
	f, err := os.OpenFile(LockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("machinetest: open lock %s: %v", LockPath, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("machinetest: lock %s: %v", LockPath, err)
	}
	t.Cleanup(func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
	return &Machine{}
}

// SetCPUOnline puts cpu online or offline until t ends, and fails unless
// the kernel did it. It skips t when the CPU cannot be hot-plugged here.
func (m *Machine) SetCPUOnline(t testing.TB, cpu int, online bool) {
	t.Helper()
	path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)
	if got := m.set(t, path, boolValue(online)); got != boolValue(online) {
		t.Fatalf("machinetest: wrote %s to %s, the kernel reads back %s", boolValue(online), path, got)
	}
}

// SetHugePages writes n to a hugepage count file (global, per node or
// /proc/sys/vm/nr_hugepages) until t ends. The kernel may grant fewer pages
// than asked (fragmented memory, 1Gi pages): then t is skipped with the
// reason, as the machine cannot be put in that state.
func (m *Machine) SetHugePages(t testing.TB, path string, n uint64) {
	t.Helper()
	if got := m.set(t, path, strconv.FormatUint(n, 10)); got != strconv.FormatUint(n, 10) {
		t.Skipf("machinetest: asked %s for %d hugepages, the kernel granted %s", path, n, got)
	}
}

// set writes value to path, restores the old value when t ends (also on
// failure), and returns what the kernel reads back.
func (m *Machine) set(t testing.TB, path, value string) string {
	t.Helper()
	old, err := read(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("machinetest: %s does not exist on this machine", path)
	}
	if err != nil {
		t.Fatalf("machinetest: %v", err)
	}
	t.Cleanup(func() {
		if err := write(path, old); err != nil {
			t.Errorf("machinetest: restore %s to %q: %v", path, old, err)
		}
		if got, err := read(path); err != nil || got != old {
			t.Errorf("machinetest: %s is %q after restore, want %q (err %v)", path, got, old, err)
		}
	})
	if err := write(path, value); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			t.Skipf("machinetest: %s is not writable here: %v", path, err)
		}
		t.Fatalf("machinetest: %v", err)
	}
	got, err := read(path)
	if err != nil {
		t.Fatalf("machinetest: %v", err)
	}
	return got
}

func boolValue(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func write(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}
