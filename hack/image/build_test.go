package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

const testEpoch = 1767225600 // 2026-01-01T00:00:00Z

// fakeELF is a minimal 64-bit little-endian ELF executable for machine: a
// header, optionally a PT_INTERP program header (a dynamic binary), then
// payload. debug/elf reads it like a real one.
func fakeELF(t *testing.T, machine elf.Machine, dynamic bool, payload string) []byte {
	t.Helper()
	h := elf.Header64{
		Type:      uint16(elf.ET_EXEC),
		Machine:   uint16(machine),
		Version:   uint32(elf.EV_CURRENT),
		Ehsize:    64,
		Phentsize: 56,
		Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	var progs []elf.Prog64
	if dynamic {
		h.Phoff, h.Phnum = 64, 1
		progs = append(progs, elf.Prog64{Type: uint32(elf.PT_INTERP), Off: 120, Filesz: 1, Memsz: 1, Align: 1})
	}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, h); err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		if err := binary.Write(&b, binary.LittleEndian, p); err != nil {
			t.Fatal(err)
		}
	}
	b.WriteString(payload)
	return b.Bytes()
}

func writeFile(t *testing.T, file string, b []byte) string {
	t.Helper()
	if err := os.WriteFile(file, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return file
}

// testBinaries writes an amd64 and an arm64 binary into dir.
func testBinaries(t *testing.T, dir, payload string) (amd64, arm64 string) {
	t.Helper()
	amd64 = writeFile(t, filepath.Join(dir, "hotplugd-linux-amd64"), fakeELF(t, elf.EM_X86_64, false, "amd64 "+payload))
	arm64 = writeFile(t, filepath.Join(dir, "hotplugd-linux-arm64"), fakeELF(t, elf.EM_AARCH64, false, "arm64 "+payload))
	return amd64, arm64
}

// buildArgs are the arguments `make image` passes, for binaries in dir and
// outputs under out.
func buildArgs(amd64, arm64, out string) []string {
	return []string{
		"build",
		"--platform", "linux/arm64=" + arm64, // out of order on purpose: the index is sorted
		"--platform", "linux/amd64=" + amd64,
		"--path", "/hotplugd",
		"--entrypoint", "/hotplugd",
		"--epoch", "1767225600",
		"--name", "ghcr.io/hotplugd/hotplugd:v0.1.0",
		"--annotation", "org.opencontainers.image.version=v0.1.0",
		"--annotation", "org.opencontainers.image.revision=0123456789abcdef0123456789abcdef01234567",
		"--annotation", "org.opencontainers.image.source=https://github.com/hotplugd/hotplugd",
		"--out", filepath.Join(out, "hotplugd.oci.tar"),
		"--layout", filepath.Join(out, "oci"),
	}
}

// runOK runs the command and returns its stdout, failing the test on error.
func runOK(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("image %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// lastLine is what a caller of the command reads as its result.
func lastLine(t *testing.T, out string) string {
	t.Helper()
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("stdout %q does not end in a newline", out)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// buildOnce builds the test image into a fresh directory and returns the
// printed digest and the archive's path.
func buildOnce(t *testing.T, payload string, edit func(args []string) []string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	amd64, arm64 := testBinaries(t, dir, payload)
	args := buildArgs(amd64, arm64, dir)
	if edit != nil {
		args = edit(args)
	}
	out := runOK(t, args...)
	if out != lastLine(t, out)+"\n" {
		t.Errorf("build printed more than the digest on stdout: %q", out)
	}
	d := lastLine(t, out)
	if !digestRE.MatchString(d) {
		t.Fatalf("last line %q is not a digest", d)
	}
	return d, filepath.Join(dir, "hotplugd.oci.tar")
}

func setArg(flag, value string) func([]string) []string {
	return func(args []string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = value
				return out
			}
		}
		return append(out, flag, value)
	}
}

// setPlatform replaces the binary of one --platform.
func setPlatform(platform, file string) func([]string) []string {
	return func(args []string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if strings.HasPrefix(out[i], platform+"=") {
				out[i] = platform + "=" + file
			}
		}
		return out
	}
}

func readFile(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBuildReproducible(t *testing.T) {
	d1, a1 := buildOnce(t, "v1", nil)
	d2, a2 := buildOnce(t, "v1", nil)
	if d1 != d2 {
		t.Errorf("two builds of the same inputs: digests %s and %s", d1, d2)
	}
	if !bytes.Equal(readFile(t, a1), readFile(t, a2)) {
		t.Errorf("two builds of the same inputs: archives %s and %s differ", a1, a2)
	}
	// The layout directory holds the same blobs as the archive.
	if got := runOK(t, "digest", "--archive", a1); lastLine(t, got) != d1 {
		t.Errorf("digest --archive = %s, build printed %s", lastLine(t, got), d1)
	}
}

func TestBuildChangesDigest(t *testing.T) {
	base, _ := buildOnce(t, "v1", nil)
	for _, tc := range []struct {
		name    string
		payload string
		edit    func([]string) []string
	}{
		{name: "binary", payload: "v2"},
		{name: "epoch", payload: "v1", edit: setArg("--epoch", "1767225601")},
		{name: "entrypoint", payload: "v1", edit: setArg("--entrypoint", "/hotplugd,run")},
		{name: "path", payload: "v1", edit: func(a []string) []string {
			return setArg("--entrypoint", "/usr/bin/hotplugd")(setArg("--path", "/usr/bin/hotplugd")(a))
		}},
		{name: "annotation", payload: "v1", edit: setArg("--annotation", "org.opencontainers.image.version=v0.2.0")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := buildOnce(t, tc.payload, tc.edit)
			if got == base {
				t.Errorf("changed %s: digest %s did not change", tc.name, got)
			}
		})
	}
	t.Run("name", func(t *testing.T) {
		// The name is only in the archive's index.json: where an image is
		// pushed does not change what it is.
		got, _ := buildOnce(t, "v1", setArg("--name", "registry.example.com/ops/hotplugd:v0.1.0"))
		if got != base {
			t.Errorf("changed --name: digest %s, want %s", got, base)
		}
	})
}

// openLayout extracts the archive and opens it with go-containerregistry's
// layout reader.
func openLayout(t *testing.T, archive string) (v1.ImageIndex, *v1.IndexManifest) {
	t.Helper()
	dir := t.TempDir()
	if err := extractArchive(archive, dir); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	idx, err := top.ImageIndex(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return idx, im
}

func TestArchiveRoundTrip(t *testing.T) {
	d, archive := buildOnce(t, "v1", nil)
	idx, top := openLayout(t, archive)

	wantRef := map[string]string{
		"org.opencontainers.image.ref.name": "ghcr.io/hotplugd/hotplugd:v0.1.0",
		"io.containerd.image.name":          "ghcr.io/hotplugd/hotplugd:v0.1.0",
	}
	if diff := cmp.Diff(wantRef, top.Manifests[0].Annotations); diff != "" {
		t.Errorf("index.json annotations (-want +got):\n%s", diff)
	}
	got, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != d {
		t.Errorf("layout's index digest %s, build printed %s", got, d)
	}
	if err := validate.Index(idx); err != nil {
		t.Errorf("index does not validate: %v", err)
	}

	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{
		"org.opencontainers.image.created":  "2026-01-01T00:00:00Z",
		"org.opencontainers.image.version":  "v0.1.0",
		"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
		"org.opencontainers.image.source":   "https://github.com/hotplugd/hotplugd",
	}
	if diff := cmp.Diff(wantAnn, im.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	if im.MediaType != "application/vnd.oci.image.index.v1+json" {
		t.Errorf("index media type %s", im.MediaType)
	}

	var plats []string
	for _, m := range im.Manifests {
		plats = append(plats, m.Platform.String())
		if m.ArtifactType != "" {
			t.Errorf("%s: descriptor has artifactType %q, want none (an image, not an artifact)", m.Platform, m.ArtifactType)
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		epoch := v1.Time{Time: time.Unix(testEpoch, 0).UTC()}
		diffIDs := cfg.RootFS.DiffIDs
		want := &v1.ConfigFile{
			Architecture: m.Platform.Architecture,
			OS:           "linux",
			Variant:      m.Platform.Variant,
			Created:      epoch,
			History: []v1.History{{
				Created:   epoch,
				CreatedBy: "hack/image build: /hotplugd (0755, 0:0)",
			}},
			RootFS: v1.RootFS{Type: "layers", DiffIDs: diffIDs},
			Config: v1.Config{Entrypoint: []string{"/hotplugd"}, WorkingDir: "/"},
		}
		if diff := cmp.Diff(want, cfg); diff != "" {
			t.Errorf("%s: config (-want +got):\n%s", m.Platform, diff)
		}
		if len(diffIDs) != 1 {
			t.Errorf("%s: %d layers, want 1", m.Platform, len(diffIDs))
		}
		mf, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if mf.MediaType != "application/vnd.oci.image.manifest.v1+json" || mf.Config.MediaType != "application/vnd.oci.image.config.v1+json" ||
			len(mf.Layers) != 1 || mf.Layers[0].MediaType != "application/vnd.oci.image.layer.v1.tar+gzip" {
			t.Errorf("%s: manifest media types: %+v", m.Platform, mf)
		}
	}
	if diff := cmp.Diff([]string{"linux/amd64", "linux/arm64/v8"}, plats); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
}

func TestArchiveHeaders(t *testing.T) {
	_, archive := buildOnce(t, "v1", nil)
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	for _, h := range tarEntries(t, f) {
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(testEpoch, 0)) || h.Format != tar.FormatUSTAR {
			t.Errorf("%s: header not fixed: uid %d gid %d uname %q gname %q mtime %s format %s", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, h.Format)
		}
		if want := map[byte]int64{tar.TypeDir: 0o755, tar.TypeReg: 0o644}[h.Typeflag]; h.Mode != want {
			t.Errorf("%s: mode %o, want %o", h.Name, h.Mode, want)
		}
	}
	if len(names) < 4 || names[0] != "oci-layout" || names[1] != "index.json" || names[2] != "blobs/" || names[3] != "blobs/sha256/" {
		t.Errorf("archive entries %q: want oci-layout, index.json, blobs/, blobs/sha256/, then the blobs", names)
	}
	// 2 x (manifest, config, layer) + the index
	if got := len(names) - 4; got != 7 {
		t.Errorf("archive has %d blobs, want 7", got)
	}
}

// layerEntries reads the one layer of the image for platform.
func layerOf(t *testing.T, archive, platform string) v1.Layer {
	t.Helper()
	idx, _ := openLayout(t, archive)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range im.Manifests {
		if m.Platform.String() != platform {
			continue
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		if len(layers) != 1 {
			t.Fatalf("%s: %d layers, want 1", platform, len(layers))
		}
		return layers[0]
	}
	t.Fatalf("no image for %s", platform)
	return nil
}

type entry struct {
	Name     string
	Typeflag byte
	Mode     int64
	Uid, Gid int
	Uname    string
	Gname    string
	ModTime  time.Time
	Format   tar.Format
	Content  string
}

func layerEntries(t *testing.T, l v1.Layer) []entry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return tarEntries(t, rc)
}

// tarEntries reads every entry of a tar stream.
func tarEntries(t *testing.T, r io.Reader) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime.UTC(), h.Format, string(b)})
	}
}

func TestLayerHoldsOnlyTheBinary(t *testing.T) {
	dir := t.TempDir()
	amd64, arm64 := testBinaries(t, dir, "v1")
	runOK(t, buildArgs(amd64, arm64, dir)...)
	archive := filepath.Join(dir, "hotplugd.oci.tar")
	epoch := time.Unix(testEpoch, 0).UTC()
	for plat, bin := range map[string]string{"linux/amd64": amd64, "linux/arm64/v8": arm64} {
		l := layerOf(t, archive, plat)
		want := []entry{{Name: "hotplugd", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR, Content: string(readFile(t, bin))}}
		if diff := cmp.Diff(want, layerEntries(t, l)); diff != "" {
			t.Errorf("%s: layer entries (-want +got):\n%s", plat, diff)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		gunzipFixed(t, plat, rc)
		rc.Close()
	}
}

// gunzipFixed opens the gzip stream of what and checks that its header is
// gzipFixed's: no name, comment, mtime or extra field, OS unknown.
func gunzipFixed(t *testing.T, what string, r io.Reader) *gzip.Reader {
	t.Helper()
	zr, err := gzip.NewReader(r)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if zr.Name != "" || zr.Comment != "" || !zr.ModTime.IsZero() || zr.OS != 255 || zr.Extra != nil {
		t.Errorf("%s: gzip header not fixed: %+v", what, zr.Header)
	}
	return zr
}

func TestLayerNestedPathAndArgs(t *testing.T) {
	// What the e2e tests build: one platform, an entrypoint with arguments.
	dir := t.TempDir()
	bin := writeFile(t, filepath.Join(dir, "pause"), fakeELF(t, elf.EM_X86_64, false, "pause"))
	archive := filepath.Join(dir, "pause.oci.tar")
	d := lastLine(t, runOK(t, "build", "--platform", "linux/amd64="+bin, "--path", "/usr/bin/pause",
		"--entrypoint", `["/usr/bin/pause","-v","a,b"]`, "--epoch", "0", "--name", "registry.k8s.io/pause:3.10", "--out", archive))
	if !digestRE.MatchString(d) {
		t.Fatalf("last line %q is not a digest", d)
	}
	epoch := time.Unix(0, 0).UTC()
	want := []entry{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR},
		{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR},
		{Name: "usr/bin/pause", Typeflag: tar.TypeReg, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR, Content: string(readFile(t, bin))},
	}
	if diff := cmp.Diff(want, layerEntries(t, layerOf(t, archive, "linux/amd64"))); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	idx, _ := openLayout(t, archive)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%d images, want 1", len(im.Manifests))
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/usr/bin/pause", "-v", "a,b"}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
	// Comma-separated arguments too.
	runOK(t, "build", "--platform", "linux/amd64="+bin, "--path", "/pause", "--entrypoint", "/pause,-v",
		"--epoch", "0", "--name", "registry.k8s.io/pause:3.10", "--out", archive)
	idx, _ = openLayout(t, archive)
	im, _ = idx.IndexManifest()
	img, _ = idx.Image(im.Manifests[0].Digest)
	cfg, _ = img.ConfigFile()
	if diff := cmp.Diff([]string{"/pause", "-v"}, cfg.Config.Entrypoint); diff != "" {
		t.Errorf("entrypoint (-want +got):\n%s", diff)
	}
}

func TestBuildRefuses(t *testing.T) {
	dir := t.TempDir()
	amd64, arm64 := testBinaries(t, dir, "v1")
	dynamic := writeFile(t, filepath.Join(dir, "dynamic"), fakeELF(t, elf.EM_X86_64, true, "x"))
	script := writeFile(t, filepath.Join(dir, "script"), []byte("#!/bin/sh\n"))
	notLayout := filepath.Join(dir, "notlayout")
	if err := os.MkdirAll(notLayout, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(notLayout, "precious"), []byte("x"))

	for _, tc := range []struct {
		name string
		edit func([]string) []string
		want string // in the error
	}{
		{"wrong arch", setPlatform("linux/arm64", amd64), "built for EM_X86_64"},
		{"dynamic", setPlatform("linux/amd64", dynamic), "CGO_ENABLED=0"},
		{"not ELF", setPlatform("linux/amd64", script), "not an ELF binary"},
		{"no binary", setPlatform("linux/amd64", filepath.Join(dir, "missing")), "no such file"},
		{"platform twice", func(a []string) []string { return append(a, "--platform", "linux/amd64="+amd64) }, "given twice"},
		{"not linux", setArg("--platform", "windows/amd64="+amd64), "want linux/arch"},
		{"unknown arch", setArg("--platform", "linux/mips="+amd64), "unknown architecture"},
		{"relative path", setArg("--path", "hotplugd"), "clean absolute"},
		{"entrypoint elsewhere", setArg("--entrypoint", "/bin/sh"), "must be /hotplugd"},
		{"bad JSON entrypoint", setArg("--entrypoint", `["/hotplugd"`), "JSON array"},
		{"no epoch", setArg("--epoch", ""), "no --epoch"},
		{"bad epoch", setArg("--epoch", "yesterday"), "whole seconds"},
		{"no tag", setArg("--name", "ghcr.io/hotplugd/hotplugd"), "give the tag"},
		{"no registry", setArg("--name", "hotplugd:v1"), "name the registry"},
		{"bad annotation", setArg("--annotation", "novalue"), "KEY=VALUE"},
		{"created disagrees", setArg("--annotation", "org.opencontainers.image.created=2020-01-01T00:00:00Z"), "disagrees with --epoch"},
		{"no out", setArg("--out", ""), "no --out"},
		{"layout not a layout", setArg("--layout", notLayout), "not an OCI image layout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.edit(buildArgs(amd64, arm64, dir)), &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing (no digest for a failed build)", stdout.String())
			}
		})
	}
	if _, err := os.Stat(filepath.Join(notLayout, "precious")); err != nil {
		t.Errorf("a refused --layout lost its files: %v", err)
	}
}

func TestLayoutReplaced(t *testing.T) {
	// A stale blob in an old layout must not survive into the new one (nor
	// into the archive).
	dir := t.TempDir()
	amd64, arm64 := testBinaries(t, dir, "v1")
	runOK(t, buildArgs(amd64, arm64, dir)...)
	stale := filepath.Join(dir, "oci", "blobs", "sha256", strings.Repeat("0", 64))
	writeFile(t, stale, []byte("stale"))
	before := readFile(t, filepath.Join(dir, "hotplugd.oci.tar"))
	runOK(t, buildArgs(amd64, arm64, dir)...)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale blob still in the layout: %v", err)
	}
	if !bytes.Equal(before, readFile(t, filepath.Join(dir, "hotplugd.oci.tar"))) {
		t.Error("rebuilding over an existing layout changed the archive")
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".oci-layout-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary directories left behind: %q", leftovers)
	}
}
