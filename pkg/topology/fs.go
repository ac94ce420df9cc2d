package topology

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// maxFileSize caps every read of a pseudo-file. sysfs attributes are at most
// one page; /proc/meminfo is a few KiB. A file larger than this is not one of
// the files this package understands.
const maxFileSize = 1 << 20

// FS reads the machine's topology from a sysfs and a procfs root. The zero
// value is not useful; use NewFS.
type FS struct {
	sys  string
	proc string
}

// NewFS returns an FS rooted at the given sysfs and procfs mount points, e.g.
// "/sys" and "/proc", or "/host/sys" and "/host/proc" in a container, or a
// fixture tree in tests. Empty roots default to /sys and /proc.
func NewFS(sysfsRoot, procfsRoot string) FS {
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	return FS{sys: filepath.Clean(sysfsRoot), proc: filepath.Clean(procfsRoot)}
}

// SysPath returns the path of a sysfs file under the FS's root.
func (f FS) SysPath(elem ...string) string {
	return filepath.Join(append([]string{f.sys}, elem...)...)
}

// ProcPath returns the path of a procfs file under the FS's root.
func (f FS) ProcPath(elem ...string) string {
	return filepath.Join(append([]string{f.proc}, elem...)...)
}

// readFile reads a pseudo-file without stat (sysfs reports 4096 for every
// attribute) and with a size cap. Errors name the path; a missing file
// matches errors.Is(err, fs.ErrNotExist).
func readFile(path string) ([]byte, error) {
	var buf [4096]byte
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("topology: read %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var out []byte
	for {
		n, err := syscall.Read(fd, buf[:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("topology: read %s: %w", path, err)
		}
		if n == 0 {
			break
		}
		out = append(out, buf[:n]...)
		if len(out) > maxFileSize {
			return nil, fmt.Errorf("topology: read %s: larger than %d bytes", path, maxFileSize)
		}
	}
	return out, nil
}

// readDirNames lists a directory's entry names, unsorted.
func readDirNames(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named once, below
		}
		return nil, fmt.Errorf("topology: read %s: %w", path, err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("topology: read %s: %w", path, err)
	}
	return names, nil
}

// parseError names the file whose content could not be parsed.
func parseError(path string, err error) error {
	return fmt.Errorf("topology: parse %s: %w", path, err)
}
