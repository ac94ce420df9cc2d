//go:build e2e

package vm

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/internal/qemutest"
)

// Serial console line prefixes written by guestinit.
const (
	logPrefix   = "HOTPLUGD "
	replyPrefix = "INIT "
)

// Timeouts, generous for TCG on a loaded 2-core CI machine; the tests wait
// for what they expect and end as soon as it is there.
const (
	bootTimeout  = 90 * time.Second
	eventTimeout = 30 * time.Second
)

// build is what the tests share, made once on first use: the initramfs.
var build struct {
	once   sync.Once
	dir    string
	initrd string
	err    error
}

// running are the VMs not yet stopped, with their temporary directories.
var running struct {
	mu  sync.Mutex
	vms map[*vm]string
}

func TestMain(m *testing.M) {
	flag.Parse()
	machinetest.BeforeTimeout(5*time.Second, func() {
		fmt.Fprintln(os.Stderr, "vm: go test's -timeout is near: stopping the VMs")
		cleanup()
	})
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// cleanup kills the VMs still running, by PID, and removes the temporary
// files.
func cleanup() {
	running.mu.Lock()
	defer running.mu.Unlock()
	for v, dir := range running.vms {
		v.cmd.Process.Kill()
		os.RemoveAll(dir)
	}
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

// assets returns the directory hack/vm-assets.sh filled ($HOTPLUGD_VM_ASSETS,
// else its cache), or skips the test saying why.
func assets(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: not root: the end-to-end tests run as root (make e2e)")
	}
	dir := os.Getenv("HOTPLUGD_VM_ASSETS")
	if dir == "" {
		out, err := exec.Command("../../../hack/vm-assets.sh", "--check").Output()
		if err != nil {
			t.Skip("SKIPPED: no QEMU and guest kernel: run hack/vm-assets.sh once (~25 s, fetches Debian packages into ~/.cache/hotplugd/vm)")
		}
		dir = strings.TrimSpace(string(out))
	}
	for _, f := range []string{"qemu", "vmlinuz"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Skipf("SKIPPED: %v: run hack/vm-assets.sh", err)
		}
	}
	return dir
}

// initramfs builds (once) the guest's initramfs: /dev/console, /init
// (guestinit) and /hotplugd, both static.
func initramfs(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		start := time.Now()
		build.dir, build.err = os.MkdirTemp("", "hotplugd-vm-")
		if build.err != nil {
			return
		}
		bins := map[string]string{"init": "./guestinit", "hotplugd": "../../../cmd/hotplugd"}
		for _, name := range []string{"init", "hotplugd"} {
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(build.dir, name), bins[name])
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				build.err = fmt.Errorf("go build %s: %v\n%s", bins[name], err, out)
				return
			}
		}
		files := []cpioFile{
			{Name: "dev", Mode: cpioDir | 0o755},
			{Name: "dev/console", Mode: cpioChar | 0o600, Major: 5, Minor: 1},
			{Name: "proc", Mode: cpioDir | 0o755},
			{Name: "sys", Mode: cpioDir | 0o755},
		}
		for _, name := range []string{"init", "hotplugd"} {
			b, err := os.ReadFile(filepath.Join(build.dir, name))
			if err != nil {
				build.err = err
				return
			}
			files = append(files, cpioFile{Name: name, Mode: cpioReg | 0o755, Data: b})
		}
		var buf bytes.Buffer
		if build.err = writeInitramfs(&buf, files); build.err != nil {
			return
		}
		build.initrd = filepath.Join(build.dir, "initrd.gz")
		build.err = os.WriteFile(build.initrd, buf.Bytes(), 0o644)
		fmt.Fprintf(os.Stderr, "vm: built the initramfs (%d MiB) in %v\n", buf.Len()>>20, time.Since(start).Round(time.Millisecond))
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.initrd
}

// logEntry is one line of hotplugd's JSON log; Time is when the test read
// it from the serial console.
type logEntry struct{ daemontest.Entry }

// duration reads a duration field (zap writes seconds).
func (e logEntry) duration(key string) time.Duration {
	s, _ := e.Fields[key].(float64)
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// vm is a running guest.
type vm struct {
	t     *testing.T
	cmd   *exec.Cmd
	qmp   *qemutest.QMP
	stdin io.WriteCloser
	start time.Time // QEMU started
	boot  time.Duration
	first logEntry // the "topology" entry

	stderr bytes.Buffer // QEMU's (guarded by mu)
	mu     sync.Mutex
	cond   *sync.Cond
	lines  []string         // the whole serial console
	logs   []logEntry       // hotplugd's log
	inits  []map[string]any // guestinit's replies and events
	done   bool             // the console closed: QEMU exited
	nextID int
}

// lockedWriter writes to a buffer under the VM's lock.
type lockedWriter struct{ v *vm }

func (w lockedWriter) Write(p []byte) (int, error) {
	w.v.mu.Lock()
	defer w.v.mu.Unlock()
	return w.v.stderr.Write(p)
}

// boot starts QEMU with the guest and waits for hotplugd's first snapshot.
// args are more hotplugd flags. QEMU is killed by its PID when the test
// ends, unless powerOff stopped it first.
func boot(t *testing.T, args ...string) *vm {
	t.Helper()
	dir := assets(t)
	initrd := initramfs(t)
	sock := filepath.Join(t.TempDir(), "qmp.sock")
	// lpj= presets the delay loop: without it every CPU calibrates it on
	// its first online, ~2 s under TCG (qemu64 has no constant_tsc, so the
	// kernel cannot take the boot CPU's value), which would make a CPU
	// hot-add look 2 s slower than on real hardware. Its value only
	// matters for udelay without a TSC.
	cmdline := "console=ttyS0 panic=-1 quiet lpj=8000000 memhp_default_state=online_movable -- --log-level debug"
	if len(args) > 0 {
		cmdline += " " + strings.Join(args, " ")
	}
	cmd := exec.Command(filepath.Join(dir, "qemu"),
		"-accel", "tcg", "-cpu", "qemu64", "-m", "1G,slots=4,maxmem=8G", "-smp", "1,maxcpus=4",
		"-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot", "-nodefaults",
		"-kernel", filepath.Join(dir, "vmlinuz"), "-initrd", initrd, "-append", cmdline,
		"-qmp", "unix:"+sock+",server=on,wait=off")
	// Should the test binary die without its cleanups (go test's
	// -timeout), the kernel kills QEMU.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	v := &vm{t: t, cmd: cmd}
	v.cond = sync.NewCond(&v.mu)
	cmd.Stderr = lockedWriter{v}
	var err error
	if v.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.start = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running.mu.Lock()
	if running.vms == nil {
		running.vms = map[*vm]string{}
	}
	running.vms[v] = filepath.Dir(sock)
	running.mu.Unlock()
	t.Cleanup(v.kill)
	go v.readConsole(stdout)
	if v.qmp, err = qemutest.Dial(sock, 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, v.dump())
	}
	t.Cleanup(v.qmp.Close)
	v.first = v.waitLog(0, bootTimeout, func(e logEntry) bool { return e.Msg == "topology" })
	v.boot = v.first.Time.Sub(v.start)
	t.Logf("booted: QEMU start to hotplugd's first snapshot %v (%s)", v.boot.Round(time.Millisecond), v.first.RawLine)
	return v
}

// readConsole splits the serial console into hotplugd's log, guestinit's
// replies and the rest (kernel messages), kept for failure reports. A
// prefix is looked for anywhere in a line: a kernel message can land in
// front of it.
func (v *vm) readConsole(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		now := time.Now()
		v.mu.Lock()
		v.lines = append(v.lines, line)
		if i := strings.Index(line, logPrefix+"{"); i >= 0 {
			if e, ok := daemontest.ParseEntry(line[i+len(logPrefix):], now); ok {
				v.logs = append(v.logs, logEntry{e})
			}
		} else if i := strings.Index(line, replyPrefix+"{"); i >= 0 {
			var reply map[string]any
			if json.Unmarshal([]byte(line[i+len(replyPrefix):]), &reply) == nil {
				v.inits = append(v.inits, reply)
			}
		}
		v.cond.Broadcast()
		v.mu.Unlock()
	}
	v.mu.Lock()
	v.done = true
	v.cond.Broadcast()
	v.mu.Unlock()
}

// wait waits until cond, called under the lock, holds; false on timeout or
// when QEMU is gone.
func (v *vm) wait(timeout time.Duration, cond func() bool) bool {
	timer := time.AfterFunc(timeout, func() {
		v.mu.Lock()
		v.cond.Broadcast()
		v.mu.Unlock()
	})
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	v.mu.Lock()
	defer v.mu.Unlock()
	for !cond() {
		if v.done || time.Now().After(deadline) {
			return false
		}
		v.cond.Wait()
	}
	return true
}

// mark is the number of log entries so far, for waitLog and logsSince.
func (v *vm) mark() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.logs)
}

// waitLog waits for a log entry after mark that match accepts.
func (v *vm) waitLog(mark int, timeout time.Duration, match func(logEntry) bool) logEntry {
	v.t.Helper()
	var found logEntry
	ok := v.wait(timeout, func() bool {
		for _, e := range v.logs[mark:] {
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	if !ok {
		v.t.Fatalf("no expected log entry within %v; console:\n%s", timeout, v.dump())
	}
	return found
}

// logsSince returns the entries after mark that match accepts.
func (v *vm) logsSince(mark int, match func(logEntry) bool) []logEntry {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []logEntry
	for _, e := range v.logs[mark:] {
		if match(e) {
			out = append(out, e)
		}
	}
	return out
}

// command runs a guestinit command and returns its reply; a reply with an
// error fails the test.
func (v *vm) command(args ...string) map[string]any {
	v.t.Helper()
	v.mu.Lock()
	v.nextID++
	id := v.nextID
	v.mu.Unlock()
	if _, err := fmt.Fprintf(v.stdin, "%d %s\n", id, strings.Join(args, " ")); err != nil {
		v.t.Fatalf("console: %v", err)
	}
	var reply map[string]any
	ok := v.wait(eventTimeout, func() bool {
		for _, r := range v.inits {
			if n, _ := r["id"].(float64); int(n) == id {
				reply = r
				return true
			}
		}
		return false
	})
	if !ok {
		v.t.Fatalf("no reply to %q within %v; console:\n%s", args, eventTimeout, v.dump())
	}
	if e, ok := reply["err"].(string); ok {
		v.t.Fatalf("%q: %s", args, e)
	}
	return reply
}

// cat returns a guest file's content.
func (v *vm) cat(path string) string {
	v.t.Helper()
	out, _ := v.command("cat", path)["out"].(string)
	return out
}

// memTotal is the guest's MemTotal in bytes, what hotplugd reports as
// memory.
func (v *vm) memTotal() int64 {
	v.t.Helper()
	b, err := qemutest.MemTotal(v.cat("/proc/meminfo"))
	if err != nil {
		v.t.Fatal(err)
	}
	return b
}

// powerOff stops hotplugd (it must exit cleanly) and the VM, and waits for
// QEMU to exit.
func (v *vm) powerOff() {
	v.t.Helper()
	v.command("poweroff")
	// The console ends when QEMU exits; only then may Wait close it.
	if !v.wait(eventTimeout, func() bool { return v.done }) {
		v.t.Fatalf("QEMU still running %v after power-off; console:\n%s", eventTimeout, v.dump())
	}
	if err := v.cmd.Wait(); err != nil {
		v.t.Errorf("QEMU: %v; console:\n%s", err, v.dump())
	}
}

// kill ends QEMU by its PID unless it exited.
func (v *vm) kill() {
	running.mu.Lock()
	delete(running.vms, v)
	running.mu.Unlock()
	if v.cmd.ProcessState != nil {
		return
	}
	v.cmd.Process.Kill()
	v.cmd.Wait()
}

// dump is the console and QEMU's stderr, for failure messages.
func (v *vm) dump() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return strings.Join(v.lines, "\n") + "\n--- QEMU stderr:\n" + v.stderr.String()
}

// quantity parses a log's capacity value, e.g. "1003540Ki".
func quantity(t *testing.T, s string) int64 {
	t.Helper()
	q, err := resource.ParseQuantity(s)
	if err != nil {
		t.Fatalf("capacity %q: %v", s, err)
	}
	return q.Value()
}

// changed matches hotplugd's change entries for a resource ("memory", "cpu").
func changed(resource string) func(logEntry) bool {
	return func(e logEntry) bool { return strings.HasPrefix(e.Msg, "topology changed: "+resource+":") }
}

// noChange matches the debug entry of a reconcile a uevent opened that
// found nothing to report. With the change entries of a resource, these
// count the reconciles (a reconcile logs one entry per changed resource,
// plus one per NUMA node).
func noChange(e logEntry) bool { return e.Msg == "no change" && e.Str("trigger") == "uevent" }
