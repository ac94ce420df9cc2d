package kubeletversion

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFromBinaryCached: the binary runs once; the same file is answered
// from the cache; a rewritten or replaced binary runs again; a cache that
// is not JSON is replaced, never trusted.
func TestFromBinaryCached(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	runs := filepath.Join(dir, "runs")
	kubelet := func(version string) string {
		// Each run leaves one line in runs: the test counts the runs.
		return "#!/bin/sh\necho run >> " + runs + "\necho 'Kubernetes " + version + "'\n"
	}
	write := func(path, body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ran := func() int {
		b, _ := os.ReadFile(runs)
		return strings.Count(string(b), "run\n")
	}
	cache := filepath.Join(dir, "state", "kubelet-version.json")
	get := func(wantVersion string, wantHit bool, wantRuns int, wantWarning string) {
		t.Helper()
		c, err := FromBinaryCached(context.Background(), bin, cache, false)
		if err != nil {
			t.Fatal(err)
		}
		if c.Version.String() != wantVersion || c.Hit != wantHit || ran() != wantRuns || !strings.Contains(c.Warning, wantWarning) || (wantWarning == "" && c.Warning != "") {
			t.Fatalf("got %s hit=%v after %d runs, warning %q; want %s hit=%v after %d runs, warning %q",
				c.Version, c.Hit, ran(), c.Warning, wantVersion, wantHit, wantRuns, wantWarning)
		}
	}

	write(bin, kubelet("v1.36.3"))
	// A dry run reads the cache but writes nothing.
	if c, err := FromBinaryCached(context.Background(), bin, cache, true); err != nil || c.Hit || c.Version.String() != "v1.36.3" {
		t.Fatalf("dry run: %+v, %v", c, err)
	}
	if _, err := os.Stat(filepath.Dir(cache)); !os.IsNotExist(err) {
		t.Fatalf("a dry run wrote the cache's directory: %v", err)
	}
	get("v1.36.3", false, 2, "") // first start: run, remembered (its directory made)
	get("v1.36.3", true, 2, "")  // the same file: not run
	get("v1.36.3", true, 2, "")

	// Rewritten in place (its size differs: a rewrite within the file
	// system's timestamp granularity keeps mtime and ctime).
	write(bin, kubelet("v1.37.12"))
	get("v1.37.12", false, 3, "")
	get("v1.37.12", true, 3, "")

	next := filepath.Join(dir, "kubelet.new") // an upgrade renamed over it: another inode
	write(next, kubelet("v1.37.3"))
	if err := os.Rename(next, bin); err != nil {
		t.Fatal(err)
	}
	get("v1.37.3", false, 4, "")

	write(cache, "{not json")
	get("v1.37.3", false, 5, "is not readable JSON")
	get("v1.37.3", true, 5, "")

	// A binary that cannot tell is not remembered.
	write(bin, "#!/bin/sh\necho run >> "+runs+"\necho hello\n")
	for range 2 {
		if _, err := FromBinaryCached(context.Background(), bin, cache, false); err == nil {
			t.Fatal("a binary that does not print a version gave no error")
		}
	}
	if ran() != 7 {
		t.Fatalf("%d runs, want 7: a failed answer must not be cached", ran())
	}

	// No cache file: the binary runs every time.
	write(bin, kubelet("v1.35.4"))
	for i := range 2 {
		c, err := FromBinaryCached(context.Background(), bin, "", false)
		if err != nil || c.Hit || c.Version.String() != "v1.35.4" || ran() != 8+i {
			t.Fatalf("without a cache: %+v, %v, %d runs", c, err, ran())
		}
	}
}

// TestFromBinaryCachedFIFO: a FIFO at the cache's path (preflight runs in
// the kubelet's start) is not opened for a blocking read: the binary
// answers, the FIFO is replaced by the cache file.
func TestFromBinaryCachedFIFO(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.36.3'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "kubelet-version.json")
	if err := unix.Mkfifo(cache, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var c Cached
	var err error
	go func() { defer close(done); c, err = FromBinaryCached(context.Background(), bin, cache, false) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("FromBinaryCached is blocked on the FIFO")
	}
	if err != nil || c.Version.String() != "v1.36.3" || !strings.Contains(c.Warning, "not a regular file") {
		t.Fatalf("got %+v, %v", c, err)
	}
	if c, err := FromBinaryCached(context.Background(), bin, cache, false); err != nil || !c.Hit {
		t.Fatalf("the FIFO was not replaced by the cache: %+v, %v", c, err)
	}
}

// TestFromBinaryCachedUnwritable: a cache that cannot be written warns and
// the version is still the binary's.
func TestFromBinaryCachedUnwritable(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.34.4'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := FromBinaryCached(context.Background(), bin, filepath.Join(notDir, "kubelet-version.json"), false)
	if err != nil || c.Version.String() != "v1.34.4" || !strings.Contains(c.Warning, "cannot be written") {
		t.Fatalf("got %+v, %v", c, err)
	}
}
