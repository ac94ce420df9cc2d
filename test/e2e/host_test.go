//go:build e2e

package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/machinetest"
)

// devicePluginSocket is where every kubelet puts its device plugin socket,
// whatever its root directory (a constant of the device plugin API).
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// kubeletSysctls are the sysctls a kubelet sets at start
// (protectKernelDefaults off): vm.overcommit_memory=1, kernel.panic=10,
// kernel.panic_on_oops=1.
var kubeletSysctls = []string{
	"/proc/sys/vm/overcommit_memory",
	"/proc/sys/kernel/panic",
	"/proc/sys/kernel/panic_on_oops",
}

// kubeletHostPaths are the paths outside its root directory that a kubelet
// creates: the first two always (hard-coded in the kubelet), the others
// when its configuration does not move them (ours does; they are watched
// in case a kubelet version ignores that).
var kubeletHostPaths = []string{
	devicePluginSocket,
	"/var/log/containers",
	"/var/log/pods",
	"/var/lib/kubelet/pki",
	"/usr/libexec/kubernetes/kubelet-plugins/volume/exec",
	"/etc/cni/net.d",
	"/etc/kubernetes",
	// The hostPath volumes of hotplugd's DaemonSet (DirectoryOrCreate),
	// made by the kubelet that runs its pod.
	"/var/lib/hotplugd",
	"/run/dbus",
}

// hostDirs are the directories whose entries are compared before and after
// the whole run: anything new there is reported (the kubelet's known paths
// are restored by name; this catches what a new version adds).
var hostDirs = []string{"/etc", "/opt", "/run", "/var/lib", "/var/log", "/usr/libexec"}

// hostState is what a kubelet changes on the host, recorded before it
// starts, so that restore puts back exactly that.
type hostState struct {
	rootDir string // the kubelet's, bind-mounted onto itself
	sysctls map[string]string
	cgroups map[string]bool // kubepods directories that existed
	mounts  map[string]bool // mount points that existed
	// created are the shallowest missing ancestors of kubeletHostPaths:
	// whatever is there at the end was created after.
	created []string
	// chains are the iptables and ip6tables chains per table that existed
	// (none when the commands are not installed).
	chains map[string]map[string]bool
}

// iptablesTables are the tables a kubelet adds its chains to
// (KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY, KUBE-FIREWALL with a rule in
// INPUT and OUTPUT) when iptables is installed.
var iptablesTables = []string{"mangle", "nat", "filter"}

// iptablesChains lists the chains of every table, keyed "<command>
// <table>"; nothing for a command that is not installed.
func iptablesChains() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, cmd := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(cmd); err != nil {
			continue
		}
		for _, table := range iptablesTables {
			rules, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
			if err != nil {
				continue
			}
			chains := map[string]bool{}
			for _, line := range strings.Split(string(rules), "\n") {
				if f := strings.Fields(line); len(f) >= 2 && (f[0] == "-N" || f[0] == "-P") {
					chains[f[1]] = true
				}
			}
			out[cmd+" "+table] = chains
		}
	}
	return out
}

// restoreIptables removes the chains that appeared since before, and the
// rules that jump to them.
func restoreIptables(before map[string]map[string]bool) []error {
	var errs []error
	for key, chains := range iptablesChains() {
		cmd, table, _ := strings.Cut(key, " ")
		var added []string
		for c := range chains {
			if !before[key][c] {
				added = append(added, c)
			}
		}
		if len(added) == 0 {
			continue
		}
		rules, err := exec.Command(cmd, "-w", "-t", table, "-S").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s -t %s -S: %w", cmd, table, err))
			continue
		}
		for _, line := range strings.Split(string(rules), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "-A" || !before[key][f[1]] {
				continue
			}
			if i := slices.Index(f, "-j"); i < 0 || i+1 >= len(f) || !slices.Contains(added, f[i+1]) {
				continue
			}
			// The rule as -S printed it, quoted comments unquoted.
			args := append([]string{"-w", "-t", table, "-D"}, splitRule(line[len("-A "):])...)
			if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("%s %s: %v: %s", cmd, strings.Join(args, " "), err, out))
			}
		}
		for _, op := range []string{"-F", "-X"} {
			for _, c := range added {
				if out, err := exec.Command(cmd, "-w", "-t", table, op, c).CombinedOutput(); err != nil {
					errs = append(errs, fmt.Errorf("%s -t %s %s %s: %v: %s", cmd, table, op, c, err, out))
				}
			}
		}
	}
	return errs
}

// splitRule splits a rule as iptables -S prints it into arguments: words,
// and "double-quoted strings" as one.
func splitRule(s string) []string {
	var args []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		args = append(args, cur.String())
	}
	return args
}

// recordHost records the host before a kubelet with root directory rootDir
// starts.
func recordHost(rootDir string) (*hostState, error) {
	h := &hostState{rootDir: rootDir, sysctls: map[string]string{}, mounts: map[string]bool{}}
	for _, p := range kubeletSysctls {
		v, err := readTrim(p)
		if err != nil {
			return nil, err
		}
		h.sysctls[p] = v
	}
	h.chains = iptablesChains()
	var err error
	if h.cgroups, err = kubepodsCgroups(); err != nil {
		return nil, err
	}
	mounts, err := mountPoints()
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		h.mounts[m] = true
	}
	for _, p := range kubeletHostPaths {
		if root := missingRoot(p); root != "" && !slices.Contains(h.created, root) {
			h.created = append(h.created, root)
		}
	}
	return h, nil
}

// restore undoes what the kubelet changed; the kubelet must be stopped. It
// returns what it could not undo.
func (h *hostState) restore() []error {
	var errs []error
	for p, old := range h.sysctls {
		if now, err := readTrim(p); err == nil && now == old {
			continue
		}
		if err := os.WriteFile(p, []byte(old), 0); err != nil {
			errs = append(errs, fmt.Errorf("restore %s to %s: %w", p, old, err))
		}
	}
	errs = append(errs, restoreIptables(h.chains)...)
	// The bind mount of the root directory (and anything below it), the
	// deepest first.
	mounts, err := mountPoints()
	if err != nil {
		errs = append(errs, err)
	}
	for i := len(mounts) - 1; i >= 0; i-- {
		m := mounts[i]
		if h.mounts[m] {
			continue
		}
		if m != h.rootDir && !strings.HasPrefix(m, h.rootDir+"/") {
			errs = append(errs, fmt.Errorf("a mount appeared at %s while the kubelet ran, outside its root directory: left alone", m))
			continue
		}
		if err := syscall.Unmount(m, 0); err != nil {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
			}
		}
	}
	// The kubepods cgroups it created, the deepest first.
	now, err := kubepodsCgroups()
	if err != nil {
		errs = append(errs, err)
	}
	var created []string
	for d := range now {
		if !h.cgroups[d] {
			created = append(created, d)
		}
	}
	slices.SortFunc(created, func(a, b string) int {
		if da, db := strings.Count(a, "/"), strings.Count(b, "/"); da != db {
			return db - da
		}
		return strings.Compare(a, b)
	})
	for _, d := range created {
		if err := os.Remove(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	for _, p := range h.created {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("remove %s (created by the kubelet): %w", p, err))
		}
	}
	return errs
}

// pushHostRestore records the host for a kubelet with root directory
// rootDir and restores it when t ends (after the kubelet's own cleanup,
// which is registered later), or on SIGINT.
func pushHostRestore(t *testing.T, rootDir string) {
	t.Helper()
	h, err := recordHost(rootDir)
	if err != nil {
		t.Fatal(err)
	}
	var errs []error
	restore := emergency.push("restore the host after the kubelet", func() {
		errs = h.restore()
		for _, err := range errs {
			fmt.Fprintln(os.Stderr, "e2e: host restore:", err)
		}
	})
	t.Cleanup(func() {
		restore()
		for _, err := range errs {
			t.Error(err)
		}
	})
}

// kubepodsCgroups lists the directories under any cgroup mount whose path
// has a component starting with "kubepods".
func kubepodsCgroups() (map[string]bool, error) {
	roots, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, root := range roots {
		entries, err := os.ReadDir(root)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), "kubepods") {
				continue
			}
			filepath.WalkDir(filepath.Join(root, e.Name()), func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					out[p] = true
				}
				return nil
			})
		}
	}
	return out, nil
}

// mountInfo is one line of /proc/self/mountinfo: the mount point and the
// file system type.
type mountInfo struct{ point, fstype string }

func readMountInfo() ([]mountInfo, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		sep := slices.Index(fields, "-")
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) {
			continue
		}
		out = append(out, mountInfo{point: unescapeMount(fields[4]), fstype: fields[sep+1]})
	}
	return out, sc.Err()
}

// mountPoints are the mount points, in mount order.
func mountPoints() ([]string, error) { return mountsOf(func(string) bool { return true }) }

// cgroupMounts are the mount points of cgroup and cgroup2 file systems.
func cgroupMounts() ([]string, error) {
	return mountsOf(func(fstype string) bool { return fstype == "cgroup" || fstype == "cgroup2" })
}

// mountsOf are the mount points of the file system types keep accepts.
func mountsOf(keep func(fstype string) bool) ([]string, error) {
	infos, err := readMountInfo()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range infos {
		if keep(m.fstype) {
			out = append(out, m.point)
		}
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// missingRoot is the shallowest ancestor of p (or p) that does not exist,
// "" when p exists.
func missingRoot(p string) string {
	if _, err := os.Lstat(p); err == nil {
		return ""
	}
	root := p
	for dir := filepath.Dir(p); dir != "/"; dir = filepath.Dir(dir) {
		if _, err := os.Lstat(dir); err == nil {
			break
		}
		root = dir
	}
	return root
}

// machine is the state of the machine before the run: restored on SIGINT
// and checked at the end.
var machine struct {
	values  map[string]string   // cpuN/online, nr_hugepages files, sysctls
	order   []string            // the order to write them back
	entries map[string][]string // hostDirs' entries
	// leftovers is what the final restore had to put back.
	leftovers []string
	// appeared are new entries of hostDirs (maybe not ours: reported).
	appeared []string
}

// recordMachine records cpu online states, hugepage counts, the kubelet's
// sysctls and hostDirs' entries, under machinetest's lock (another test
// process may have cpu1 offline for a while), and pushes their restore as
// the last emergency step.
func recordMachine() error {
	machine.values = map[string]string{}
	machine.entries = map[string][]string{}
	cpus, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/online")
	// Per-node hugepage files before the global ones: the global count is
	// their sum.
	nodeHuge, _ := filepath.Glob("/sys/devices/system/node/node*/hugepages/hugepages-*/nr_hugepages")
	globalHuge, _ := filepath.Glob("/sys/kernel/mm/hugepages/hugepages-*/nr_hugepages")
	var err error
	lockErr := withMachineLock(10*time.Minute, func() {
		for _, p := range slices.Concat(cpus, nodeHuge, globalHuge, kubeletSysctls) {
			var v string
			if v, err = readTrim(p); err != nil {
				return
			}
			machine.values[p] = v
			machine.order = append(machine.order, p)
		}
	})
	if err = errors.Join(lockErr, err); err != nil {
		return err
	}
	for _, d := range hostDirs {
		machine.entries[d] = dirEntries(d)
	}
	emergency.push("restore the machine", restoreMachine)
	return nil
}

// restoreMachine writes back every recorded value that differs, under
// machinetest's lock, and notes what it had to do and what appeared in
// hostDirs.
func restoreMachine() {
	wait := 10 * time.Minute
	if aborting.Load() {
		wait = 30 * time.Second
	}
	err := withMachineLock(wait, func() {
		for _, p := range machine.order {
			old := machine.values[p]
			if now, err := readTrim(p); err == nil && now == old {
				continue
			}
			err := os.WriteFile(p, []byte(old), 0)
			machine.leftovers = append(machine.leftovers, fmt.Sprintf("%s was not %s at the end (restored: %v)", p, old, errOK(err)))
		}
	})
	if err != nil {
		machine.leftovers = append(machine.leftovers, err.Error())
	}
	for _, d := range hostDirs {
		for _, e := range dirEntries(d) {
			if !slices.Contains(machine.entries[d], e) {
				machine.appeared = append(machine.appeared, filepath.Join(d, e))
			}
		}
	}
}

// lockHeld counts this run's tests that hold machinetest's lock.
var lockHeld atomic.Int32

// acquireMachine is machinetest.Acquire, counted in lockHeld.
func acquireMachine(t *testing.T) *machinetest.Machine {
	t.Helper()
	m := machinetest.Acquire(t)
	lockHeld.Add(1)
	t.Cleanup(func() { lockHeld.Add(-1) }) // before the unlock, registered earlier
	return m
}

// withMachineLock runs fn holding machinetest's lock, or at once when a
// test of this run holds it (an aborted run: the machine is then ours to
// put back). It gives up after wait.
func withMachineLock(wait time.Duration, fn func()) error {
	if lockHeld.Load() > 0 {
		fn()
		return nil
	}
	f, err := os.OpenFile(machinetest.LockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("machinetest's lock: %w", err)
	}
	defer f.Close()
	for deadline := time.Now().Add(wait); ; time.Sleep(100 * time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("machinetest's lock %s: %w", machinetest.LockPath, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("machinetest's lock %s held by another process for %v: the machine was not checked", machinetest.LockPath, wait)
		}
	}
	defer syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	fn()
	return nil
}

// finalMachineCheck reports what the final restore found out of place, and
// any kubelet still running.
func finalMachineCheck() error {
	left := machine.leftovers
	if pid, ok := runningKubelet(); ok && skipReason == "" {
		left = append(left, fmt.Sprintf("a kubelet (pid %d) still runs", pid))
	}
	for _, p := range machine.appeared {
		fmt.Printf("e2e: %s appeared on the host during the run (not one of the kubelet's known paths; left alone)\n", p)
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("the machine was not as found at the end of the run:\n  %s", strings.Join(left, "\n  "))
}

// runningKubelet finds a process named kubelet (read from /proc only)
// that runs a kubelet binary: not another program run through a symlink
// named kubelet (test/integration's crash tests run their own binary so,
// possibly at the same time as this run), nor `kubelet --version` (what
// hotplugd preflight runs to learn the version).
func runningKubelet() (int, bool) {
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		if b, err := os.ReadFile(c); err == nil && strings.TrimSpace(string(b)) == "kubelet" {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(c)))
			if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && filepath.Base(strings.TrimSuffix(exe, " (deleted)")) != "kubelet" {
				continue
			}
			if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
				if args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00"); len(args) == 2 && args[1] == "--version" {
					continue
				}
			}
			if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !isZombie(st) {
				return pid, true
			}
		}
	}
	return 0, false
}

// isZombie reads the state field of /proc/PID/stat.
func isZombie(stat []byte) bool {
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(strings.TrimSpace(s[i+1:]), "Z")
}

func dirEntries(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func readTrim(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func errOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}
