package kubeletconfig

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// maxStatSize bounds the read of /proc/<pid>/stat (52 fields, a comm of at
// most 64 bytes: well under 1 KiB).
const maxStatSize = 4 << 10

// ProcessStart returns when process pid started, in clock ticks after boot:
// field 22 (starttime) of procRoot/<pid>/stat (proc_pid_stat(5)). A PID the
// kernel hands to a new process comes with another start, so PID and start
// together name one process for the life of the machine: a kubelet
// restarted under a reused PID is a new kubelet. It is one read of a small
// file that needs no ptrace access to the process. A process that is gone
// is an error matching fs.ErrNotExist (or ESRCH).
func ProcessStart(procRoot string, pid int) (uint64, error) {
	name := filepath.Join(procRoot, strconv.Itoa(pid), "stat")
	f, err := os.Open(name)
	if err != nil {
		return 0, fmt.Errorf("kubeletconfig: read %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxStatSize))
	if err != nil {
		return 0, fmt.Errorf("kubeletconfig: read %s: %w", name, err)
	}
	start, err := parseStartTime(b)
	if err != nil {
		return 0, fmt.Errorf("kubeletconfig: parse %s: %w", name, err)
	}
	return start, nil
}

// parseStartTime returns field 22 of a /proc/<pid>/stat line. Field 2,
// comm, is in parentheses and may itself hold spaces and parentheses: the
// fields are counted from the last ')'.
func parseStartTime(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || bytes.IndexByte(b[:i], '(') < 0 {
		return 0, fmt.Errorf("no comm in parentheses")
	}
	// Fields 3 (state) onwards; starttime is field 22.
	fields := bytes.Fields(b[i+1:])
	const starttime = 22 - 3
	if len(fields) <= starttime {
		return 0, fmt.Errorf("%d fields after comm, want at least %d", len(fields), starttime+1)
	}
	v, err := strconv.ParseUint(string(fields[starttime]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("starttime %q: %w", fields[starttime], err)
	}
	return v, nil
}
