package statefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hotplugd/hotplugd/internal/faultpoint"
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
	b, _, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("statefile: read %s: %w", path, err)
	}
	return b, nil
}

// read returns the contents and the permission bits of the regular file at
// path, both from the one open file, so the mode Write keeps is the mode of
// the file it backed up.
func read(path string) ([]byte, fs.FileMode, error) {
	// Look before opening: opening a device node can have side effects
	// (a watchdog device arms on open). The fstat below checks again, on
	// what was really opened.
	if fi, err := os.Lstat(path); err == nil && fi.Mode().Type()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
		return nil, 0, fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
	// writer; it is refused below without being read. O_NOCTTY: a terminal
	// opened by mistake must not become the controlling one.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	switch {
	case errors.Is(err, unix.ELOOP):
		return nil, 0, fmt.Errorf("%w (a symlink; refusing to follow it)", ErrNotRegular)
	case errors.Is(err, unix.ENXIO):
		// open(2) gives ENXIO for a socket and for a device node
		// without a driver: neither is a regular file.
		return nil, 0, fmt.Errorf("%w (a socket or a device without a driver)", ErrNotRegular)
	case err != nil:
		return nil, 0, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%w (%s)", ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > MaxSize {
		return nil, 0, ErrTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, 0, err
	}
	if len(b) > MaxSize {
		return nil, 0, ErrTooLarge
	}
	return b, fi.Mode().Perm(), nil
}

// kind names the type of a file that is not regular, for an error message.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	default:
		return "file type " + m.Type().String()
	}
}

// BackupPath is where Write copies the file before replacing it:
// path.hotplugd-backup-<UTC time>, e.g.
// cpu_manager_state.hotplugd-backup-20261122T023700.123456789Z.
func BackupPath(path string, now time.Time) string {
	return path + ".hotplugd-backup-" + now.UTC().Format(backupStamp)
}

// Write replaces the file at path with data. When the file exists it is
// first kept as BackupPath(path, now): a hard link to the old file (which
// the rename then leaves alone), or a copy where a link is not possible,
// made durable (fsync of the old data and of the directory) before the
// replacement; the new file keeps the old mode; a new file gets 0644.
// The replacement is atomic. It returns the backup's path, "" when there was
// no file. The path must not be a symlink, and data must not be larger than
// MaxSize (Read, and so the next Write, would refuse the file). An error
// says whether the file at path is unchanged; a backup made before a failed
// replacement is returned with the error.
func Write(path string, data []byte, now time.Time) (backup string, err error) {
	if len(data) > MaxSize {
		return "", fmt.Errorf("statefile: write %s: new contents %w (the previous file is unchanged)", path, ErrTooLarge)
	}
	dir := filepath.Dir(path)
	mode := fs.FileMode(0o644)
	old, oldMode, err := read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return "", fmt.Errorf("statefile: write %s: %w (the previous file is unchanged)", path, err)
	default:
		mode = oldMode
		b := BackupPath(path, now)
		if err := linkBackup(dir, path, b); err != nil {
			// No hard links here (or the link failed): copy instead.
			if errors.Is(err, fs.ErrExist) {
				return "", fmt.Errorf("statefile: write %s: back up to %s: %w (the previous file is unchanged)", path, b, err)
			}
			if _, err := writeDurably(dir, b, old, mode, false); err != nil {
				return "", fmt.Errorf("statefile: write %s: back up to %s: %w (the previous file is unchanged)", path, b, err)
			}
		}
		backup = b
	}
	faultpoint.Hit(faultpoint.StateFileWrite)
	if renamed, err := writeDurably(dir, path, data, mode, true); err != nil {
		if renamed {
			// The new file is in place but its directory entry may not
			// survive a power loss: the caller must not report success.
			return backup, fmt.Errorf("statefile: write %s: replaced, but not durably: %w", path, err)
		}
		return backup, fmt.Errorf("statefile: write %s: %w (the previous file is unchanged)", path, err)
	}
	// The write is done: an older backup that cannot be removed stays.
	PruneBackups(path, KeepBackups)
	return backup, nil
}

// KeepBackups is how many backups of a file Write keeps: the newest.
const KeepBackups = 5

// backupStamp is the time format of BackupPath's suffix.
const backupStamp = "20060102T150405.000000000Z"

// Backups lists the backups of path (BackupPath's names, next to it),
// oldest first. Other files, and names whose time does not parse, are not
// backups.
func Backups(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("statefile: listing the backups of %s: %w", path, err)
	}
	prefix := base + ".hotplugd-backup-"
	var out []string
	for _, e := range entries {
		stamp, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		if _, err := time.Parse(backupStamp, stamp); err != nil {
			continue
		}
		out = append(out, filepath.Join(dir, e.Name()))
	}
	slices.Sort(out) // the stamp's fixed width sorts by time
	return out, nil
}

// PruneBackups removes all but the newest keep backups of path and
// returns the paths it removed. It goes on past a file it cannot remove
// and returns the errors joined.
func PruneBackups(path string, keep int) ([]string, error) {
	all, err := Backups(path)
	if err != nil || len(all) <= keep {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, b := range all[:len(all)-max(keep, 0)] {
		if err := os.Remove(b); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("statefile: removing the backup %s: %w", b, err))
			continue
		}
		removed = append(removed, b)
	}
	return removed, errors.Join(errs...)
}

// linkBackup makes backup a hard link to the current file: the old inode
// stays as it is when the new file is renamed over path, with no copy of its
// data. The old data and the new directory entry are made durable before
// the caller replaces path. An existing backup is never replaced.
func linkBackup(dir, path, backup string) error {
	if err := os.Link(path, backup); err != nil {
		return err
	}
	f, err := os.Open(backup)
	if err == nil {
		err = f.Sync() // nothing to do when its writer synced it
		f.Close()
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(backup)
		return err
	}
	return nil
}

// writeDurably writes data to a temporary file in dir, fsyncs it, renames
// it to path and fsyncs dir. With replace false, an existing path is an
// error (backups are never overwritten). renamed reports whether path now
// holds data, which is the case when only the fsync of dir failed.
func writeDurably(dir, path string, data []byte, mode fs.FileMode, replace bool) (renamed bool, err error) {
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return false, err
	}
	tmpName := tmp.Name()
	defer func() {
		if tmpName != "" {
			os.Remove(tmpName)
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if replace {
		err = os.Rename(tmpName, path)
	} else {
		// EEXIST when path exists; the caller names path.
		err = unix.Renameat2(unix.AT_FDCWD, tmpName, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return false, err
	}
	tmpName = ""
	return true, syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Replace atomically and durably replaces (or creates, mode 0600) the file
// at path with data, keeping no backup: for hotplugd's own records, whose
// previous contents are superseded by the new ones.
func Replace(path string, data []byte) error {
	if _, err := writeDurably(filepath.Dir(path), path, data, 0o600, true); err != nil {
		return fmt.Errorf("statefile: replace %s: %w", path, err)
	}
	return nil
}
