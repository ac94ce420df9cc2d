package fixturegen

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Extract unpacks a fixture archive (gzip tar, as written by WriteTar or
// hack/capture-fixture.sh) into dir, keeping symlinks. Members that would
// land outside dir are refused.
func Extract(archive, dir string) error {
	return ExtractFunc(archive, dir, nil)
}

// ExtractFunc is Extract for the members whose cleaned name keep accepts
// (nil keeps all), e.g. to leave out the thousands of memory blocks of a
// large fixture when a test does not read them.
func ExtractFunc(archive, dir string, keep func(name string) bool) error {
	f, err := os.Open(archive)
	if err != nil {
		return fmt.Errorf("fixturegen: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("fixturegen: %s: %w", archive, err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("fixturegen: %s: %w", archive, err)
		}
		name := filepath.Clean(h.Name)
		if name == "." || strings.HasPrefix(name, "..") || filepath.IsAbs(name) {
			return fmt.Errorf("fixturegen: %s: member %q outside the tree", archive, h.Name)
		}
		if keep != nil && !keep(name) {
			continue
		}
		target := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return fmt.Errorf("fixturegen: %w", err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, target)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(target, b, 0o644)
			}
		default:
			err = fmt.Errorf("member %q has unsupported type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			return fmt.Errorf("fixturegen: %s: %w", archive, err)
		}
	}
}
