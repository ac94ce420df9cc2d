package hugepagewatch_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
)

// Files of a fixture tree, relative to its root. The tree mimics the layout
// of sysfs and procfs with plain files.
const (
	global2M      = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	mempolicy2M   = "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages_mempolicy"
	global1G      = "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"
	mempolicy1G   = "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages_mempolicy"
	demote1G      = "sys/kernel/mm/hugepages/hugepages-1048576kB/demote"
	node0_2M      = "sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages"
	node0_1G      = "sys/devices/system/node/node0/hugepages/hugepages-1048576kB/nr_hugepages"
	node0Demote1G = "sys/devices/system/node/node0/hugepages/hugepages-1048576kB/demote"
	node1_2M      = "sys/devices/system/node/node1/hugepages/hugepages-2048kB/nr_hugepages"
	proc          = "proc/sys/vm/nr_hugepages"
	procMempolicy = "proc/sys/vm/nr_hugepages_mempolicy"
)

// decoys sit next to the watched files and must not be watched. A trailing
// slash makes a directory.
var decoys = []string{
	"sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
	"sys/kernel/mm/hugepages/hugepages-2048kB/nr_overcommit_hugepages",
	"sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages",
	"sys/kernel/mm/hugepages/hugepages-2048kB/surplus_hugepages",
	"sys/kernel/mm/hugepages/hugepages-1048576kB/demote_size",
	"sys/kernel/mm/hugepages/hugepages-2048kB.old/nr_hugepages",
	"sys/kernel/mm/hugepages/nr_hugepages",
	"sys/devices/system/node/possible",
	"sys/devices/system/node/has_cpu",
	"sys/devices/system/node/power/",
	"sys/devices/system/node/nodeX/hugepages/hugepages-2048kB/nr_hugepages",
	"sys/devices/system/node/node0/meminfo",
	"sys/devices/system/node/node0/hugepages/hugepages-2048kB/free_hugepages",
	"sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages_mempolicy/",
	"proc/sys/vm/nr_overcommit_hugepages",
	"proc/sys/vm/swappiness",
}

// fullMachine is every kind of watched file: two page sizes, two nodes.
var fullMachine = []string{
	global2M, mempolicy2M, global1G, mempolicy1G, demote1G,
	node0_2M, node0_1G, node0Demote1G, node1_2M,
	proc, procMempolicy,
}

// tree is a fixture tree in a temporary directory, with sys and proc roots.
type tree struct{ root string }

func newTree(t *testing.T, files ...string) tree {
	t.Helper()
	tr := tree{root: t.TempDir()}
	os.MkdirAll(tr.path("sys"), 0o755)
	os.MkdirAll(tr.path("proc"), 0o755)
	for _, f := range files {
		tr.create(t, f)
	}
	return tr
}

func (tr tree) sys() string  { return tr.path("sys") }
func (tr tree) proc() string { return tr.path("proc") }

func (tr tree) path(rel string) string { return filepath.Join(tr.root, rel) }

// paths returns the paths of rels, sorted.
func (tr tree) paths(rels ...string) []string {
	var paths []string
	for _, rel := range rels {
		paths = append(paths, tr.path(rel))
	}
	slices.Sort(paths)
	return paths
}

// create makes rel, a file holding "0\n" or, with a trailing slash, a
// directory.
func (tr tree) create(t *testing.T, rel string) {
	t.Helper()
	p := tr.path(rel)
	if strings.HasSuffix(rel, "/") {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// write writes v to path without O_TRUNC, as one write(2): on a regular file
// that is exactly one IN_MODIFY, so the next event must be this file's.
func write(t *testing.T, path, v string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(v); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// change is one Changed call and when it was made.
type change struct {
	path string
	at   time.Time
}

// recorder is a Handler that records calls on channels.
type recorder struct {
	changed  chan change
	overflow chan error
}

func newRecorder() *recorder {
	return &recorder{changed: make(chan change, 1024), overflow: make(chan error, 1024)}
}

func (r *recorder) Changed(path string) { r.changed <- change{path, time.Now()} }
func (r *recorder) Overflow(err error)  { r.overflow <- err }

// next waits for the next Changed call.
func (r *recorder) next(t *testing.T, timeout time.Duration) change {
	t.Helper()
	select {
	case c := <-r.changed:
		return c
	case err := <-r.overflow:
		t.Fatalf("Overflow(%v) while waiting for Changed", err)
	case <-time.After(timeout):
		t.Fatalf("no Changed within %v", timeout)
	}
	return change{}
}

// expect waits for the next Changed call and fails unless it is for path.
// Calls for noise paths before it are skipped.
func (r *recorder) expect(t *testing.T, path string, noise ...string) {
	t.Helper()
	c := r.next(t, 5*time.Second)
	for c.path != path && slices.Contains(noise, c.path) {
		c = r.next(t, 5*time.Second)
	}
	if c.path != path {
		t.Fatalf("Changed(%s), want Changed(%s)", c.path, path)
	}
}

// running is a Run in its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// start runs w.Run(h) until the test ends, and fails the test if Run does
// not return nil.
func start(t *testing.T, w *hugepagewatch.Watcher, h hugepagewatch.Handler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- w.Run(ctx, h) }()
	t.Cleanup(func() {
		if err := r.stop(t); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// wait waits for Run to return, and returns what it returned.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	if !r.ended {
		select {
		case r.err = <-r.done:
			r.ended = true
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5s")
		}
	}
	return r.err
}

// stop cancels Run's context and waits for Run to return.
func (r *running) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	return r.wait(t)
}

// newWatcher makes a Watcher on tr that is closed when the test ends.
func newWatcher(t *testing.T, tr tree) *hugepagewatch.Watcher {
	t.Helper()
	w, err := hugepagewatch.New(tr.sys(), tr.proc(), zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}
