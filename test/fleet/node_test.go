package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Every node's machine: 2 CPUs, 4 GiB, and 2 MiB hugepages that the
// fleet-wide change sets from 0 to 64 (128 MiB: hugepages-2Mi 0 -> 128Mi,
// allocatable memory 128 MiB less), as a pool-wide hugepage setting does.
const (
	nodeCPUs    = 2
	nodeMemKB   = 4 << 20
	pagesBefore = 0
	pagesAfter  = 64
)

func machineOf(pages2M int) fixturegen.Machine {
	return fixturegen.OneNode(nodeCPUs, nodeMemKB, pages2M)
}

// fileContent is one file of a fixture machine, by its path under the
// machine's directory.
type fileContent struct {
	rel  string
	data []byte
}

// machineChange is what differs between two fixture machines of the same
// shape: the files to rewrite in place, the hugepage count files apart,
// since hotplugd learns of the change from inotify on those (see
// pkg/hugepagewatch) and they are written last, once meminfo and the other
// counts already show the new machine.
type machineChange struct {
	files, counts []fileContent
}

// newMachineChange renders both machines under dir and compares them.
func newMachineChange(dir string, before, after fixturegen.Machine) (*machineChange, error) {
	b, a := filepath.Join(dir, "before"), filepath.Join(dir, "after")
	if err := before.WriteDir(b); err != nil {
		return nil, err
	}
	if err := after.WriteDir(a); err != nil {
		return nil, err
	}
	ch := &machineChange{}
	err := filepath.WalkDir(a, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, err := filepath.Rel(a, path)
		if err != nil {
			return err
		}
		newData, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		old, err := os.ReadFile(filepath.Join(b, rel))
		if err != nil {
			return fmt.Errorf("fleet: %s is only in the new machine: %w", rel, err)
		}
		if bytes.Equal(old, newData) {
			return nil
		}
		if filepath.Base(rel) == "nr_hugepages" {
			ch.counts = append(ch.counts, fileContent{rel, newData})
		} else {
			ch.files = append(ch.files, fileContent{rel, newData})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleet: comparing the machines: %w", err)
	}
	if len(ch.counts) == 0 {
		return nil, errors.New("fleet: the machines' hugepage counts do not differ")
	}
	return ch, nil
}

func (ch *machineChange) paths() []string {
	var out []string
	for _, f := range slices.Concat(ch.files, ch.counts) {
		out = append(out, f.rel)
	}
	return out
}

// apply rewrites the files in the machine's directory in place (as the
// kernel's files keep their inodes, and so hotplugd's inotify watches).
func apply(dir string, files []fileContent) error {
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.rel), f.data, 0o644); err != nil {
			return fmt.Errorf("fleet: %w", err)
		}
	}
	return nil
}

// fleetNode is one simulated node: a fixture machine, a Node, a hotplugd
// process (started again after a kill, with the same arguments), its
// journal and its log.
type fleetNode struct {
	name string
	dir  string
	args []string

	mu     sync.Mutex
	proc   *nodeProc // nil before the first start
	down   bool      // killed and not started again yet
	starts int
}

func (n *fleetNode) machine() string { return filepath.Join(n.dir, "machine") }
func (n *fleetNode) sys() string     { return filepath.Join(n.machine(), "sys") }
func (n *fleetNode) procfs() string  { return filepath.Join(n.machine(), "proc") }
func (n *fleetNode) logPath() string { return filepath.Join(n.dir, "hotplugd.log") }

// status is what a kubelet with cfg, started now, reports on this node's
// machine.
func (n *fleetNode) status(cfg *kubeletv1beta1.KubeletConfiguration) (capacity, allocatable v1.ResourceList, err error) {
	return machineStatus(n.machine(), cfg)
}

// machineStatus is what a kubelet with cfg reports on the fixture machine
// in dir (dir/sys, dir/proc).
func machineStatus(dir string, cfg *kubeletv1beta1.KubeletConfiguration) (capacity, allocatable v1.ResourceList, err error) {
	snap, err := topology.NewFS(filepath.Join(dir, "sys"), filepath.Join(dir, "proc")).Snapshot()
	if err != nil {
		return nil, nil, err
	}
	capacity = snap.Capacity()
	allocatable, err = snap.Allocatable(cfg)
	return capacity, allocatable, err
}

// nodeProc is one run of a node's hotplugd.
type nodeProc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, once done is closed
	// signalled: the test sent it a signal, so its exit is expected.
	signalled atomic.Bool
}

func (p *nodeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exit is an exit of a hotplugd the test did not ask for.
type exit struct {
	node string
	err  error
	at   time.Time
}

// start runs the node's hotplugd: its output appended to its log file (no
// pipe: a thousand of them), in a process group of its own, killed by the
// kernel if the test dies first. unexpected is called if it exits without
// the test having signalled it.
func (n *fleetNode) start(binary string, unexpected func(exit)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil && !n.proc.exited() {
		return fmt.Errorf("fleet: %s: hotplugd already runs (pid %d)", n.name, n.proc.cmd.Process.Pid)
	}
	log, err := os.OpenFile(n.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	defer log.Close() // the child has its own copy
	n.starts++
	fmt.Fprintf(log, "==== fleet: start %d of %s at %s\n", n.starts, n.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(binary, n.args...)
	if nice != "" {
		// On a cluster the API server has a machine of its own; here it
		// shares this one with the whole fleet, which must not starve it
		// (nice execs hotplugd: the PID is hotplugd's, with every thread
		// at 19).
		cmd = exec.Command(nice, append([]string{"-n", "19", binary}, n.args...)...)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = daemontest.Env()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("fleet: starting hotplugd of %s: %w", n.name, err)
	}
	p := &nodeProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		// Should the pidfd fail, Wait waits in the kernel, on a thread
		// of its own.
		waitExit(cmd.Process.Pid)
		p.err = cmd.Wait()
		if !p.signalled.Load() {
			unexpected(exit{node: n.name, err: p.err, at: time.Now()})
		}
		close(p.done)
	}()
	n.proc, n.down = p, false
	return nil
}

// waitExit returns once the child pid has exited, leaving it to be
// reaped. It waits on the process's pidfd through the Go runtime's poller,
// not in a blocking wait: a thousand processes waited for that way would
// hold a thousand threads of the test, and the machine's limit on tasks is
// what bounds the fleet (see taskRoom).
func waitExit(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("fleet: pidfd of %d: %w", pid, err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fmt.Errorf("fleet: pidfd of %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("fleet: pidfd of %d: %w", pid, err)
	}
	// A pidfd polls readable once its process has exited.
	err = rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 0)
		return err != nil || (n > 0 && pfd[0].Revents != 0)
	})
	if err != nil {
		return fmt.Errorf("fleet: waiting for %d: %w", pid, err)
	}
	return nil
}

// nice is nice(1), which starts every hotplugd at nice 19; "" when the
// machine has none (then they run at the test's priority).
var nice, _ = exec.LookPath("nice")

// pid is the running hotplugd's (0 when none runs).
func (n *fleetNode) pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.exited() {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

func (n *fleetNode) isDown() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.down
}

// kill sends SIGKILL to the node's hotplugd (by its PID, through the
// process's pidfd) and returns once it is gone; the node is down until
// started again.
func (n *fleetNode) kill() error {
	n.mu.Lock()
	p := n.proc
	if p == nil || p.exited() {
		n.mu.Unlock()
		return fmt.Errorf("fleet: %s: no hotplugd runs", n.name)
	}
	n.down = true
	n.mu.Unlock()
	p.signalled.Store(true)
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("fleet: killing hotplugd of %s: %w", n.name, err)
	}
	<-p.done
	return nil
}

// signal sends sig to the running hotplugd, as the test's own; the
// process returned is nil when none runs.
func (n *fleetNode) signal(sig syscall.Signal) *nodeProc {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.proc
	if p == nil || p.exited() {
		return nil
	}
	p.signalled.Store(true)
	p.cmd.Process.Signal(sig)
	return p
}

// stopAll stops every node's hotplugd: SIGTERM to all at once, then
// SIGKILL to those still running after grace. It returns the nodes whose
// hotplugd did not exit 0 on SIGTERM.
func stopAll(nodes []*fleetNode, grace time.Duration) []string {
	procs := make([]*nodeProc, len(nodes))
	for i, n := range nodes {
		procs[i] = n.signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	var bad []string
	for i, p := range procs {
		if p == nil {
			continue
		}
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
		}
		if !p.exited() {
			p.cmd.Process.Kill()
			<-p.done
			bad = append(bad, nodes[i].name+" (SIGKILL after "+grace.String()+")")
			continue
		}
		if p.err != nil {
			bad = append(bad, nodes[i].name+" ("+p.err.Error()+")")
		}
	}
	return bad
}

// logTail is the end of the node's hotplugd log, for failures.
func (n *fleetNode) logTail(max int) string {
	b, err := os.ReadFile(n.logPath())
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// nodeName is the Node of node i.
func nodeName(i int) string { return "fleet-" + fmt.Sprintf("%04d", i) }

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + string(bytes.ReplaceAll([]byte(s), []byte("'"), []byte(`'\''`))) + "'"
}

// itoa for flag values.
func itoa(i int) string { return strconv.Itoa(i) }
