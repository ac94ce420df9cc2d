package fixturegen

import (
	"archive/tar"
	"cmp"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entries lists every directory, file and symlink of the tree in the order
// `tar --sort=name` archives them: depth first, each directory's entries
// sorted bytewise by name. Directories end in "/".
func (t *tree) entries() []string {
	set := map[string]bool{}
	add := func(p string) {
		set[p] = true
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			set[d+"/"] = true
		}
	}
	for p := range t.files {
		add(p)
	}
	for p := range t.links {
		add(p)
	}
	// With "/" mapped to the smallest byte, bytewise order of the keys is
	// the component-wise order of the paths.
	type named struct{ key, name string }
	sorted := make([]named, 0, len(set))
	for p := range set {
		sorted = append(sorted, named{strings.ReplaceAll(strings.TrimSuffix(p, "/"), "/", "\x00"), p})
	}
	slices.SortFunc(sorted, func(a, b named) int { return strings.Compare(a.key, b.key) })
	names := make([]string, len(sorted))
	for i, n := range sorted {
		names[i] = n.name
	}
	return names
}

// WriteTar writes the machine's sysfs and procfs files as a gzip tar with
// members rooted at sys/ and proc/, byte-identical for identical machines.
func (m Machine) WriteTar(w io.Writer) error {
	t, err := m.build()
	if err != nil {
		return err
	}
	zw, err := gzip.NewWriterLevel(w, gzip.DefaultCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, name := range t.entries() {
		h := &tar.Header{Name: name, ModTime: time.Unix(0, 0), Format: tar.FormatGNU}
		switch data, isFile := t.files[name]; {
		case strings.HasSuffix(name, "/"):
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case isFile:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		default:
			h.Typeflag, h.Mode, h.Linkname = tar.TypeSymlink, 0o777, t.links[name]
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("fixturegen: %s: %w", name, err)
		}
		if _, err := tw.Write(t.files[name]); err != nil {
			return fmt.Errorf("fixturegen: %s: %w", name, err)
		}
	}
	return cmp.Or(tw.Close(), zw.Close())
}

// WriteDir writes the machine's tree into dir, creating dir/sys and
// dir/proc; dir itself is created if missing. Files are 0644 so tests can
// rewrite them.
func (m Machine) WriteDir(dir string) error {
	t, err := m.build()
	if err != nil {
		return err
	}
	for _, name := range t.entries() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if data, ok := t.files[name]; ok {
			err = os.WriteFile(p, data, 0o644)
		} else if target, ok := t.links[name]; ok {
			err = os.Symlink(target, p)
		} else {
			err = os.MkdirAll(p, 0o755)
		}
		if err != nil {
			return fmt.Errorf("fixturegen: %w", err)
		}
	}
	return nil
}
