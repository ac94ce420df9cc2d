package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

func runChart(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	dir := fs.String("dir", "", "the chart directory, named as the chart, without symlinks (copy it with cp -RL first) (required)")
	epoch := fs.String("epoch", "", "seconds since 1970 (SOURCE_DATE_EPOCH): every entry's mtime (required)")
	out := fs.String("out", "", "the .tgz to write, e.g. dist/hotplugd-0.1.0.tgz (required)")
	if err := parseOnlyFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := requireFlags(fs, "dir", "out"); err != nil {
		return err
	}
	t, err := parseEpoch("epoch", *epoch)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	b, n, err := chartArchive(*dir, t)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := writeFileAtomic(*out, 0o644, writeBytes(b)); err != nil {
		return fmt.Errorf("chart: write %s: %w", *out, err)
	}
	fmt.Fprintf(stderr, "image: wrote %s (%d files)\n", *out, n)
	return nil
}

var chartName = regexp.MustCompile(`(?m)^name:[ \t]*["']?([^"'\s#]+)["']?[ \t]*(?:#.*)?$`)

// chartArchive is the gzipped tar of the chart in dir, and how many files
// it holds: helm package's layout (<chart>/<path>, files only), the headers
// of the image's archive (fixedHeader, mode 0644), sorted, gzipFixed.
func chartArchive(dir string, epoch time.Time) ([]byte, int, error) {
	dir = filepath.Clean(dir)
	base := filepath.Base(dir)
	chartYAML, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, 0, fmt.Errorf("%s is not a chart: %w", dir, err)
	}
	m := chartName.FindSubmatch(chartYAML)
	if m == nil {
		return nil, 0, fmt.Errorf("%s/Chart.yaml has no name: line", dir)
	}
	if string(m[1]) != base {
		return nil, 0, fmt.Errorf("%s: the directory must be named as the chart, %s (helm package names the archive's top directory so)", dir, m[1])
	}
	if _, err := os.Lstat(filepath.Join(dir, ".helmignore")); err == nil {
		return nil, 0, fmt.Errorf("%s has a .helmignore, which this tool does not apply: remove the files it names from the copy instead", dir)
	}
	entries, err := treeEntries(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: copy the chart with its links resolved (cp -RL)", err)
	}
	files := slices.DeleteFunc(entries, func(e string) bool { return strings.HasSuffix(e, "/") })
	// Sorted by the whole path, as bytes (the walk's order is by element).
	slices.Sort(files)

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		name := path.Join(base, f)
		if strings.HasPrefix(name, "../") {
			return nil, 0, fmt.Errorf("%s: outside the chart", f)
		}
		if err := copyFileToTar(tw, filepath.Join(dir, filepath.FromSlash(f)), name, epoch); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, 0, err
	}
	gz, err := gzipFixed(raw.Bytes())
	if err != nil {
		return nil, 0, err
	}
	return gz, len(files), nil
}
