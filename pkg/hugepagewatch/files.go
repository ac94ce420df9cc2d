package hugepagewatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Names of the files, in each kind of directory, through which a hugepage
// count can be set.
var (
	// globalFiles are in kernel/mm/hugepages/hugepages-<size>kB.
	globalFiles = []string{"nr_hugepages", "nr_hugepages_mempolicy", "demote"}
	// nodeFiles are in devices/system/node/node<N>/hugepages/hugepages-<size>kB.
	nodeFiles = []string{"nr_hugepages", "demote"}
	// procFiles are in sys/vm under the procfs root.
	procFiles = []string{"nr_hugepages", "nr_hugepages_mempolicy"}
)

// countFiles lists the hugepage count files that exist under the roots,
// sorted. A missing directory has no files. It goes on past a directory it
// cannot list, and returns what it found with the errors; a caller must not
// take a file missing from an incomplete list as removed.
func countFiles(sysRoot, procRoot string) ([]string, error) {
	var files []string
	var errs []error
	list := func(dir string, keep func(os.DirEntry) bool) []string {
		paths, err := listDir(dir, keep)
		if err != nil {
			errs = append(errs, err)
		}
		return paths
	}

	for _, size := range list(filepath.Join(sysRoot, "kernel", "mm", "hugepages"), isSizeDir) {
		files = append(files, list(size, fileNamed(globalFiles))...)
	}
	for _, node := range list(filepath.Join(sysRoot, "devices", "system", "node"), isNodeDir) {
		for _, size := range list(filepath.Join(node, "hugepages"), isSizeDir) {
			files = append(files, list(size, fileNamed(nodeFiles))...)
		}
	}
	files = append(files, list(filepath.Join(procRoot, "sys", "vm"), fileNamed(procFiles))...)

	slices.Sort(files)
	return files, errors.Join(errs...)
}

// listDir returns the paths of dir's entries that keep accepts. A missing dir
// has no entries.
func listDir(dir string, keep func(os.DirEntry) bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		// os.ReadDir's error names the path already; keep ours uniform.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("hugepagewatch: list %s: %w", dir, err)
	}
	var paths []string
	for _, e := range entries {
		if keep(e) {
			paths = append(paths, filepath.Join(dir, e.Name()))
		}
	}
	return paths, nil
}

// isSizeDir accepts hugepages-<size>kB directories.
func isSizeDir(e os.DirEntry) bool {
	size, ok := strings.CutPrefix(e.Name(), "hugepages-")
	if !ok {
		return false
	}
	size, ok = strings.CutSuffix(size, "kB")
	return ok && isDigits(size) && e.IsDir()
}

// isNodeDir accepts node<N> directories, not the node directory's other
// entries (online, possible, has_cpu, power, ...).
func isNodeDir(e os.DirEntry) bool {
	n, ok := strings.CutPrefix(e.Name(), "node")
	return ok && isDigits(n) && e.IsDir()
}

// fileNamed accepts entries that are not directories and have one of names.
func fileNamed(names []string) func(os.DirEntry) bool {
	return func(e os.DirEntry) bool {
		return !e.IsDir() && slices.Contains(names, e.Name())
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
