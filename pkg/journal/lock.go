package journal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockFile is the lock's name in the state directory.
const LockFile = "hotplugd.lock"

// ErrLocked is wrapped by Lock's error when another hotplugd holds the lock.
var ErrLocked = errors.New("another hotplugd runs on this node")

// Lock takes the state directory's lock for this process's life (flock,
// exclusive, not waiting): one hotplugd per node. The systemd unit and the
// DaemonSet both keep their journal in the host's /var/lib/hotplugd, so a
// node with both installed runs one; the second refuses to start instead of
// patching the Node against the first and sharing its journal. The lock is
// the kernel's: it goes with the process, however that ends. The file holds
// the holder's PID, for the error. release unlocks (tests).
func Lock(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("journal: %w (create it, or give another --state-dir)", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("journal: lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 0 {
				holder = "process " + strconv.Itoa(pid) + " (in its own PID namespace)"
			}
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("journal: %w: %s holds %s; run one hotplugd per node (the systemd unit or the DaemonSet, not both), or give this one another --state-dir if it acts on another Node", ErrLocked, holder, path)
		}
		return nil, fmt.Errorf("journal: lock %s: %w", path, err)
	}
	// Best effort: the PID is only for the message above.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}
