package hugepagewatch_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
)

// TestNewFiles checks which files New watches, on machines with and
// without hugetlb, NUMA and procfs.
func TestNewFiles(t *testing.T) {
	tests := []struct {
		name  string
		files []string // created in the tree, with the decoys
		want  []string // watched, relative to the tree
	}{
		{
			name:  "every kind of file",
			files: fullMachine,
			want:  fullMachine,
		},
		{
			name:  "one size, one node",
			files: []string{global2M, node0_2M, proc},
			want:  []string{global2M, node0_2M, proc},
		},
		{
			name:  "no hugetlb",
			files: []string{"sys/kernel/mm/", "sys/devices/system/node/node0/meminfo", "proc/sys/vm/swappiness"},
		},
		{
			name:  "no NUMA",
			files: []string{global2M, mempolicy2M, proc, procMempolicy},
			want:  []string{global2M, mempolicy2M, proc, procMempolicy},
		},
		{
			name:  "node without hugepages directory",
			files: []string{global2M, "sys/devices/system/node/node0/meminfo", node1_2M},
			want:  []string{global2M, node1_2M},
		},
		{
			name:  "no procfs",
			files: []string{global2M, node0_2M},
			want:  []string{global2M, node0_2M},
		},
		{
			name: "empty roots",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t, append(slices.Clone(tc.files), decoys...)...)
			w := newWatcher(t, tr)
			got := w.Files()
			if diff := cmp.Diff(tr.paths(tc.want...), got); diff != "" {
				t.Errorf("unexpected Files (-want +got):\n%s", diff)
			}
			if !slices.IsSorted(got) {
				t.Errorf("Files not sorted: %q", got)
			}
		})
	}
}

// TestNewMissingRoots checks that roots that do not exist at all are
// nothing to watch, not an error.
func TestNewMissingRoots(t *testing.T) {
	dir := t.TempDir()
	w, err := hugepagewatch.New(filepath.Join(dir, "nosys"), filepath.Join(dir, "noproc"), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer w.Close()
	if got := w.Files(); len(got) != 0 {
		t.Errorf("Files = %q, want none", got)
	}
}

// TestNewErrors checks that an error names the path it is about.
func TestNewErrors(t *testing.T) {
	tests := []struct {
		name    string
		files   []string
		wantErr string // ROOT is the tree's root
	}{
		{
			name:    "hugepages is a file",
			files:   []string{"sys/kernel/mm/hugepages", node0_2M},
			wantErr: "hugepagewatch: list ROOT/sys/kernel/mm/hugepages: not a directory",
		},
		{
			name:    "node hugepages is a file",
			files:   []string{global2M, "sys/devices/system/node/node0/hugepages"},
			wantErr: "hugepagewatch: list ROOT/sys/devices/system/node/node0/hugepages: not a directory",
		},
		{
			name:    "proc sys/vm is a file",
			files:   []string{global2M, "proc/sys/vm"},
			wantErr: "hugepagewatch: list ROOT/proc/sys/vm: not a directory",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t, tc.files...)
			w, err := hugepagewatch.New(tr.sys(), tr.proc(), nil)
			if err == nil {
				w.Close()
				t.Fatalf("New succeeded, want error %q", tc.wantErr)
			}
			want := strings.ReplaceAll(tc.wantErr, "ROOT", tr.root)
			if err.Error() != want {
				t.Errorf("New error = %q, want %q", err, want)
			}
			if !errors.Is(err, syscall.ENOTDIR) {
				t.Errorf("New error %v is not ENOTDIR", err)
			}
		})
	}
}

// TestChanged checks that a write through each kind of file calls Changed
// with that file's path, and only with it.
func TestChanged(t *testing.T) {
	for _, rel := range fullMachine {
		t.Run(rel, func(t *testing.T) {
			tr := newTree(t, append(slices.Clone(fullMachine), decoys...)...)
			w := newWatcher(t, tr)
			rec := newRecorder()
			start(t, w, rec)

			// A write to an unwatched neighbour first: nothing may come of it.
			write(t, tr.path(decoys[0]), "1\n")
			for _, v := range []string{"4\n", "0\n", "16\n"} {
				write(t, tr.path(rel), v)
				rec.expect(t, tr.path(rel))
			}
		})
	}
}

// TestRescan checks that Rescan watches files of nodes that appeared,
// forgets those of nodes that went, and re-watches a replaced file.
func TestRescan(t *testing.T) {
	base := []string{global2M, node0_2M, proc}
	tests := []struct {
		name string
		// change edits the tree between New and Rescan.
		change    func(t *testing.T, tr tree)
		wantAdded []string
		wantFiles []string
		// written are written after the Rescan, and must be reported.
		written []string
	}{
		{
			name:      "new node",
			change:    func(t *testing.T, tr tree) { tr.create(t, node1_2M) },
			wantAdded: []string{node1_2M},
			wantFiles: []string{global2M, node0_2M, node1_2M, proc},
			written:   []string{node1_2M, node0_2M},
		},
		{
			name: "new node and new size",
			change: func(t *testing.T, tr tree) {
				tr.create(t, node1_2M)
				tr.create(t, global1G)
				tr.create(t, node0_1G)
			},
			wantAdded: []string{global1G, node0_1G, node1_2M},
			wantFiles: []string{global1G, global2M, node0_1G, node0_2M, node1_2M, proc},
			written:   []string{global1G, node0_1G, node1_2M},
		},
		{
			name: "node removed",
			change: func(t *testing.T, tr tree) {
				if err := os.RemoveAll(tr.path("sys/devices/system/node/node0")); err != nil {
					t.Fatal(err)
				}
			},
			wantFiles: []string{global2M, proc},
			written:   []string{global2M},
		},
		{
			name: "node removed and added again",
			change: func(t *testing.T, tr tree) {
				if err := os.RemoveAll(tr.path("sys/devices/system/node/node0")); err != nil {
					t.Fatal(err)
				}
				tr.create(t, node0_2M)
			},
			wantAdded: []string{node0_2M},
			wantFiles: []string{global2M, node0_2M, proc},
			written:   []string{node0_2M},
		},
		{
			name:      "nothing changed",
			change:    func(t *testing.T, tr tree) {},
			wantFiles: []string{global2M, node0_2M, proc},
			written:   []string{proc},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t, base...)
			w := newWatcher(t, tr)
			rec := newRecorder()
			start(t, w, rec)

			tc.change(t, tr)
			added, err := w.Rescan()
			if err != nil {
				t.Fatalf("Rescan: %v", err)
			}
			if diff := cmp.Diff(tr.paths(tc.wantAdded...), added); diff != "" {
				t.Errorf("unexpected added (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tr.paths(tc.wantFiles...), w.Files()); diff != "" {
				t.Errorf("unexpected Files (-want +got):\n%s", diff)
			}
			// Unlinking a watched plain file is an IN_ATTRIB (link count):
			// removed files may report Changed before Rescan forgets them.
			// (kernfs removes files without that.)
			var noise []string
			for _, rel := range base {
				if !slices.Contains(tc.wantFiles, rel) {
					noise = append(noise, tr.path(rel))
				}
			}
			for _, rel := range tc.written {
				write(t, tr.path(rel), "8\n")
				rec.expect(t, tr.path(rel), noise...)
			}

			// A second Rescan finds nothing new.
			if added, err := w.Rescan(); err != nil || len(added) > 0 {
				t.Errorf("second Rescan = %q, %v; want nothing added", added, err)
			}
		})
	}
}

// TestRescanWhileRunning calls Rescan from another goroutine while Run
// delivers events, with nodes coming and going (run it with -race).
func TestRescanWhileRunning(t *testing.T) {
	tr := newTree(t, global2M, node0_2M, proc)
	w := newWatcher(t, tr)
	rec := newRecorder()
	start(t, w, rec)

	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		close(done)
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			// t.Fatal is for the test's goroutine: plain os calls here.
			node := tr.path(filepath.Join("sys/devices/system/node", "node"+strconv.Itoa(1+i%3)))
			size := filepath.Join(node, "hugepages/hugepages-2048kB")
			if err := os.MkdirAll(size, 0o755); err != nil {
				t.Error(err)
				return
			}
			if err := os.WriteFile(filepath.Join(size, "nr_hugepages"), []byte("0\n"), 0o644); err != nil {
				t.Error(err)
				return
			}
			if _, err := w.Rescan(); err != nil {
				t.Errorf("Rescan: %v", err)
				return
			}
			if err := os.RemoveAll(node); err != nil {
				t.Error(err)
				return
			}
			w.Files()
		}
	}()
	// Unlinking a watched plain file is an IN_ATTRIB (link count), so the
	// removed nodes' files may report Changed too; kernfs does not do that.
	node0 := tr.path(node0_2M)
	for i := range 50 {
		write(t, node0, strconv.Itoa(i))
		for c := rec.next(t, 5*time.Second); c.path != node0; c = rec.next(t, 5*time.Second) {
			if !strings.HasPrefix(c.path, tr.path("sys/devices/system/node/node")) {
				t.Fatalf("Changed(%s), want Changed(%s)", c.path, node0)
			}
		}
	}
}

// TestRunStop checks that Run returns nil promptly when its context is
// cancelled or the watcher is closed, that it closes the watcher, and that
// Close is idempotent.
func TestRunStop(t *testing.T) {
	tests := []struct {
		name string
		stop func(w *hugepagewatch.Watcher, r *running) error
	}{
		{name: "cancel", stop: func(_ *hugepagewatch.Watcher, r *running) error { return r.stop(t) }},
		{name: "close", stop: func(w *hugepagewatch.Watcher, r *running) error {
			if err := w.Close(); err != nil {
				t.Errorf("Close while running: %v", err)
			}
			return r.wait(t)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTree(t, global2M, proc)
			w := newWatcher(t, tr)
			rec := newRecorder()
			r := start(t, w, rec)
			// One event shows Run is running.
			write(t, tr.path(proc), "1\n")
			rec.expect(t, tr.path(proc))

			if err := tc.stop(w, r); err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
			for i := range 2 {
				if err := w.Close(); err != nil {
					t.Errorf("Close #%d after Run: %v", i+1, err)
				}
			}
			if got := w.Files(); len(got) != 0 {
				t.Errorf("Files after Close = %q, want none", got)
			}
			if _, err := w.Rescan(); !errors.Is(err, fsnotify.ErrClosed) {
				t.Errorf("Rescan after Close = %v, want fsnotify.ErrClosed", err)
			}
			if err := w.Run(t.Context(), rec); !errors.Is(err, fsnotify.ErrClosed) {
				t.Errorf("Run after Close = %v, want fsnotify.ErrClosed", err)
			}
		})
	}
}

// TestRunTwice checks that a second Run while one runs is refused.
func TestRunTwice(t *testing.T) {
	tr := newTree(t, global2M)
	w := newWatcher(t, tr)
	rec := newRecorder()
	start(t, w, rec)
	write(t, tr.path(global2M), "1\n")
	rec.expect(t, tr.path(global2M))
	if err := w.Run(t.Context(), rec); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v, want already running", err)
	}
}

// TestCloseBeforeRun checks Close on a watcher that never ran.
func TestCloseBeforeRun(t *testing.T) {
	tr := newTree(t, global2M)
	w, err := hugepagewatch.New(tr.sys(), tr.proc(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := w.Close(); err != nil {
			t.Errorf("Close #%d: %v", i+1, err)
		}
	}
}

// gatedRecorder blocks in its first Changed until the gate opens, so that
// events pile up in the kernel's inotify queue. It records only Changed
// calls for marker.
type gatedRecorder struct {
	gate     chan struct{}
	once     sync.Once
	marker   string
	marked   chan struct{}
	overflow chan error
}

func (r *gatedRecorder) Changed(path string) {
	r.once.Do(func() { <-r.gate })
	if path == r.marker {
		select {
		case r.marked <- struct{}{}:
		default:
		}
	}
}

func (r *gatedRecorder) Overflow(err error) { r.overflow <- err }

// TestOverflow overflows the real inotify queue with a handler that is busy,
// and checks that Overflow reports it and Run goes on.
func TestOverflow(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skipf("cannot read the inotify queue size: %v", err)
	}
	queue, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || queue > 1<<18 {
		t.Skipf("inotify queue of %q events is too large to overflow in a test", b)
	}
	tr := newTree(t, global2M, node0_2M, proc)
	w := newWatcher(t, tr)
	rec := &gatedRecorder{gate: make(chan struct{}), marker: tr.path(proc), marked: make(chan struct{}, 1), overflow: make(chan error, 16)}
	start(t, w, rec)

	// Writes that alternate between two files are not merged by the
	// kernel: each is one queued event. fsnotify reads up to 4096 before it
	// blocks on the handler; the rest must exceed the queue.
	var files [2]*os.File
	for i, rel := range []string{global2M, node0_2M} {
		f, err := os.OpenFile(tr.path(rel), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files[i] = f
	}
	for i := range 2*queue + 8192 {
		if _, err := files[i%2].WriteAt([]byte("1\n"), 0); err != nil {
			t.Fatal(err)
		}
	}
	close(rec.gate)

	select {
	case err := <-rec.overflow:
		if !errors.Is(err, fsnotify.ErrEventOverflow) {
			t.Errorf("Overflow(%v), want fsnotify.ErrEventOverflow", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Overflow within 10s")
	}

	// Run goes on: a write after the flood is delivered.
	write(t, tr.path(proc), "1\n")
	select {
	case <-rec.marked:
	case <-time.After(10 * time.Second):
		t.Fatal("no Changed for a write after the overflow within 10s")
	}
}
