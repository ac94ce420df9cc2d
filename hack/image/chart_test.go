package main

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// chartFiles are the files of the test chart, by path.
var chartFiles = map[string]string{
	"Chart.yaml":          "apiVersion: v2\nname: hotplugd # the chart\nversion: 0.1.0\n",
	"values.yaml":         "a: 1\n",
	"templates/x.yaml":    "kind: ConfigMap\n",
	"files.yaml":          "sorts before files/\n",
	"files/daemonset.yml": "kind: DaemonSet\n",
}

// writeChart writes the test chart into a new directory named name and
// returns it.
func writeChart(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	for file, text := range chartFiles {
		p := filepath.Join(dir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, p, []byte(text))
	}
	return dir
}

// TestChart: the same files give the same bytes whatever their mtimes and
// modes; entries are files only, sorted by path, under the chart's name,
// with fixed headers; the gzip header is fixed.
func TestChart(t *testing.T) {
	dir := writeChart(t, "hotplugd")
	out := filepath.Join(t.TempDir(), "hotplugd-0.1.0.tgz")
	chart := func() []byte {
		t.Helper()
		if got := runOK(t, "chart", "--dir", dir, "--epoch", "1767225600", "--out", out); got != "" {
			t.Errorf("chart printed %q on stdout", got)
		}
		return readFile(t, out)
	}
	a := chart()
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "values.yaml"), later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "values.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	if b := chart(); !bytes.Equal(a, b) {
		t.Error("the archive changed with a file's mtime and mode")
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, %v; want mode 0644", out, st, err)
	}

	epoch := time.Unix(testEpoch, 0).UTC()
	var want []entry
	for _, f := range []string{"Chart.yaml", "files.yaml", "files/daemonset.yml", "templates/x.yaml", "values.yaml"} {
		want = append(want, entry{Name: "hotplugd/" + f, Typeflag: tar.TypeReg, Mode: 0o644, ModTime: epoch, Format: tar.FormatUSTAR, Content: chartFiles[f]})
	}
	if diff := cmp.Diff(want, tarEntries(t, gunzipFixed(t, out, bytes.NewReader(a)))); diff != "" {
		t.Errorf("chart entries (-want +got):\n%s", diff)
	}
}

// TestReleaseCommandsRefuse: sbom and chart refuse what they cannot write
// reproducibly, and write nothing then.
func TestReleaseCommandsRefuse(t *testing.T) {
	linked := writeChart(t, "hotplugd")
	if err := os.Symlink("values.yaml", filepath.Join(linked, "files", "link.yaml")); err != nil {
		t.Fatal(err)
	}
	ignoring := writeChart(t, "hotplugd")
	writeFile(t, filepath.Join(ignoring, ".helmignore"), []byte("*.md\n"))
	good := writeChart(t, "hotplugd")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sbomArgs := func(args ...string) []string {
		return append([]string{"sbom", "--binary", exe, "--version", "v0.1.0", "--created", "0", "--namespace", "https://example.com/spdx"}, args...)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // in the error
	}{
		{"chart not named as the chart", []string{"chart", "--dir", writeChart(t, "other"), "--epoch", "0"}, "named as the chart"},
		{"chart symbolic link", []string{"chart", "--dir", linked, "--epoch", "0"}, "symbolic link"},
		{"chart helmignore", []string{"chart", "--dir", ignoring, "--epoch", "0"}, ".helmignore"},
		{"chart not a chart", []string{"chart", "--dir", t.TempDir(), "--epoch", "0"}, "is not a chart"},
		{"chart no dir", []string{"chart", "--epoch", "0"}, "no --dir"},
		{"chart no epoch", []string{"chart", "--dir", good}, "no --epoch"},
		{"chart bad epoch", []string{"chart", "--dir", good, "--epoch", "-1"}, "whole seconds"},
		{"chart argument", []string{"chart", "--dir", good, "--epoch", "0", "extra"}, `chart: unexpected argument "extra"`},
		{"sbom not a Go binary", sbomArgs("--binary", filepath.Join(good, "values.yaml")), "no Go build information"},
		{"sbom no version", sbomArgs("--version", ""), "no --version"},
		{"sbom bad created", sbomArgs("--created", "2026-01-01"), "whole seconds"},
		{"sbom relative namespace", sbomArgs("--namespace", "releases/v0.1.0"), "absolute URI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append(tc.args, "--out", out), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a refused %s wrote %s", tc.args[0], out)
			}
		})
	}
}
