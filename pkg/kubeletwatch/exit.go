package kubeletwatch

import (
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
)

// exitWatch waits for the exit of one kubelet process through a pidfd (a
// file descriptor of the process, readable once it has exited), in the
// runtime's network poller: while the kubelet runs, the watcher does not
// wake up at all, where a poll would every Options.Poll.
type exitWatch struct {
	pid    int
	start  uint64 // the process's start, as kubeletconfig.ProcessStart reads it
	exited chan struct{}
	f      *os.File
	done   chan struct{}
	once   sync.Once
}

// watchExit returns a watch of the exit of f's kubelet process, or nil when
// the pidfd cannot stand for it: no process (--kubelet-config), a procfs
// root where the PID is not this PID namespace's process (a fixture; a pod
// without hostPID), a kernel without pidfd_open (Linux 5.10 for a non-blocking
// one), or a process that is not the one f was read from any more (it
// exited, its PID was reused). The caller polls then.
func watchExit(procRoot string, f *Facts) *exitWatch {
	if f == nil || f.Kubelet == nil || f.Kubelet.PID <= 0 || !ownProcess(procRoot, f.Kubelet.PID) {
		return nil
	}
	pid := f.Kubelet.PID
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	// The pidfd holds the process it was opened on: if that one still has
	// the start f read, it is f's kubelet, whatever happens to the PID after.
	if start, err := kubeletconfig.ProcessStart(procRoot, pid); err != nil || start != f.Start {
		unix.Close(fd)
		return nil
	}
	// Non-blocking, so os.NewFile registers it with the poller.
	file := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil
	}
	e := &exitWatch{pid: pid, start: f.Start, exited: make(chan struct{}, 1), f: file, done: make(chan struct{})}
	go func() {
		defer close(e.done)
		// Read calls the function, and again each time the poller says
		// the pidfd is readable, until it returns true; it returns an
		// error once the file is closed (stop). The function asks the
		// pidfd itself: Read forgets a readiness the poller saw before
		// it started (an exit right after the open).
		err := rc.Read(func(fd uintptr) bool {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(p, 0)
			for err == unix.EINTR {
				n, err = unix.Poll(p, 0)
			}
			return err == nil && n > 0
		})
		if err == nil {
			e.exited <- struct{}{}
		}
	}()
	return e
}

// stop ends the watch and waits for its goroutine; nil is a no-op.
func (e *exitWatch) stop() {
	if e == nil {
		return
	}
	e.once.Do(func() {
		e.f.Close()
		<-e.done
	})
}

// ownProcess reports whether pid under procRoot is the process of that PID
// in this process's PID namespace, the one pidfd_open opens: procRoot is a
// procfs of this namespace (its "self" names this process's PID: /proc, or
// the host's /proc mounted in a pod with hostPID), or its pid entry is a
// link to /proc/<pid> (a tree that lists only some of the machine's
// processes).
func ownProcess(procRoot string, pid int) bool {
	if self, err := os.Readlink(filepath.Join(procRoot, "self")); err == nil && self == strconv.Itoa(os.Getpid()) {
		return true
	}
	entry := strconv.Itoa(pid)
	real, err := filepath.EvalSymlinks(filepath.Join(procRoot, entry))
	return err == nil && real == "/proc/"+entry
}
