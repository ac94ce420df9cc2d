package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// MaxSize is the largest state file Read accepts. Real checkpoints are a few
// KiB; a 512-CPU node with hundreds of pinned containers stays far below.
const MaxSize = 4 << 20

// ErrNotRegular is returned for a path that is a symlink, a directory or any
// other non-regular file.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is returned for a file larger than MaxSize.
var ErrTooLarge = fmt.Errorf("larger than %d bytes", MaxSize)

// Read returns the contents of the state file at path. It does not follow a
// symlink at path, refuses anything but a regular file, and refuses files
// larger than MaxSize. A missing file matches errors.Is(err, fs.ErrNotExist).
func Read(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("statefile: read %s: %w (a symlink; refusing to follow it)", path, ErrNotRegular)
		}
		return nil, fmt.Errorf("statefile: read %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("statefile: read %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("statefile: read %s: %w (%s)", path, ErrNotRegular, fi.Mode().Type())
	}
	if fi.Size() > MaxSize {
		return nil, fmt.Errorf("statefile: read %s: %w", path, ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("statefile: read %s: %w", path, err)
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("statefile: read %s: %w", path, ErrTooLarge)
	}
	return b, nil
}

// BackupPath is where Write copies the file before replacing it:
// path.hotplugd-backup-<UTC time>, e.g.
// cpu_manager_state.hotplugd-backup-20261122T023700.123456789Z.
func BackupPath(path string, now time.Time) string {
	return path + ".hotplugd-backup-" + now.UTC().Format("20060102T150405.000000000Z")
}

// Write replaces the file at path with data. When the file exists it is
// first copied to BackupPath(path, now) (durably: fsync of the copy and of
// the directory) and the new file keeps its mode; a new file gets 0644.
// The replacement is atomic. It returns the backup's path, "" when there was
// no file. The path must not be a symlink.
func Write(path string, data []byte, now time.Time) (backup string, err error) {
	dir := filepath.Dir(path)
	mode := fs.FileMode(0o644)
	old, err := Read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	case err != nil:
		return "", err
	default:
		fi, err := os.Lstat(path)
		if err != nil {
			return "", fmt.Errorf("statefile: %w", err)
		}
		mode = fi.Mode().Perm()
		backup = BackupPath(path, now)
		if err := writeDurably(dir, backup, old, mode, false); err != nil {
			return "", fmt.Errorf("statefile: back up %s: %w", path, err)
		}
	}
	if err := writeDurably(dir, path, data, mode, true); err != nil {
		return backup, fmt.Errorf("statefile: write %s: %w (the previous file is unchanged)", path, err)
	}
	return backup, nil
}

// writeDurably writes data to a temporary file in dir, fsyncs it, renames
// it to path and fsyncs dir. With replace false, an existing path is an
// error (backups are never overwritten).
func writeDurably(dir, path string, data []byte, mode fs.FileMode, replace bool) error {
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer func() {
		if tmpName != "" {
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if replace {
		err = os.Rename(tmpName, path)
	} else {
		err = unix.Renameat2(unix.AT_FDCWD, tmpName, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return err
	}
	tmpName = ""
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
