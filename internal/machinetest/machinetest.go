package machinetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// LockPath is the file that serialises machine-changing tests.
const LockPath = "/tmp/hotplugd-machinetest.lock"

// Machine changes this machine's CPUs and hugepages for one test.
type Machine struct {
	t testing.TB
}

// Acquire skips the test unless it runs as root, then takes the machine
// lock for the rest of the test.
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
	return &Machine{t: t}
}

// SetCPUOnline puts cpu online or offline and restores the original state
// when the test ends. It skips the test when the CPU cannot be offlined.
func (m *Machine) SetCPUOnline(cpu int, online bool) {
	m.t.Helper()
	path := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/online", cpu)
	m.set(path, boolValue(online))
}

// SetHugePages writes n to a hugepage count file (global, per node or
// /proc/sys/vm/nr_hugepages) and checks the kernel granted exactly n. Every
// hugepage count on the machine is restored when the test ends.
func (m *Machine) SetHugePages(path string, n uint64) {
	m.t.Helper()
	m.set(path, strconv.FormatUint(n, 10))
}

// set writes value to path, restoring the old value in Cleanup, and fails
// unless the kernel reads back what was written.
func (m *Machine) set(path, value string) {
	m.t.Helper()
	old, err := read(path)
	if errors.Is(err, os.ErrNotExist) {
		m.t.Skipf("machinetest: %s does not exist on this machine", path)
	}
	if err != nil {
		m.t.Fatalf("machinetest: %v", err)
	}
	if err := write(path, value); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			m.t.Skipf("machinetest: %s is not writable here: %v", path, err)
		}
		m.t.Fatalf("machinetest: %v", err)
	}
	m.t.Cleanup(func() {
		if err := write(path, old); err != nil {
			m.t.Errorf("machinetest: restore %s to %q: %v", path, old, err)
		}
		if got, err := read(path); err != nil || got != old {
			m.t.Errorf("machinetest: %s is %q after restore, want %q (err %v)", path, got, old, err)
		}
	})
	got, err := read(path)
	if err != nil {
		m.t.Fatalf("machinetest: %v", err)
	}
	if got != value {
		m.t.Fatalf("machinetest: wrote %q to %s, the kernel reads back %q", value, path, got)
	}
}

// HugePageFiles returns every hugepage count file of one size: the global
// sysfs file, each node's file and, for the default size,
// /proc/sys/vm/nr_hugepages.
func HugePageFiles(pageSizeKiB uint64) []string {
	name := fmt.Sprintf("hugepages-%dkB", pageSizeKiB)
	files := []string{filepath.Join("/sys/kernel/mm/hugepages", name, "nr_hugepages")}
	nodes, _ := filepath.Glob(filepath.Join("/sys/devices/system/node/node*/hugepages", name, "nr_hugepages"))
	files = append(files, nodes...)
	if pageSizeKiB == 2048 {
		files = append(files, "/proc/sys/vm/nr_hugepages")
	}
	return files
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
