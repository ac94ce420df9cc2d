package statefile_test

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// now is the time of every Write in these tests; later is a second one.
var (
	now   = time.Date(2026, 11, 22, 2, 37, 0, 123456789, time.UTC)
	later = now.Add(time.Second)
)

const (
	oldState = `{"policyName":"static","defaultCpuSet":"0-3","checksum":1}`
	newState = `{"policyName":"static","defaultCpuSet":"0-7","checksum":2}`
)

func TestRead(t *testing.T) {
	tests := []struct {
		name string
		// setup makes the tree under dir and returns the path to read.
		setup   func(t *testing.T, dir string) string
		want    string
		wantErr error
		// wantText is in the error message: what the path is.
		wantText string
	}{
		{
			name:  "regular file",
			setup: file("state", oldState, 0o644),
			want:  oldState,
		},
		{
			name:  "empty file",
			setup: file("state", "", 0o644),
			want:  "",
		},
		{
			name:  "exactly MaxSize",
			setup: file("state", strings.Repeat("x", statefile.MaxSize), 0o644),
			want:  strings.Repeat("x", statefile.MaxSize),
		},
		{
			name:  "the directory is reached through a symlink",
			setup: chain(file("real/state", oldState, 0o644), symlink("link", "real"), at("link/state")),
			want:  oldState,
		},
		{
			name:     "missing file",
			setup:    at("state"),
			wantErr:  fs.ErrNotExist,
			wantText: "no such file or directory",
		},
		{
			name:    "missing directory",
			setup:   at("nodir/state"),
			wantErr: fs.ErrNotExist,
		},
		{
			name:    "a path component is a file",
			setup:   chain(file("notdir", "", 0o644), at("notdir/state")),
			wantErr: syscall.ENOTDIR,
		},
		{
			name:     "MaxSize+1 bytes",
			setup:    file("state", strings.Repeat("x", statefile.MaxSize+1), 0o644),
			wantErr:  statefile.ErrTooLarge,
			wantText: "larger than 4194304 bytes",
		},
		{
			name:     "symlink to a regular file",
			setup:    chain(file("target", oldState, 0o644), symlink("state", "target")),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a symlink; refusing to follow it)",
		},
		{
			name:     "dangling symlink",
			setup:    symlink("state", "target"),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a symlink; refusing to follow it)",
		},
		{
			name:     "symlink to a directory",
			setup:    chain(mkdir("target"), symlink("state", "target")),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a symlink; refusing to follow it)",
		},
		{
			name:     "directory",
			setup:    mkdir("state"),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a directory)",
		},
		{
			name:     "FIFO without a writer",
			setup:    fifo("state"),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a FIFO)",
		},
		{
			name:     "socket",
			setup:    socket("state"),
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a socket or a device without a driver)",
		},
		{
			name:     "character device",
			setup:    func(*testing.T, string) string { return "/dev/null" },
			wantErr:  statefile.ErrNotRegular,
			wantText: "not a regular file (a device)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			before := snapshot(t, dir)

			var got []byte
			err := noBlock(t, func() (err error) {
				got, err = statefile.Read(path)
				return err
			})

			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				if diff := cmp.Diff(tt.want, string(got)); diff != "" {
					t.Errorf("unexpected contents (-want +got):\n%s", diff)
				}
			} else {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Read: got error %v, want one matching %v", err, tt.wantErr)
				}
				if want := "statefile: read " + path + ": " + tt.wantText; !strings.HasPrefix(err.Error(), want) {
					t.Errorf("error %q does not start with %q", err, want)
				}
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Errorf("Read changed the tree (-before +after):\n%s", diff)
			}
		})
	}
}

func TestWrite(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, dir string) string
		data     string
		wantMode fs.FileMode
		// wantBackup is whether the previous file is backed up.
		wantBackup bool
	}{
		{
			name:     "new file gets 0644",
			setup:    at("state"),
			data:     newState,
			wantMode: 0o644,
		},
		{
			name:       "existing 0600 file keeps its mode, and so does its backup",
			setup:      file("state", oldState, 0o600),
			data:       newState,
			wantMode:   0o600,
			wantBackup: true,
		},
		{
			name:       "existing read-only file",
			setup:      file("state", oldState, 0o400),
			data:       newState,
			wantMode:   0o400,
			wantBackup: true,
		},
		{
			name:       "existing empty file",
			setup:      file("state", "", 0o644),
			data:       newState,
			wantMode:   0o644,
			wantBackup: true,
		},
		{
			name:       "new contents empty",
			setup:      file("state", oldState, 0o644),
			data:       "",
			wantMode:   0o644,
			wantBackup: true,
		},
		{
			name:       "same contents still backed up",
			setup:      file("state", oldState, 0o644),
			data:       oldState,
			wantMode:   0o644,
			wantBackup: true,
		},
		{
			name:       "new contents of exactly MaxSize",
			setup:      file("state", oldState, 0o644),
			data:       strings.Repeat("x", statefile.MaxSize),
			wantMode:   0o644,
			wantBackup: true,
		},
		{
			name:       "other files in the directory are left alone",
			setup:      chain(file("memory_manager_state", oldState, 0o644), file(".state.tmp-1", "x", 0o600), file("state", oldState, 0o644)),
			data:       newState,
			wantMode:   0o644,
			wantBackup: true,
		},
		{
			// /var/lib/kubelet is often a symlink to a data disk.
			name:       "the directory is reached through a symlink",
			setup:      chain(file("real/state", oldState, 0o600), symlink("link", "real"), at("link/state")),
			data:       newState,
			wantMode:   0o600,
			wantBackup: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			before := snapshot(t, dir)

			var backup string
			err := noBlock(t, func() (err error) {
				backup, err = statefile.Write(path, []byte(tt.data), now)
				return err
			})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}

			wantBackup := ""
			if tt.wantBackup {
				wantBackup = statefile.BackupPath(path, now)
			}
			if backup != wantBackup {
				t.Errorf("Write returned backup %q, want %q", backup, wantBackup)
			}
			// Everything else as it was, the file replaced, the old one
			// in the backup with its mode, and no temporary file left.
			want := maps.Clone(before)
			key := treeKey(t, dir, path)
			if tt.wantBackup {
				want[treeKey(t, dir, wantBackup)] = before[key]
			}
			want[key] = regular(tt.wantMode, tt.data)
			if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
				t.Errorf("unexpected tree after Write (-want +got):\n%s", diff)
			}
			got, err := statefile.Read(path)
			if err != nil {
				t.Fatalf("Read after Write: %v", err)
			}
			if string(got) != tt.data {
				t.Errorf("Read after Write: got %d bytes, want the %d written", len(got), len(tt.data))
			}
		})
	}
}

// TestWriteKeepsEveryBackup writes twice at different times: each write
// backs up the file it replaces.
func TestWriteKeepsEveryBackup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	steps := []struct {
		data       string
		now        time.Time
		wantBackup string
	}{
		{data: "v1", now: now, wantBackup: ""},
		{data: "v2", now: now, wantBackup: statefile.BackupPath(path, now)},
		{data: "v3", now: later, wantBackup: statefile.BackupPath(path, later)},
	}
	for i, s := range steps {
		backup, err := statefile.Write(path, []byte(s.data), s.now)
		if err != nil {
			t.Fatalf("step %d: Write: %v", i, err)
		}
		if backup != s.wantBackup {
			t.Errorf("step %d: Write returned backup %q, want %q", i, backup, s.wantBackup)
		}
	}
	want := tree{
		"state": regular(0o644, "v3"),
		filepath.Base(statefile.BackupPath(path, now)):   regular(0o644, "v1"),
		filepath.Base(statefile.BackupPath(path, later)): regular(0o644, "v2"),
	}
	if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
		t.Errorf("unexpected tree (-want +got):\n%s", diff)
	}
}

// TestWriteKeepsTheNewestBackups: ten writes a minute apart keep the
// newest KeepBackups backups, each the file as it was before its write;
// other files next to it, another file's backups and a name that only
// looks like a backup are left alone.
func TestWriteKeepsTheNewestBackups(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	want := tree{}
	for _, name := range []string{
		"state.hotplugd-backup-notatime",
		"other_state.hotplugd-backup-20200101T000000.000000000Z",
		"state.hotplugd-backup-20200101T000000.000000000Z.dpkg-old",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		want[name] = regular(0o644, "x")
	}
	const writes = 10
	for i := range writes {
		at := now.Add(time.Duration(i) * time.Minute)
		if _, err := statefile.Write(path, []byte(fmt.Sprint("v", i)), at); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if i >= writes-statefile.KeepBackups {
			want[filepath.Base(statefile.BackupPath(path, at))] = regular(0o644, fmt.Sprint("v", i-1))
		}
	}
	want["state"] = regular(0o644, fmt.Sprint("v", writes-1))
	if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
		t.Errorf("unexpected tree (-want +got):\n%s", diff)
	}
	// PruneBackups(0), as hotplugd prune does at an uninstall: none left.
	removed, err := statefile.PruneBackups(path, 0)
	if err != nil || len(removed) != statefile.KeepBackups {
		t.Errorf("PruneBackups(0) removed %q, %v; want the %d backups", removed, err, statefile.KeepBackups)
	}
	if b, err := statefile.Backups(path); err != nil || len(b) != 0 {
		t.Errorf("after PruneBackups(0): %q, %v", b, err)
	}
}

// TestWriteRefused covers every Write that must fail: the error names the
// path, says the previous file is unchanged, and nothing in the directory
// changes, the target of a symlink included and no temporary file left.
func TestWriteRefused(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, dir string) string
		data    string
		wantErr error
	}{
		{
			name:    "symlink to a regular file",
			setup:   chain(file("target", oldState, 0o644), symlink("state", "target")),
			wantErr: statefile.ErrNotRegular,
		},
		{
			// Following it would create the target.
			name:    "dangling symlink",
			setup:   symlink("state", "target"),
			wantErr: statefile.ErrNotRegular,
		},
		{
			name:    "directory",
			setup:   mkdir("state"),
			wantErr: statefile.ErrNotRegular,
		},
		{
			name:    "FIFO without a writer",
			setup:   fifo("state"),
			wantErr: statefile.ErrNotRegular,
		},
		{
			name:    "socket",
			setup:   socket("state"),
			wantErr: statefile.ErrNotRegular,
		},
		{
			name:    "existing file larger than MaxSize",
			setup:   file("state", strings.Repeat("x", statefile.MaxSize+1), 0o644),
			wantErr: statefile.ErrTooLarge,
		},
		{
			// Read would refuse the result, and so would the next Write.
			name:    "new contents larger than MaxSize",
			setup:   file("state", oldState, 0o644),
			data:    strings.Repeat("x", statefile.MaxSize+1),
			wantErr: statefile.ErrTooLarge,
		},
		{
			// The temporary copy is written, then the rename refuses.
			name:    "backup path already exists",
			setup:   chain(file(statefile.BackupPath("state", now), "older backup", 0o600), file("state", oldState, 0o644)),
			wantErr: fs.ErrExist,
		},
		{
			name:    "a path component is a file",
			setup:   chain(file("notdir", "", 0o644), at("notdir/state")),
			wantErr: syscall.ENOTDIR,
		},
		{
			name:    "missing directory",
			setup:   at("nodir/state"),
			wantErr: fs.ErrNotExist,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tt.setup(t, dir)
			data := tt.data
			if data == "" {
				data = newState
			}
			before := snapshot(t, dir)

			var backup string
			err := noBlock(t, func() (err error) {
				backup, err = statefile.Write(path, []byte(data), now)
				return err
			})

			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Write: got error %v, want one matching %v", err, tt.wantErr)
			}
			checkRefusal(t, err, path)
			t.Logf("error: %v", err)
			if backup != "" {
				t.Errorf("Write returned backup %q, want none", backup)
			}
			if diff := cmp.Diff(before, snapshot(t, dir)); diff != "" {
				t.Errorf("Write changed the tree (-before +after):\n%s", diff)
			}
		})
	}
}

// TestIntegrationWriteNoSpace fills a small tmpfs so that the backup or the
// new file cannot be written: the failure is reported with the backup made
// so far, the file is unchanged, and no temporary file is left. Needs root.
func TestIntegrationWriteNoSpace(t *testing.T) {
	tests := []struct {
		name string
		old  string // fits the tmpfs once, not twice when large
		data string
		// wantBackup is whether the backup fitted before the write failed.
		wantBackup bool
	}{
		{
			name:       "new file does not fit",
			old:        strings.Repeat("o", 8<<10),
			data:       strings.Repeat("n", 1<<20),
			wantBackup: true,
		},
		{
			// The backup is a hard link and takes no space; the new file
			// does not fit beside the old one.
			name:       "new file does not fit beside the old one",
			old:        strings.Repeat("o", 40<<10),
			data:       strings.Repeat("n", 30<<10),
			wantBackup: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=64k,mode=0700"); err != nil {
				if errors.Is(err, unix.EPERM) {
					t.Skipf("cannot mount a tmpfs (needs root): %v", err)
				}
				t.Fatalf("mount tmpfs on %s: %v", dir, err)
			}
			t.Cleanup(func() {
				if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
					t.Errorf("unmount %s: %v", dir, err)
				}
			})
			path := file("state", tt.old, 0o600)(t, dir)
			before := snapshot(t, dir)

			backup, err := statefile.Write(path, []byte(tt.data), now)

			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("Write: got error %v, want one matching ENOSPC", err)
			}
			checkRefusal(t, err, path)
			t.Logf("error: %v", err)
			want := maps.Clone(before)
			wantBackup := ""
			if tt.wantBackup {
				wantBackup = statefile.BackupPath(path, now)
				want[filepath.Base(wantBackup)] = before["state"]
			}
			if backup != wantBackup {
				t.Errorf("Write returned backup %q, want %q", backup, wantBackup)
			}
			if diff := cmp.Diff(want, snapshot(t, dir)); diff != "" {
				t.Errorf("unexpected tree after a failed Write (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBackupPath(t *testing.T) {
	tests := []struct {
		name string
		now  time.Time
		want string
	}{
		{
			name: "UTC with nanoseconds",
			now:  now,
			want: "/var/lib/kubelet/cpu_manager_state.hotplugd-backup-20261122T023700.123456789Z",
		},
		{
			name: "another zone is shown in UTC",
			now:  now.In(time.FixedZone("CET", 3600)),
			want: "/var/lib/kubelet/cpu_manager_state.hotplugd-backup-20261122T023700.123456789Z",
		},
		{
			// Fixed width, so backups sort by time.
			name: "whole second keeps its zeros",
			now:  time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
			want: "/var/lib/kubelet/cpu_manager_state.hotplugd-backup-20260102T030405.000000000Z",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := statefile.BackupPath("/var/lib/kubelet/cpu_manager_state", tt.now); got != tt.want {
				t.Errorf("BackupPath: got %q, want %q", got, tt.want)
			}
		})
	}
}

// checkRefusal checks the message of a failed Write.
func checkRefusal(t *testing.T, err error, path string) {
	t.Helper()
	msg := err.Error()
	if want := "statefile: write " + path + ": "; !strings.HasPrefix(msg, want) {
		t.Errorf("error %q does not start with %q", msg, want)
	}
	if want := "(the previous file is unchanged)"; !strings.HasSuffix(msg, want) {
		t.Errorf("error %q does not end with %q", msg, want)
	}
}

// noBlock runs f and fails the test if it does not return promptly, which
// is how an open of a FIFO without O_NONBLOCK would show.
func noBlock(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("blocked for 10s (opened a FIFO without O_NONBLOCK?)")
		return nil
	}
}

// A setup makes part of a tree under dir and returns the path under test.
type setup = func(t *testing.T, dir string) string

// at returns dir/rel without making anything.
func at(rel string) setup {
	return func(_ *testing.T, dir string) string { return filepath.Join(dir, rel) }
}

// chain runs each setup and returns the path of the last.
func chain(setups ...setup) setup {
	return func(t *testing.T, dir string) string {
		var path string
		for _, s := range setups {
			path = s(t, dir)
		}
		return path
	}
}

func file(rel, content string, mode fs.FileMode) setup {
	return func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		// WriteFile's mode is masked by the umask.
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

func symlink(rel, target string) setup {
	return func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.Symlink(target, path); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

func mkdir(rel string) setup {
	return func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

func fifo(rel string) setup {
	return func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := unix.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// socket makes a socket inode; open(2) of one fails with ENXIO.
func socket(rel string) setup {
	return func(t *testing.T, dir string) string {
		t.Helper()
		path := filepath.Join(dir, rel)
		if err := unix.Mknod(path, unix.S_IFSOCK|0o644, 0); err != nil {
			t.Fatal(err)
		}
		return path
	}
}

// A tree maps the slash-separated path of every entry under a directory to
// what it is; symlinks are recorded, not followed.
type tree map[string]entry

type entry struct {
	Mode    string // fs.FileMode.String(): type and permissions
	Content string // regular files: the bytes, or a digest when large
	Target  string // symlinks
}

// regular is the entry of a regular file.
func regular(perm fs.FileMode, content string) entry {
	return entry{Mode: perm.String(), Content: digest([]byte(content))}
}

// digest keeps small contents readable in diffs and large ones short.
func digest(b []byte) string {
	if len(b) <= 256 {
		return string(b)
	}
	return fmt.Sprintf("%d bytes, sha256 %x", len(b), sha256.Sum256(b))
}

func snapshot(t *testing.T, root string) tree {
	t.Helper()
	got := tree{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == root {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{Mode: fi.Mode().String()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			e.Content = digest(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.Target, err = os.Readlink(path); err != nil {
				return err
			}
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		got[filepath.ToSlash(rel)] = e
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", root, err)
	}
	return got
}

// treeKey is the key of path in a snapshot of root: its directory's
// symlinks resolved, since the snapshot does not follow them.
func treeKey(t *testing.T, root, path string) string {
	t.Helper()
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	realDir, err := filepath.EvalSymlinks(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(realRoot, filepath.Join(realDir, filepath.Base(path)))
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(rel)
}
