package topology

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
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
	var r reader
	b, err := r.readAt(unix.AT_FDCWD, "", path, "")
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// reader reads small files with reused buffers: a snapshot of a large machine
// reads thousands of one-line files, and per-file allocations and zeroing
// would cost more than the syscalls. A reader is not safe for concurrent use.
type reader struct {
	path []byte // NUL-terminated relative path for openat
	buf  []byte
}

// readAt reads the file dir/name relative to the directory open as dirfd
// (openat walks two path components instead of ten, which matters for the
// thousands of memory block files of a large machine). The file's name is
// name+suffix, given in two parts so callers need not concatenate. With an
// empty dir, the name is used as is. The result is valid until the next call.
func (r *reader) readAt(dirfd int, dir, name, suffix string) ([]byte, error) {
	r.path = append(r.path[:0], name...)
	r.path = append(r.path, suffix...)
	r.path = append(r.path, 0)
	var fd int
	for {
		fd0, _, errno := unix.Syscall6(unix.SYS_OPENAT, uintptr(dirfd), uintptr(unsafe.Pointer(&r.path[0])),
			unix.O_RDONLY|unix.O_CLOEXEC, 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			return nil, fmt.Errorf("topology: read %s: %w", joinPath(dir, name+suffix), errno)
		}
		fd = int(fd0)
		break
	}
	defer unix.Close(fd)
	if r.buf == nil {
		r.buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(r.buf) {
			if n >= maxFileSize {
				return nil, fmt.Errorf("topology: read %s: larger than %d bytes", joinPath(dir, name+suffix), maxFileSize)
			}
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Read(fd, r.buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("topology: read %s: %w", joinPath(dir, name+suffix), err)
		}
		n += m
		// A sysfs attribute is returned whole by its first read, and a
		// short read of a regular file is its end: skip the read that
		// would return 0.
		if m == 0 || n < len(r.buf) {
			return r.buf[:n], nil
		}
	}
}

func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// dir is a directory open for openat-relative reads.
type dir struct {
	f    *os.File
	fd   int // f.Fd(), taken once: each Fd call costs two fcntl syscalls
	path string
}

// openDir opens a directory; a missing one matches fs.ErrNotExist.
func openDir(path string) (*dir, error) {
	f, err := os.Open(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is named once, below
		}
		return nil, fmt.Errorf("topology: read %s: %w", path, err)
	}
	return &dir{f: f, fd: int(f.Fd()), path: path}, nil
}

// names lists the directory's entries, unsorted.
func (d *dir) names() ([]string, error) {
	names, err := d.f.Readdirnames(-1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("topology: read %s: %w", d.path, err)
	}
	return names, nil
}

// read reads the file at the relative path name+suffix with r's buffers.
func (d *dir) read(r *reader, name, suffix string) ([]byte, error) {
	return r.readAt(d.fd, d.path, name, suffix)
}

func (d *dir) close() { d.f.Close() }

// parseError names the file whose content could not be parsed.
func parseError(path string, err error) error {
	return fmt.Errorf("topology: parse %s: %w", path, err)
}

// readDirNames lists a directory's entry names, unsorted.
func readDirNames(path string) ([]string, error) {
	d, err := openDir(path)
	if err != nil {
		return nil, err
	}
	defer d.close()
	return d.names()
}
