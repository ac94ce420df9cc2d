package fleet

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/procfs"
)

// procTotals sums what a set of processes hold, from /proc.
type procTotals struct {
	procs    int
	rss, pss uint64 // bytes; PSS shares the binary's pages among them
	fds      int
	threads  int
	cpu      float64 // seconds, user and system
}

func totalsOf(pids []int) procTotals {
	var t procTotals
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return t
	}
	for _, pid := range pids {
		p, err := fs.Proc(pid)
		if err != nil {
			continue
		}
		st, err := p.Stat()
		if err != nil {
			continue
		}
		t.procs++
		t.cpu += st.CPUTime()
		t.threads += st.NumThreads
		t.rss += uint64(st.ResidentMemory())
		if r, err := p.ProcSMapsRollup(); err == nil {
			t.pss += r.Pss
		}
		if n, err := p.FileDescriptorsLen(); err == nil {
			t.fds += n
		}
	}
	return t
}

// machineCPU is this machine's CPU time so far: busy and all, in seconds.
func machineCPU() (busy, all float64) {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return 0, 0
	}
	st, err := fs.Stat()
	if err != nil {
		return 0, 0
	}
	c := st.CPUTotal
	idle := c.Idle + c.Iowait
	all = c.User + c.Nice + c.System + idle + c.IRQ + c.SoftIRQ + c.Steal
	return all - idle, all
}

// cpuMark is machineCPU at one moment, for the busy share of a window.
type cpuMark struct{ busy, all float64 }

func markCPU() cpuMark {
	b, a := machineCPU()
	return cpuMark{b, a}
}

// busySince is the share of the machine's CPU time that was busy since m.
func (m cpuMark) busySince() float64 {
	b, a := machineCPU()
	if a <= m.all {
		return 0
	}
	return (b - m.busy) / (a - m.all)
}

// memAvailable is MemAvailable in bytes (0 when unknown).
func memAvailable() uint64 {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return 0
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemAvailableBytes == nil {
		return 0
	}
	return *mi.MemAvailableBytes
}

func memTotal() uint64 {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return 0
	}
	mi, err := fs.Meminfo()
	if err != nil || mi.MemTotalBytes == nil {
		return 0
	}
	return *mi.MemTotalBytes
}

// loadAvg is the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// ownFDs is how many descriptors the test process holds.
func ownFDs() int {
	d, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(d)
}

// raiseSysctl sets the sysctl at path to at least want, and restores its
// value when t ends; it returns the value before and after.
func raiseSysctl(t *testing.T, path string, want int) (was, now int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("SKIPPED: %v", err)
	}
	was, err = strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if was >= want {
		return was, was
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(want)), 0); err != nil {
		t.Skipf("SKIPPED: the fleet needs %s >= %d (it is %d) and it cannot be raised: %v", path, want, was, err)
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, []byte(strconv.Itoa(was)), 0); err != nil {
			t.Errorf("restoring %s to %d: %v", path, was, err)
		}
	})
	t.Logf("raised %s from %d to %d for the fleet (restored at the end)", path, was, want)
	return was, want
}

func mib(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

// machineTasks is how many tasks (processes and threads) the machine has,
// from /proc/loadavg's fourth field ("running/total").
func machineTasks() int {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return 0
	}
	_, total, _ := strings.Cut(f[3], "/")
	n, _ := strconv.Atoi(total)
	return n
}

func readInt(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	return n, err == nil
}

// taskRoom is how many more tasks (processes and threads: each counts)
// may be created here, and what limits it: kernel.threads-max and
// kernel.pid_max less the machine's tasks, and the pids cgroups of the
// test and their ancestors (pids.max less pids.current). A process that
// cannot create a thread there dies (the Go runtime aborts), whoever's it
// is, so the fleet must fit in it with room to spare.
func taskRoom() (room int, limit string) {
	room = math.MaxInt
	total := machineTasks()
	for _, p := range []string{"/proc/sys/kernel/threads-max", "/proc/sys/kernel/pid_max"} {
		if v, ok := readInt(p); ok && v-total < room {
			room, limit = v-total, fmt.Sprintf("%s %d with %d tasks on the machine", filepath.Base(p), v, total)
		}
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return room, limit
	}
	var dirs []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case slices.Contains(strings.Split(f[1], ","), "pids"): // cgroup v1
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup/pids", f[2]))
		case f[0] == "0" && f[1] == "": // cgroup v2, alone or beside v1
			dirs = append(dirs, filepath.Join("/sys/fs/cgroup", f[2]), filepath.Join("/sys/fs/cgroup/unified", f[2]))
		}
	}
	for _, dir := range dirs {
		for d := dir; strings.HasPrefix(d, "/sys/fs/cgroup"); d = filepath.Dir(d) {
			max, ok := readInt(filepath.Join(d, "pids.max"))
			if !ok {
				continue // "max", or not a pids cgroup
			}
			cur, _ := readInt(filepath.Join(d, "pids.current"))
			if max-cur < room {
				room, limit = max-cur, fmt.Sprintf("the pids cgroup %s: pids.max %d with %d tasks in it", d, max, cur)
			}
		}
	}
	return room, limit
}
