package kubeletconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// hostFS is the file system as the kubelet sees it: the directory that stands
// for the kubelet's "/" (/proc/<pid>/root, or "/" itself). It implements
// fs.FS, so names are relative to that root ("etc/kubernetes/kubelet.conf").
//
// Names are resolved with openat2(RESOLVE_IN_ROOT): an absolute symlink
// inside (/etc/kubernetes/kubelet.conf -> /opt/...) is followed inside the
// root, as the kubelet would follow it. A plain open of
// /proc/<pid>/root/<name> would follow it in hotplugd's own mount namespace.
// Kernels before 5.6 (ENOSYS) and sandboxes that refuse the system call
// (EPERM) get that plain open instead.
type hostFS string

// Open implements fs.FS. Errors are *fs.PathError naming the host path
// (root joined with name).
func (r hostFS) Open(name string) (fs.File, error) {
	hostPath := filepath.Join(string(r), filepath.FromSlash(name))
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: hostPath, Err: fs.ErrInvalid}
	}
	fd, err := r.openInRoot(name, unix.O_RDONLY)
	switch {
	case err == unix.ENOSYS || err == unix.EPERM:
		return os.Open(hostPath)
	case err != nil:
		return nil, &fs.PathError{Op: "open", Path: hostPath, Err: err}
	}
	return os.NewFile(uintptr(fd), hostPath), nil
}

// isSymlink reports whether the kubelet's path abs is a symlink, without
// following it.
func (r hostFS) isSymlink(abs string) (bool, error) {
	hostPath := filepath.Join(string(r), abs)
	fd, err := r.openInRoot(rel(abs), unix.O_PATH|unix.O_NOFOLLOW)
	switch {
	case err == unix.ENOSYS || err == unix.EPERM:
		fi, err := os.Lstat(hostPath)
		if err != nil {
			return false, err
		}
		return fi.Mode()&fs.ModeSymlink != 0, nil
	case err != nil:
		return false, &fs.PathError{Op: "lstat", Path: hostPath, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, &fs.PathError{Op: "lstat", Path: hostPath, Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFLNK, nil
}

// stat returns the file the kubelet's path names (the fs.FS name), with
// symlinks followed inside the root, without opening it for reading (an
// O_PATH descriptor: no read permission needed, a directory is fine).
// Errors are *fs.PathError naming the host path.
func (r hostFS) stat(name string) (fs.FileInfo, error) {
	hostPath := filepath.Join(string(r), filepath.FromSlash(name))
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: hostPath, Err: fs.ErrInvalid}
	}
	fd, err := r.openInRoot(name, unix.O_PATH)
	switch {
	case err == unix.ENOSYS || err == unix.EPERM:
		return os.Stat(hostPath)
	case err != nil:
		return nil, &fs.PathError{Op: "stat", Path: hostPath, Err: err}
	}
	f := os.NewFile(uintptr(fd), hostPath)
	defer f.Close()
	return f.Stat()
}

// openInRoot opens the fs.FS name inside the root with
// openat2(RESOLVE_IN_ROOT) and returns the descriptor or a bare errno.
func (r hostFS) openInRoot(name string, flags uint64) (int, error) {
	dirfd, err := unix.Open(string(r), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dirfd)
	how := &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	}
	for range 8 {
		// EAGAIN: a rename raced with the lookup of ".." (openat2(2)).
		fd, err := unix.Openat2(dirfd, name, how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

// readFile reads the file name (an fs.FS name), capped like Load. Errors
// name the host path.
func (r hostFS) readFile(name string) ([]byte, error) {
	f, err := r.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllCapped(f)
	var pe *fs.PathError
	if err != nil && !errors.As(err, &pe) {
		err = &fs.PathError{Op: "read", Path: filepath.Join(string(r), filepath.FromSlash(name)), Err: err}
	}
	return b, err
}

// rel turns the kubelet's absolute path into an fs.FS name.
func rel(abs string) string {
	if abs == "/" {
		return "."
	}
	return abs[1:]
}
