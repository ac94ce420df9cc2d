package doccheck

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestExpand(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"meminfo", []string{"meminfo"}},
		{"cpu/{possible,online}", []string{"cpu/possible", "cpu/online"}},
		{"memory/{block_size_bytes,memoryN/state}", []string{"memory/block_size_bytes", "memory/memoryN/state"}},
		{"{a,b}/{c,d}", []string{"a/c", "a/d", "b/c", "b/d"}},
		{"a/{b", []string{"a/{b"}},
	} {
		if got := Expand(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("Expand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

const sample = `Package x does things.

It reads, under a root:

	a/{b,c}
	d

and then:
  - one item
    continued;
  - another.

 1. first
 2. second
`

func TestParagraphs(t *testing.T) {
	want := []string{
		"Package x does things.",
		"It reads, under a root:",
		"and then:",
		"- one item continued;",
		"- another.",
		"1. first",
		"2. second",
	}
	if got := Paragraphs(sample); !slices.Equal(got, want) {
		t.Errorf("Paragraphs() = %q, want %q", got, want)
	}
}

func TestCodeAfter(t *testing.T) {
	got, err := CodeAfter(sample, "under a root")
	if want := []string{"a/{b,c}", "d"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("CodeAfter() = %q, %v, want %q", got, err, want)
	}
	if _, err := CodeAfter(sample, "and then"); err == nil {
		t.Error("CodeAfter(no block after) succeeded")
	}
	if _, err := CodeAfter(sample, "nowhere"); err == nil {
		t.Error("CodeAfter(no such phrase) succeeded")
	}
}

func TestPackageDoc(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a.go":      "// Package p is a.\npackage p\n",
		"b.go":      "package p\n",
		"c_test.go": "// Package p is not this.\npackage p\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := PackageDoc(dir); err != nil || got != "Package p is a.\n" {
		t.Errorf("PackageDoc() = %q, %v", got, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub", "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sub/s.go", "sub/testdata/t.go"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("package s\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := GoDirs(dir); err != nil || !slices.Equal(got, []string{dir, filepath.Join(dir, "sub")}) {
		t.Errorf("GoDirs() = %q, %v", got, err)
	}
}
