package topology

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxFileSize caps every read of a pseudo-file. sysfs attributes are at most
// one page; /proc/meminfo is a few KiB. A file larger than this is not one of
// the files this package understands.
const maxFileSize = 1 << 20

// FS reads the machine's topology from a sysfs and a procfs root. The zero
// value is not useful; use NewFS. Copies of an FS share the files its
// capacity snapshots keep open (see openFiles), and may be used
// concurrently.
type FS struct {
	sys  string
	proc string
	// open holds the files CapacitySnapshot keeps open for the next one;
	// nil opens every file on every read.
	open *openFiles
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
	return FS{sys: filepath.Clean(sysfsRoot), proc: filepath.Clean(procfsRoot), open: newOpenFiles()}
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
	key   []byte // the file's path, its key in files
	buf   []byte // file contents
	dents []byte // directory entries
	// files are the files kept open between capacity snapshots; nil
	// opens, reads and closes every file.
	files *fileSet
}

// readAt reads the file dir/name relative to the directory open as dirfd
// (openat walks two path components instead of ten, which matters for the
// thousands of memory block files of a large machine). The file's name is
// name+suffix, given in two parts so callers need not concatenate. With an
// empty dir, the name is used as is. The result is valid until the next call.
//
// With r.files, a file read before is read again through the descriptor
// kept open, and a newly opened one is kept when it qualifies.
func (r *reader) readAt(dirfd int, dir, name, suffix string) ([]byte, error) {
	var known bool
	if r.files != nil {
		r.key = appendPath(r.key[:0], dir, name, suffix)
		f := r.files.lookup(r.key)
		if f != nil && f.fd >= 0 {
			b, err := r.readFD(f.fd)
			if err == nil {
				return b, nil
			}
			// kernfs fails every read of a file it removed with ENODEV
			// (its CPU went offline, its node away), also once a new one
			// has taken its name. Whatever the error, drop the descriptor
			// and read the file by its name, as the first time: that
			// tells whether it is gone, and reports the error if not.
			r.files.forget(r.key)
			f = nil
		}
		known = f != nil
	}
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
	b, err := r.readFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("topology: read %s: %w", joinPath(dir, name+suffix), err)
	}
	if r.files == nil || known || !r.files.keep(r.key, fd, kernelFile) {
		unix.Close(fd)
	}
	return b, nil
}

// readFD reads the file open as fd from its start, with pread: a file kept
// open is read again from offset 0, which makes sysfs and procfs (seq_file)
// produce its content afresh.
func (r *reader) readFD(fd int) ([]byte, error) {
	if r.buf == nil {
		r.buf = make([]byte, 4096)
	}
	n := 0
	for {
		if n == len(r.buf) {
			if n >= maxFileSize {
				return nil, fmt.Errorf("larger than %d bytes", maxFileSize)
			}
			r.buf = append(r.buf, make([]byte, len(r.buf))...)
		}
		m, err := unix.Pread(fd, r.buf[n:], int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
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

// appendPath appends joinPath(dir, name+suffix) to b.
func appendPath(b []byte, dir, name, suffix string) []byte {
	if dir != "" {
		b = append(append(b, dir...), '/')
	}
	return append(append(b, name...), suffix...)
}

// dir is a directory open for openat-relative reads and raw listing. It
// uses the file descriptor directly: an os.File would cost fcntl and epoll
// syscalls at open and on every Fd call.
type dir struct {
	fd   int
	path string
	// kept is set when fd belongs to a fileSet: scan rewinds it, close
	// leaves it open.
	kept bool
}

// openDirAt opens the directory name relative to the directory open as
// dirfd, whose path is parent; a missing one matches fs.ErrNotExist.
func openDirAt(dirfd int, parent, name string) (dir, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	for err == unix.EINTR {
		fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	path := joinPath(parent, name)
	if err != nil {
		return dir{}, fmt.Errorf("topology: read %s: %w", path, err)
	}
	return dir{fd: fd, path: path}, nil
}

// openStableDir opens one of the directories the kernel creates at boot and
// never removes (devices/system/cpu, node and memory, kernel/mm/hugepages);
// with r.files, it stays open between capacity snapshots.
func (r *reader) openStableDir(path string) (dir, error) {
	return r.openKeptDir(atFDCWD, "", path)
}

// openKeptDir opens the directory name relative to the directory open as
// dirfd, whose path is parent; with r.files, it stays open between capacity
// snapshots. Unlike a file, a directory the kernel removed does not fail
// through a descriptor opened before: it lists empty, and openat in it fails
// with ENOENT, also once a directory of the same name exists again. So a
// directory is kept only when the kernel never removes it (openStableDir),
// or when it is always listed first and opened again when it lists nothing
// (a node's hugepages, see readNodeHugePages). Only sysfs directories are
// kept.
func (r *reader) openKeptDir(dirfd int, parent, name string) (dir, error) {
	var known bool
	if r.files != nil {
		r.key = appendPath(r.key[:0], parent, name, "")
		f := r.files.lookup(r.key)
		if f != nil && f.fd >= 0 {
			return dir{fd: f.fd, path: joinPath(parent, name), kept: true}, nil
		}
		known = f != nil
	}
	d, err := openDirAt(dirfd, parent, name)
	if err != nil {
		return d, err
	}
	if r.files != nil && !known {
		r.key = append(r.key[:0], d.path...)
		d.kept = r.files.keep(r.key, d.fd, sysfsDir)
	}
	return d, nil
}

// forgetKept closes and drops a directory kept open, for the next
// openKeptDir to open it afresh.
func (d *dir) forgetKept(r *reader) {
	if d.kept {
		r.key = append(r.key[:0], d.path...)
		r.files.forget(r.key) // closes d.fd
		d.fd, d.kept = -1, false
	}
}

// scan calls fn with the name of every entry, in directory order, without
// allocating. name is only valid during the call.
func (d *dir) scan(r *reader, fn func(name []byte)) error {
	if len(r.dents) == 0 {
		r.dents = make([]byte, 32<<10)
	}
	if d.kept {
		// The last scan left the offset at the end.
		if _, err := unix.Seek(d.fd, 0, unix.SEEK_SET); err != nil {
			return d.failKept(r, err)
		}
	}
	for {
		n, err := unix.Getdents(d.fd, r.dents)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return d.failKept(r, err)
		}
		// An empty result is the end: getdents also returns early, with
		// room left in the buffer, when a signal is pending (and the Go
		// runtime signals its threads to preempt them).
		if n <= 0 {
			return nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		var off int64
		for b := r.dents[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return fmt.Errorf("topology: read %s: malformed directory entry", d.path)
			}
			off = int64(binary.NativeEndian.Uint64(b[8:16]))
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			fn(name)
			b = b[reclen:]
		}
		// So is, in a kept directory (a sysfs one), an entry at offset
		// INT_MAX: kernfs gives that offset to the last entry of a
		// listing that reached the end, and to no other (it keeps
		// INT_MAX out of its name hashes, the offsets of the others).
		if d.kept && off == math.MaxInt32 {
			return nil
		}
	}
}

// failKept returns the error of a directory read; a directory kept open is
// dropped first, so that the next snapshot opens it afresh.
func (d *dir) failKept(r *reader, err error) error {
	d.forgetKept(r)
	return fmt.Errorf("topology: read %s: %w", d.path, err)
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

// readFixed reads the file name, whose content the kernel fixes at boot: a
// file kept open is read once (see openFiles).
func (d *dir) readFixed(r *reader, name string) ([]byte, error) {
	if r.files != nil {
		r.key = appendPath(r.key[:0], d.path, name, "")
		if f := r.files.kept(r.key); f != nil && f.fixed != nil {
			f.gen = r.files.gen
			return f.fixed, nil
		}
	}
	b, err := d.read(r, name, "")
	if err == nil && r.files != nil {
		if f := r.files.kept(r.key); f != nil {
			f.fixed = bytes.Clone(b)
		}
	}
	return b, err
}

// fixedNames lists the directory d, whose entries the kernel fixes at boot,
// and returns the names keep selects: a directory kept open is listed once
// (see openFiles). The names are not to be modified.
func (d *dir) fixedNames(r *reader, keep func(name []byte) bool) ([]string, error) {
	var f *openFile
	if d.kept {
		r.key = append(r.key[:0], d.path...)
		if f = r.files.kept(r.key); f != nil && f.names != nil {
			return f.names, nil
		}
	}
	names := []string{}
	err := d.scan(r, func(name []byte) {
		if keep(name) {
			names = append(names, string(name))
		}
	})
	if err == nil && f != nil {
		f.names = names
	}
	return names, err
}

// readIndexed reads prefix+N+suffix, e.g. "memory12" + "/state", without
// building the name as a string.
func (d *dir) readIndexed(r *reader, prefix string, n int, suffix string) ([]byte, error) {
	r.name = strconv.AppendInt(append(r.name[:0], prefix...), int64(n), 10)
	return r.readAt(d.fd, d.path, bytesToString(r.name), suffix)
}

func (d *dir) close() {
	if !d.kept && d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// openFiles keeps the files a capacity snapshot read open for the next one,
// which then reads each with one pread from offset 0 instead of openat, read
// and close. The open is most of what reading a small sysfs file costs (the
// path walk, and kernfs's and seq_file's allocations at open and release).
//
// A file kept open cannot give a stale value, which is why only kernel
// pseudo-files are kept (kernelFile). sysfs and procfs produce a file's
// content afresh on every read from offset 0, and kernfs fails every read of
// a file it removed with ENODEV, even once a file of the same name exists
// again (a CPU back online): readAt then drops the descriptor and opens the
// name. A regular file (a fixture tree) could be replaced or removed with
// its old content still readable, so it is opened on every read. Files the
// last snapshot did not read (a CPU or node that is gone) are closed after
// it. The memory block states Snapshot reads are never kept: thousands of
// files for a read an operator asks for.
//
// What the kernel fixes at boot is read once, through the first descriptor
// kept (readFixed, fixedNames): cpu/possible (cpu_possible_mask is
// read-only after init), memory/block_size_bytes (the memory block devices
// are laid out on it at boot) and the sizes under kernel/mm/hugepages
// (hugepage sizes are registered at boot only). Only a kept file's value is
// remembered: a fixture's is read on every snapshot.
//
// The cost is the descriptors (about three per CPU, a few per NUMA node, at
// most a quarter of RLIMIT_NOFILE) and the kernel's page-sized buffer of
// each; they are closed when the last copy of the FS is unreachable.
type openFiles struct {
	mu  sync.Mutex
	set *fileSet
}

func newOpenFiles() *openFiles {
	o := &openFiles{set: &fileSet{}}
	runtime.AddCleanup(o, (*fileSet).closeAll, o.set)
	return o
}

// fileSet is what openFiles guards: the files kept open by path, and the
// reader of the capacity snapshots with the buffers they reuse.
type fileSet struct {
	r     reader
	files map[string]*openFile
	gen   uint64 // the snapshot under way
	open  int    // descriptors in files
	max   int    // most descriptors files may hold
}

// openFile is a file a snapshot read: open as fd, or -1 when it is not kept.
type openFile struct {
	fd  int
	gen uint64 // the last snapshot that read it
	// fixed and names are the content of a kept file the kernel fixes at
	// boot and the entries of such a directory; nil until read.
	fixed []byte
	names []string
}

// begin starts a snapshot: it returns the reader, with files set.
func (s *fileSet) begin() *reader {
	if s.files == nil {
		s.files = make(map[string]*openFile)
		s.max = fileLimit()
	}
	s.gen++
	s.r.files = s
	return &s.r
}

// lookup returns the file of a path and marks it read by this snapshot;
// nil when it was not read before.
func (s *fileSet) lookup(key []byte) *openFile {
	f := s.files[string(key)]
	if f != nil {
		f.gen = s.gen
	}
	return f
}

// keep records a file read for the first time, with its descriptor when
// kernel reports it may be kept and there is room; it reports whether it
// kept fd.
func (s *fileSet) keep(key []byte, fd int, kernel func(fd int) bool) bool {
	f := &openFile{fd: -1, gen: s.gen}
	if s.open < s.max && kernel(fd) {
		f.fd = fd
		s.open++
	}
	s.files[string(key)] = f
	return f.fd >= 0
}

// kept returns the file of a path when it is kept open.
func (s *fileSet) kept(key []byte) *openFile {
	if f := s.files[string(key)]; f != nil && f.fd >= 0 {
		return f
	}
	return nil
}

// forget closes and drops the file of a path.
func (s *fileSet) forget(key []byte) {
	if f := s.files[string(key)]; f != nil {
		s.drop(string(key), f)
	}
}

func (s *fileSet) drop(key string, f *openFile) {
	if f.fd >= 0 {
		unix.Close(f.fd)
		s.open--
	}
	delete(s.files, key)
}

// end closes the files this snapshot did not read.
func (s *fileSet) end() {
	for key, f := range s.files {
		if f.gen != s.gen {
			s.drop(key, f)
		}
	}
}

func (s *fileSet) closeAll() {
	for key, f := range s.files {
		s.drop(key, f)
	}
}

// kernelFile reports whether fd is a sysfs or procfs file.
func kernelFile(fd int) bool {
	t := fsType(fd)
	return t == unix.SYSFS_MAGIC || t == unix.PROC_SUPER_MAGIC
}

// sysfsDir reports whether fd is a sysfs directory, whose listings scan
// knows the end of (kernfs's).
func sysfsDir(fd int) bool {
	return fsType(fd) == unix.SYSFS_MAGIC
}

// fsType returns the magic number of the file system of fd; 0 when it
// cannot be read.
func fsType(fd int) int64 {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return 0
	}
	return int64(st.Type)
}

// fileLimit returns how many descriptors a fileSet may keep: a quarter of
// the soft RLIMIT_NOFILE, so that the daemon's sockets, watches and state
// files never run short; none when the limit cannot be read.
func fileLimit() int {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return int(min(l.Cur/4, math.MaxInt32))
}

// parseError names the file whose content could not be parsed.
func parseError(path string, err error) error {
	return fmt.Errorf("topology: parse %s: %w", path, err)
}

// bytesToString views b as a string for a call that does not keep it.
func bytesToString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
