package hugepagewatch

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Handler receives what [Watcher.Run] sees. Its methods are called from Run's
// goroutine, one at a time; while one runs, events wait in the kernel's
// inotify queue (fs.inotify.max_queued_events), and a handler that blocks too
// long makes it overflow.
type Handler interface {
	// Changed reports a write to path, one of the watched files, for every
	// fsnotify Write or Chmod event on it: one or two per write, see the
	// package documentation. path may be a write-only file (demote); read the
	// counts from the nr_hugepages files, not from path.
	Changed(path string)
	// Overflow reports that events may have been lost: the inotify queue
	// overflowed (errors.Is(err, fsnotify.ErrEventOverflow)) or the watcher
	// failed otherwise. The counts are unknown: re-read everything.
	Overflow(err error)
}

// Watcher watches the hugepage count files under a sysfs and a procfs root.
// Create it with [New]; its methods are safe for concurrent use.
type Watcher struct {
	sys, proc string
	log       *zap.Logger
	inotify   *fsnotify.Watcher

	mu      sync.Mutex
	files   map[string]watched // by path, as passed to inotify and reported
	denied  map[string]bool    // files we may not watch (logged once)
	running bool
	closed  bool
}

// watched is one watched file.
type watched struct {
	// pin is an O_PATH descriptor of the file. It keeps the file's dentry,
	// and so the inode inotify watches, in the cache: procfs makes a new
	// inode for a reclaimed dentry, and the watch would stay on the old one.
	pin int
	id  fileID
}

// fileID identifies an inode. The pin keeps the inode alive, so its number
// cannot be reused while it is watched.
type fileID struct{ dev, ino uint64 }

// New creates an inotify instance and watches every hugepage count file that
// exists under sysfsRoot and procfsRoot (empty roots mean /sys and /proc).
// Missing directories are not an error: no hugetlb or no NUMA means fewer
// files. The logger is used as is (nil discards); name it at the call site.
func New(sysfsRoot, procfsRoot string, log *zap.Logger) (*Watcher, error) {
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	if log == nil {
		log = zap.NewNop()
	}
	in, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("hugepagewatch: %w", err)
	}
	w := &Watcher{
		sys:     filepath.Clean(sysfsRoot),
		proc:    filepath.Clean(procfsRoot),
		log:     log,
		inotify: in,
		files:   make(map[string]watched),
		denied:  make(map[string]bool),
	}
	if _, err := w.Rescan(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Run delivers events to h until ctx is done, then returns nil. It closes the
// watcher when it returns; a watcher runs once. Overflows and other inotify
// errors go to h.Overflow and never stop Run. A Close from another goroutine
// also ends Run with nil.
func (w *Watcher) Run(ctx context.Context, h Handler) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return fmt.Errorf("hugepagewatch: run: %w", fsnotify.ErrClosed)
	case w.running:
		w.mu.Unlock()
		return errors.New("hugepagewatch: run: already running")
	}
	w.running = true
	w.mu.Unlock()
	defer func() {
		if err := w.Close(); err != nil {
			w.log.Warn("closing the hugepage watcher failed", zap.Error(err))
		}
	}()
	return w.loop(ctx, h, w.inotify.Events, w.inotify.Errors)
}

// loop is Run's event loop, on the given channels so tests can feed it.
func (w *Watcher) loop(ctx context.Context, h Handler, events <-chan fsnotify.Event, errs <-chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil // Close was called.
			}
			w.event(h, ev)
		case err, ok := <-errs:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				w.log.Warn("inotify queue overflowed; hugepage writes may have been missed", zap.Error(err))
			} else {
				w.log.Error("inotify error; hugepage writes may have been missed", zap.Error(err))
			}
			h.Overflow(fmt.Errorf("hugepagewatch: %w", err))
		}
	}
}

// event passes a Write or Chmod on a watched file to h. A Remove or Rename
// is left to Rescan: here it could be a stale event of a path that Rescan has
// just watched again.
func (w *Watcher) event(h Handler, ev fsnotify.Event) {
	if !w.watching(ev.Name) {
		return
	}
	if !ev.Has(fsnotify.Write) && !ev.Has(fsnotify.Chmod) {
		w.log.Debug("watched hugepage file went away; Rescan will forget it",
			zap.String("path", ev.Name), zap.Stringer("op", ev.Op))
		return
	}
	h.Changed(ev.Name)
}

func (w *Watcher) watching(path string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.files[path]
	return ok
}

// Rescan lists the count files again, watches the new ones and forgets the
// removed ones. A file whose path now names another inode (a node removed and
// added again) is watched again and counts as added. added is sorted.
//
// A write before a new file is watched is not reported: re-read the counts
// after a Rescan that added files. On an error Rescan still watches what it
// could, and forgets nothing if a directory could not be listed. It is safe to
// call from any goroutine while Run runs.
func (w *Watcher) Rescan() (added []string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil, fmt.Errorf("hugepagewatch: rescan: %w", fsnotify.ErrClosed)
	}

	found, listErr := countFiles(w.sys, w.proc)
	errs := []error{listErr}
	var removed []string
	if listErr == nil {
		for path := range w.files {
			if _, ok := slices.BinarySearch(found, path); !ok {
				w.forget(path)
				removed = append(removed, path)
			}
		}
	}
	for _, path := range found {
		if f, ok := w.files[path]; ok {
			id, err := statID(path)
			switch {
			case err == nil && id == f.id:
				continue
			case errors.Is(err, fs.ErrNotExist): // removed since the listing
				w.forget(path)
				removed = append(removed, path)
				continue
			case err != nil: // keep the watch we have
				errs = append(errs, fmt.Errorf("hugepagewatch: stat %s: %w", path, err))
				continue
			}
			w.forget(path) // another inode now: watch that one
		}
		switch err := w.watch(path); {
		case err == nil:
			added = append(added, path)
		case errors.Is(err, fs.ErrNotExist):
			// Removed since the listing.
		case errors.Is(err, fs.ErrPermission):
			// Without root, the write-only demote files cannot be
			// watched (inotify needs read access): watch the rest.
			if !w.denied[path] {
				w.denied[path] = true
				w.log.Warn("cannot watch a hugepage file without read access; writes through it are seen only at the next resync",
					zap.String("path", path), zap.Error(err))
			}
		default:
			errs = append(errs, err)
		}
	}

	slices.Sort(removed)
	if len(added) > 0 || len(removed) > 0 {
		w.log.Info("hugepage files rescanned",
			zap.Strings("added", added), zap.Strings("removed", removed), zap.Int("watched", len(w.files)))
	}
	return added, errors.Join(errs...)
}

// watch pins path and adds an inotify watch on it. w.mu is held.
func (w *Watcher) watch(path string) error {
	// Pin first: the watch then lands on the pinned inode, unless the path
	// is replaced in between, which the next Rescan sees as a changed inode.
	fd, err := openPath(path)
	if err != nil {
		return fmt.Errorf("hugepagewatch: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return fmt.Errorf("hugepagewatch: stat %s: %w", path, err)
	}
	if err := w.inotify.Add(path); err != nil {
		unix.Close(fd)
		return fmt.Errorf("hugepagewatch: watch %s: %w", path, err)
	}
	w.files[path] = watched{pin: fd, id: fileID{dev: st.Dev, ino: st.Ino}}
	return nil
}

// forget removes path's watch and pin. w.mu is held.
func (w *Watcher) forget(path string) {
	f, ok := w.files[path]
	if !ok {
		return
	}
	delete(w.files, path)
	// The kernel drops a watch by itself when its inode goes (then fsnotify
	// has forgotten it, or inotify_rm_watch says EINVAL): already done.
	err := w.inotify.Remove(path)
	if err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) && !errors.Is(err, unix.EINVAL) {
		w.log.Warn("removing an inotify watch failed", zap.String("path", path), zap.Error(err))
	}
	unix.Close(f.pin)
}

// Files returns the watched files, sorted: what the last Rescan (or New)
// found. It is nil after Close.
func (w *Watcher) Files() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var files []string
	for path := range w.files {
		files = append(files, path)
	}
	slices.Sort(files)
	return files
}

// Close stops watching and ends Run. It is idempotent.
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	files := w.files
	w.files = nil
	w.mu.Unlock()

	err := w.inotify.Close()
	for _, f := range files {
		unix.Close(f.pin)
	}
	if err != nil {
		return fmt.Errorf("hugepagewatch: close inotify: %w", err)
	}
	return nil
}

func openPath(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}
