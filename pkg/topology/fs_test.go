package topology

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

// thisMachine returns an FS on /sys and /proc, and skips the test when /sys
// is not a sysfs (a container without it).
func thisMachine(t *testing.T) FS {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/devices/system/cpu", &st); err != nil || st.Type != unix.SYSFS_MAGIC {
		t.Skipf("/sys/devices/system/cpu is not on a sysfs here (%v)", err)
	}
	return NewFS("/sys", "/proc")
}

// opened returns how many descriptors f's capacity snapshots keep open.
func opened(f FS) int {
	f.open.mu.Lock()
	defer f.open.mu.Unlock()
	return f.open.set.open
}

// snapshotJSON renders a snapshot with everything it holds.
func snapshotJSON(t *testing.T, s *Snapshot) string {
	t.Helper()
	b, err := json.MarshalIndent(struct {
		*Snapshot
		Default uint64
	}{s, s.Memory.defaultHugePageSizeKiB}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// agrees fails t unless a capacity snapshot through f's open files equals
// one that opens every file, as CapacitySnapshot read before it kept files.
// Another test may change this machine meanwhile (the machine lock is not
// held): a disagreement is retried a few times, as a stale file would
// disagree every time.
func agrees(t *testing.T, f FS) *Snapshot {
	t.Helper()
	fresh := FS{sys: f.sys, proc: f.proc}
	var diff string
	for range 5 {
		kept, err := f.CapacitySnapshot()
		if err != nil {
			t.Fatalf("CapacitySnapshot() error: %v", err)
		}
		want, err := fresh.CapacitySnapshot()
		if err != nil {
			t.Fatalf("CapacitySnapshot() without open files error: %v", err)
		}
		if diff = cmp.Diff(snapshotJSON(t, want), snapshotJSON(t, kept)); diff == "" {
			return kept
		}
	}
	t.Fatalf("CapacitySnapshot() through the open files differs (-opened afresh +kept open):\n%s", diff)
	return nil
}

// TestCapacitySnapshotKeepsKernelFiles checks, on this machine, that
// capacity snapshots keep the sysfs and procfs files open and read through
// them the same snapshot as opening every file.
func TestCapacitySnapshotKeepsKernelFiles(t *testing.T) {
	f := thisMachine(t)
	agrees(t, f)
	n := opened(f)
	if n == 0 {
		t.Fatal("CapacitySnapshot() kept no file open")
	}
	agrees(t, f)
	if got := opened(f); got > n+3 {
		t.Errorf("the second snapshot kept %d files open, the first %d: they should be reused", got, n)
	}
	// Listings that take several reads, each ending before the end of
	// the directory: the offset that marks the end must not be taken
	// for one that does not.
	f.open.mu.Lock()
	f.open.set.r.dents = make([]byte, 64)
	f.open.mu.Unlock()
	agrees(t, f)
	// What the kernel fixes at boot is remembered with its file.
	f.open.mu.Lock()
	for _, path := range []string{"/sys/devices/system/cpu/possible", "/sys/devices/system/memory/block_size_bytes", "/sys/kernel/mm/hugepages"} {
		if _, err := os.Stat(path); err != nil {
			continue
		}
		if kept := f.open.set.files[path]; kept == nil || kept.fd < 0 || kept.fixed == nil && kept.names == nil {
			t.Errorf("%s is not remembered: %+v", path, kept)
		}
	}
	f.open.mu.Unlock()
	// Snapshot reads the same files and more, and keeps none.
	if _, err := f.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if got := opened(f); got > n+3 {
		t.Errorf("Snapshot() left %d files open, CapacitySnapshot() %d", got, n)
	}
}

// TestCapacitySnapshotKeepsNoRegularFile checks that the files of a fixture
// tree are opened on every read: a regular file replaced or removed between
// two snapshots could otherwise still be read through its old descriptor.
func TestCapacitySnapshotKeepsNoRegularFile(t *testing.T) {
	root := t.TempDir()
	if err := fixturegen.OneNode(2, 4194304, 8).WriteDir(root); err != nil {
		t.Fatal(err)
	}
	f := NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc"))
	s, err := f.CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CPUs.Online.String(); got != "0-1" {
		t.Fatalf("Online = %s, want 0-1", got)
	}
	if got := opened(f); got != 0 {
		t.Errorf("CapacitySnapshot() kept %d regular files open", got)
	}

	// cpu1 goes offline the way a fixture can show it: a new online file
	// renamed over the old one, and no topology directory. What a kernel
	// fixes at boot changes too: a fixture's is read on every snapshot.
	for name, content := range map[string]string{
		"sys/devices/system/cpu/online":                            "0\n",
		"sys/devices/system/cpu/possible":                          "0-3\n",
		"sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages": "1\n",
	} {
		tmp := filepath.Join(root, "new")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(root, "sys/devices/system/cpu/cpu1/topology")); err != nil {
		t.Fatal(err)
	}
	s, err = f.CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CPUs.Online.String(); got != "0" {
		t.Errorf("Online = %s after the change, want 0", got)
	}
	if got := s.CPUs.Possible.String(); got != "0-3" {
		t.Errorf("Possible = %s after the change, want 0-3", got)
	}
	if len(s.HugePages) != 2 || s.HugePages[1] != (HugePages{PageSizeKiB: 1048576, Pages: 1}) {
		t.Errorf("HugePages = %+v after adding 1Gi pages, want them", s.HugePages)
	}
	if c, _ := s.CPU(1); c.Package != -1 || c.Core != -1 || c.HasTopology() {
		t.Errorf("cpu1 = %+v after its topology was removed, want no ids", c)
	}
	if capacity := s.Capacity(); capacity.Cpu().String() != "1" {
		t.Errorf("capacity cpu = %s after the change, want 1", capacity.Cpu())
	}
}

// TestCapacitySnapshotConcurrent takes capacity snapshots from several
// goroutines through copies of one FS, for the race detector.
func TestCapacitySnapshotConcurrent(t *testing.T) {
	f := thisMachine(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			g := f // a copy shares the open files
			for range 20 {
				if _, err := g.CapacitySnapshot(); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestFileSetClosesUnread checks that a snapshot closes the files kept open
// that it did not read (a CPU or node that is gone), and that a kept file
// that fails is read again by its name.
func TestFileSetClosesUnread(t *testing.T) {
	thisMachine(t)
	s := &fileSet{}
	defer s.closeAll()
	read := func(path string) error {
		_, err := s.r.readAt(atFDCWD, "", path, "")
		return err
	}
	s.begin()
	for _, p := range []string{"/sys/devices/system/cpu/possible", "/sys/devices/system/cpu/present", "/proc/meminfo"} {
		if err := read(p); err != nil {
			t.Fatal(err)
		}
	}
	s.end()
	if s.open != 3 {
		t.Fatalf("%d files kept open, want 3", s.open)
	}

	s.begin()
	if err := read("/sys/devices/system/cpu/possible"); err != nil {
		t.Fatal(err)
	}
	if err := read("/sys/devices/system/cpu/no-such-file"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("reading a missing file: error %v, want one matching fs.ErrNotExist", err)
	}
	s.end()
	if s.open != 1 || len(s.files) != 1 {
		t.Fatalf("after a snapshot that read one of them: %d files kept open, %d known; want 1", s.open, len(s.files))
	}

	// A descriptor whose reads fail (here a directory's, as kernfs fails
	// the reads of a file it removed) is replaced by a new one.
	f := s.files["/sys/devices/system/cpu/possible"]
	unix.Close(f.fd)
	fd, err := unix.Open("/sys/devices/system/cpu", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.fd = fd
	s.begin()
	if err := read("/sys/devices/system/cpu/possible"); err != nil {
		t.Fatalf("reading through a failed descriptor: %v", err)
	}
	s.end()
	if f := s.files["/sys/devices/system/cpu/possible"]; s.open != 1 || f == nil || f.fd < 0 {
		t.Errorf("after the failed read: %d files kept open (%+v), want the file open again", s.open, f)
	}
}

// TestFileSetLimit checks that no more files are kept open than the limit,
// and that the others are still read.
func TestFileSetLimit(t *testing.T) {
	f := thisMachine(t)
	f.open.mu.Lock()
	f.open.set.begin() // sets the limit from RLIMIT_NOFILE
	f.open.set.end()
	f.open.set.max = 2
	f.open.mu.Unlock()
	agrees(t, f)
	if got := opened(f); got != 2 {
		t.Errorf("%d files kept open, want the limit, 2", got)
	}
}

// TestKeptDirListingNothing checks that a node's hugepages directory kept
// open that lists nothing, as one the kernel removed lists through an old
// descriptor (here an empty directory's descriptor put in its place), is
// opened again by its name.
func TestKeptDirListingNothing(t *testing.T) {
	f := thisMachine(t)
	const path = "/sys/devices/system/node/node0/hugepages"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no hugepages directory in node 0 here: %v", err)
	}
	agrees(t, f)
	f.open.mu.Lock()
	kept := f.open.set.files[path]
	if kept == nil || kept.fd < 0 {
		f.open.mu.Unlock()
		t.Fatalf("%s is not kept open: %+v", path, kept)
	}
	empty, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.open.mu.Unlock()
		t.Fatal(err)
	}
	unix.Close(kept.fd)
	kept.fd = empty
	f.open.mu.Unlock()

	s := agrees(t, f)
	if len(s.NUMANodes) == 0 || len(s.NUMANodes[0].HugePages) == 0 {
		t.Errorf("node 0's hugepages read through a directory that lists nothing: %+v", s.NUMANodes)
	}
	f.open.mu.Lock()
	defer f.open.mu.Unlock()
	if kept := f.open.set.files[path]; kept == nil || kept.fd < 0 {
		t.Errorf("%s is not kept open again: %+v", path, kept)
	}
}
