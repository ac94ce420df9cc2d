package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
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

// atFDCWD makes readAt resolve a name relative to the working directory, or
// take it as is when absolute.
const atFDCWD = unix.AT_FDCWD

// reader reads small files with reused buffers: a snapshot of a large machine
// reads thousands of one-line files, and per-file allocations and zeroing
// would cost more than the syscalls. A reader is not safe for concurrent use.
type reader struct {
	path  []byte // NUL-terminated relative path for openat
	name  []byte // scratch for readIndexed
	buf   []byte // file contents
	dents []byte // directory entries
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

// dir is a directory open for openat-relative reads and raw listing. It
// uses the file descriptor directly: an os.File would cost fcntl and epoll
// syscalls at open and on every Fd call.
type dir struct {
	fd   int
	path string
}

// openDir opens a directory; a missing one matches fs.ErrNotExist.
func openDir(path string) (*dir, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("topology: read %s: %w", path, err)
	}
	return &dir{fd: fd, path: path}, nil
}

// scan calls fn with the name of every entry, in directory order, without
// allocating. name is only valid during the call.
func (d *dir) scan(r *reader, fn func(name []byte)) error {
	if len(r.dents) == 0 {
		r.dents = make([]byte, 32<<10)
	}
	for {
		n, err := unix.Getdents(d.fd, r.dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("topology: read %s: %w", d.path, err)
		}
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := r.dents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("topology: read %s: malformed directory entry", d.path)
			}
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			fn(name)
			b = b[reclen:]
		}
	}
}

// indexed returns, ascending, the N of every entry named prefix+N ("cpu12",
// "node3", "memory1024").
func (d *dir) indexed(r *reader, prefix string) ([]int, error) {
	var ids []int
	err := d.scan(r, func(name []byte) {
		if id, ok := parseIndexedName(name, prefix); ok {
			ids = append(ids, id)
		}
	})
	slices.Sort(ids)
	return ids, err
}

// read reads the file at the relative path name+suffix with r's buffers.
func (d *dir) read(r *reader, name, suffix string) ([]byte, error) {
	return r.readAt(d.fd, d.path, name, suffix)
}

// readIndexed reads prefix+N+suffix, e.g. "memory12" + "/state", without
// building the name as a string.
func (d *dir) readIndexed(r *reader, prefix string, n int, suffix string) ([]byte, error) {
	r.name = strconv.AppendInt(append(r.name[:0], prefix...), int64(n), 10)
	return r.readAt(d.fd, d.path, bytesToString(r.name), suffix)
}

func (d *dir) close() { unix.Close(d.fd) }

// parseError names the file whose content could not be parsed.
func parseError(path string, err error) error {
	return fmt.Errorf("topology: parse %s: %w", path, err)
}

// bytesToString views b as a string for a call that does not keep it.
func bytesToString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
