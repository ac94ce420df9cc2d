package hugepagewatch

import (
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/doccheck"
)

// TestDocListsTheWatchedFiles: the files the package doc lists under the
// sysfs and the procfs root are the ones watched. In a tree whose every
// documented directory (hugepages-2048kB for hugepages-<size>kB, node0 for
// node<N>) holds every name the doc or the code mentions, and one no
// kernel file has, the files found are exactly the documented ones.
func TestDocListsTheWatchedFiles(t *testing.T) {
	doc, err := doccheck.PackageDoc(".")
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("<size>", "2048", "<N>", "0")
	unfill := strings.NewReplacer("hugepages-2048kB", "hugepages-<size>kB", "node0", "node<N>")

	names := slices.Concat(globalFiles, nodeFiles, procFiles, []string{"not_a_count"})
	var documented, dirs []string
	for _, root := range []struct{ phrase, dir string }{
		{"configurable sysfs root", "sys"},
		{"configurable procfs root", "proc"},
	} {
		lines, err := doccheck.CodeAfter(doc, root.phrase)
		if err != nil {
			t.Fatalf("package doc: %v", err)
		}
		for _, l := range lines {
			for _, p := range doccheck.Expand(strings.TrimSpace(l)) {
				documented = append(documented, path.Join(root.dir, p))
				dirs = append(dirs, path.Join(root.dir, fill.Replace(path.Dir(p))))
				names = append(names, path.Base(p))
			}
		}
	}
	tree := t.TempDir()
	for _, dir := range dirs {
		for _, name := range names {
			p := filepath.Join(tree, dir, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	found, err := countFiles(filepath.Join(tree, "sys"), filepath.Join(tree, "proc"))
	if err != nil {
		t.Fatal(err)
	}
	var watched []string
	for _, f := range found {
		rel, err := filepath.Rel(tree, f)
		if err != nil {
			t.Fatal(err)
		}
		watched = append(watched, unfill.Replace(filepath.ToSlash(rel)))
	}
	slices.Sort(documented)
	slices.Sort(watched)
	for _, f := range documented {
		if !slices.Contains(watched, f) {
			t.Errorf("the doc lists %s, which is not watched", f)
		}
	}
	for _, f := range watched {
		if !slices.Contains(documented, f) {
			t.Errorf("%s is watched, and not in the doc's list", f)
		}
	}
}
