package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Standard annotation keys (OCI image spec, annotations.md).
const (
	annotationCreated = "org.opencontainers.image.created"
	annotationRefName = "org.opencontainers.image.ref.name"
	// containerd's importer prefers this one to ref.name; both carry REF.
	annotationContainerdName = "io.containerd.image.name"
)

// buildOptions are the build command's flags.
type buildOptions struct {
	platforms   stringList
	path        string
	entrypoint  string
	epoch       string
	name        string
	annotations stringList
	out         string
	layout      string
}

func (o *buildOptions) addFlags(fs *flag.FlagSet) {
	fs.Var(&o.platforms, "platform", "os/arch[/variant]=BINARY, repeatable: one image of BINARY per platform (arm64's variant defaults to v8)")
	fs.StringVar(&o.path, "path", "", "absolute path of the binary in the image, e.g. /hotplugd (required)")
	fs.StringVar(&o.entrypoint, "entrypoint", "", `the image's Entrypoint: comma-separated (/pause,-v) or a JSON array (["/pause","-v"]); default: --path alone`)
	fs.StringVar(&o.epoch, "epoch", "", "seconds since 1970 (SOURCE_DATE_EPOCH): every timestamp in the image and the archive (required)")
	fs.StringVar(&o.name, "name", "", "reference the archive names the index by, registry/repository:tag (required)")
	fs.Var(&o.annotations, "annotation", "KEY=VALUE annotation of the image index, repeatable; "+annotationCreated+" is always the epoch")
	fs.StringVar(&o.out, "out", "", "OCI archive to write, e.g. bin/image/hotplugd.oci.tar (required)")
	fs.StringVar(&o.layout, "layout", "", "also leave the OCI image layout in this directory (replaced if it is one already)")
}

// platformBinary is one image of the index: a platform and its binary.
type platformBinary struct {
	platform v1.Platform
	file     string
}

// buildSpec is a validated build: everything the image is made of.
type buildSpec struct {
	platforms   []platformBinary // sorted by platform
	path        string           // clean and absolute
	entrypoint  []string
	epoch       time.Time // UTC
	name        string
	annotations map[string]string
}

func (o *buildOptions) validate() (buildSpec, error) {
	var s buildSpec
	if len(o.platforms) == 0 {
		return s, errors.New("build: no --platform given: pass --platform linux/amd64=PATH (repeatable)")
	}
	seen := map[string]bool{}
	for _, p := range o.platforms {
		pb, err := parsePlatformBinary(p)
		if err != nil {
			return s, err
		}
		key := pb.platform.String()
		if seen[key] {
			return s, fmt.Errorf("build: --platform %s given twice", key)
		}
		seen[key] = true
		s.platforms = append(s.platforms, pb)
	}
	sort.Slice(s.platforms, func(i, j int) bool {
		return s.platforms[i].platform.String() < s.platforms[j].platform.String()
	})

	if o.path == "" || !path.IsAbs(o.path) || path.Clean(o.path) != o.path || o.path == "/" {
		return s, fmt.Errorf("build: --path %q: want a clean absolute file path such as /hotplugd", o.path)
	}
	s.path = o.path

	ep, err := parseEntrypoint(o.entrypoint, o.path)
	if err != nil {
		return s, err
	}
	s.entrypoint = ep

	if s.epoch, err = parseEpoch("epoch", o.epoch); err != nil {
		return s, fmt.Errorf("build: %w", err)
	}

	if err := validateRefName(o.name); err != nil {
		return s, err
	}
	s.name = o.name

	s.annotations = map[string]string{}
	created := s.epoch.Format(time.RFC3339)
	for _, a := range o.annotations {
		k, v, ok := strings.Cut(a, "=")
		if !ok || k == "" {
			return s, fmt.Errorf("build: --annotation %q: want KEY=VALUE", a)
		}
		if _, dup := s.annotations[k]; dup {
			return s, fmt.Errorf("build: --annotation %s given twice", k)
		}
		if k == annotationCreated && v != created {
			return s, fmt.Errorf("build: --annotation %s=%s disagrees with --epoch %s (%s): leave it out, the epoch sets it", k, v, o.epoch, created)
		}
		s.annotations[k] = v
	}
	s.annotations[annotationCreated] = created

	if o.out == "" {
		return s, errors.New("build: no --out given: pass the OCI archive to write, e.g. --out bin/image/hotplugd.oci.tar")
	}
	return s, nil
}

// parseEpoch reads the flag --name: whole seconds since 1970
// (SOURCE_DATE_EPOCH). USTAR headers hold 11 octal digits of seconds.
func parseEpoch(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("no --%s given: pass the seconds of SOURCE_DATE_EPOCH or `git log -1 --format=%%ct`", name)
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 || sec >= 1<<33 {
		return time.Time{}, fmt.Errorf("--%s %q: want whole seconds since 1970, 0 <= epoch < 2^33", name, s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// parsePlatformBinary parses os/arch[/variant]=PATH.
func parsePlatformBinary(s string) (platformBinary, error) {
	plat, file, ok := strings.Cut(s, "=")
	if !ok || file == "" {
		return platformBinary{}, fmt.Errorf("build: --platform %q: want os/arch[/variant]=PATH, e.g. linux/amd64=bin/image/hotplugd-linux-amd64", s)
	}
	parts := strings.Split(plat, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != "linux" {
		return platformBinary{}, fmt.Errorf("build: --platform %q: want linux/arch[/variant]", plat)
	}
	p := v1.Platform{OS: parts[0], Architecture: parts[1]}
	if len(parts) == 3 {
		p.Variant = parts[2]
	}
	if _, ok := elfMachines[p.Architecture]; !ok {
		return platformBinary{}, fmt.Errorf("build: --platform %q: unknown architecture %q (known: %s)", plat, p.Architecture, strings.Join(slices.Sorted(maps.Keys(elfMachines)), ", "))
	}
	// The OCI image index spec: arm64 images carry variant v8 (what
	// containerd's platform matcher normalizes linux/arm64 to).
	if p.Architecture == "arm64" && p.Variant == "" {
		p.Variant = "v8"
	}
	return platformBinary{platform: p, file: file}, nil
}

// elfMachines maps GOARCH to the ELF machine its binaries carry.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// parseEntrypoint reads --entrypoint: a JSON array, or comma-separated words.
// The image holds one file, so the program must be that file.
func parseEntrypoint(s, file string) ([]string, error) {
	var ep []string
	switch {
	case s == "":
		ep = []string{file}
	case strings.HasPrefix(s, "["):
		if err := json.Unmarshal([]byte(s), &ep); err != nil {
			return nil, fmt.Errorf("build: --entrypoint %s: not a JSON array of strings: %w", s, err)
		}
	default:
		ep = strings.Split(s, ",")
	}
	if len(ep) == 0 || ep[0] != file {
		return nil, fmt.Errorf("build: --entrypoint %q: its program must be %s, the image's only file", s, file)
	}
	return ep, nil
}

// validateRefName checks REF is registry/repository:tag: ctr images import
// names the image exactly so, and the kubelet looks images up by their full
// name.
func validateRefName(ref string) error {
	if ref == "" {
		return errors.New("build: no --name given: pass registry/repository:tag, e.g. ghcr.io/hotplugd/hotplugd:v0.1.0")
	}
	host, _, _ := strings.Cut(ref, "/")
	if !strings.Contains(ref, "/") || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return fmt.Errorf("build: --name %q: name the registry too (e.g. docker.io/library/%s): containerd stores an imported name as written", ref, ref)
	}
	if !strings.Contains(ref[strings.LastIndex(ref, "/")+1:], ":") {
		return fmt.Errorf("build: --name %q: give the tag too (registry/repository:tag)", ref)
	}
	if _, err := name.NewTag(ref, name.StrictValidation); err != nil {
		return fmt.Errorf("build: --name %q: want registry/repository:tag: %w", ref, err)
	}
	return nil
}

func runBuild(args []string, stdout, stderr io.Writer) error {
	var o buildOptions
	fs := flag.NewFlagSet("build", flag.ContinueOnError)
	o.addFlags(fs)
	if err := parseOnlyFlags(fs, args, stderr); err != nil {
		return err
	}
	spec, err := o.validate()
	if err != nil {
		return err
	}
	idx, err := buildIndex(spec)
	if err != nil {
		return err
	}
	d, err := writeOutputs(idx, spec, o.out, o.layout)
	if err != nil {
		return err
	}
	for _, p := range spec.platforms {
		fmt.Fprintf(stderr, "image: %s <- %s\n", p.platform.String(), p.file)
	}
	fmt.Fprintf(stderr, "image: wrote %s (%s)\n", o.out, spec.name)
	if o.layout != "" {
		fmt.Fprintf(stderr, "image: wrote OCI layout %s\n", o.layout)
	}
	fmt.Fprintln(stdout, d.String())
	return nil
}

// buildIndex makes one image per platform and the index over them.
func buildIndex(s buildSpec) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range s.platforms {
		bin, err := os.ReadFile(p.file)
		if err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		if err := checkStaticELF(bin, p); err != nil {
			return nil, err
		}
		img, err := buildImage(bin, p.platform, s)
		if err != nil {
			return nil, fmt.Errorf("build: %s: %w", p.platform.String(), err)
		}
		plat := p.platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        plainImage{img},
			Descriptor: v1.Descriptor{Platform: &plat},
		})
	}
	out, ok := mutate.Annotations(idx, s.annotations).(v1.ImageIndex)
	if !ok {
		return nil, errors.New("build: annotating the index did not give an index")
	}
	return out, nil
}

// plainImage is an image whose descriptor in the index has no artifactType:
// go-containerregistry sets it to the config's media type, which the OCI
// spec means for artifacts, not for a plain image (neither Docker nor
// BuildKit writes it there).
type plainImage struct{ v1.Image }

func (p plainImage) Descriptor() (*v1.Descriptor, error) {
	d, err := partial.Descriptor(p.Image)
	if err != nil {
		return nil, err
	}
	d.ArtifactType = ""
	return d, nil
}

// checkStaticELF refuses a binary for the wrong architecture or one that
// needs a dynamic loader: the image has no libc.
func checkStaticELF(bin []byte, p platformBinary) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("build: %s: not an ELF binary: %w", p.file, err)
	}
	if want := elfMachines[p.platform.Architecture]; f.Machine != want {
		return fmt.Errorf("build: %s: built for %s, not %s (%s): build it with GOARCH=%s", p.file, f.Machine, p.platform.String(), want, p.platform.Architecture)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("build: %s: dynamically linked (it needs a program interpreter), and the image has no libc: build it with CGO_ENABLED=0", p.file)
		}
	}
	return nil
}

// buildImage makes the image of one platform: one layer with the binary, a
// config with the entrypoint, every time the epoch.
func buildImage(bin []byte, p v1.Platform, s buildSpec) (v1.Image, error) {
	gz, err := layerBlob(bin, s.path, s.epoch)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: s.epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: s.entrypoint,
			WorkingDir: "/",
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: s.epoch},
			CreatedBy: fmt.Sprintf("hack/image build: %s (0755, 0:0)", s.path),
		},
	})
}

// layerBlob is the gzipped tar of the layer: the binary at file (and its
// parent directories, if any), every header field fixed.
func layerBlob(bin []byte, file string, epoch time.Time) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	rel := strings.TrimPrefix(file, "/")
	var dirs []string
	for d := path.Dir(rel); d != "."; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		if err := tw.WriteHeader(fixedHeader(d+"/", tar.TypeDir, 0o755, 0, epoch)); err != nil {
			return nil, err
		}
	}
	if err := tw.WriteHeader(fixedHeader(rel, tar.TypeReg, 0o755, int64(len(bin)), epoch)); err != nil {
		return nil, err
	}
	if _, err := tw.Write(bin); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return gzipFixed(raw.Bytes())
}

// fixedHeader is a USTAR header with nothing taken from the machine that
// writes it: owner 0:0 with no names, the epoch as its only time.
func fixedHeader(name string, typ byte, mode, size int64, epoch time.Time) *tar.Header {
	return &tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     mode,
		Size:     size,
		ModTime:  epoch,
		Format:   tar.FormatUSTAR,
	}
}

// gzipFixed compresses with a header that has no name, no comment and no
// mtime, so the bytes depend only on the input (and the Go release's flate).
func gzipFixed(b []byte) ([]byte, error) {
	var out bytes.Buffer
	// Level 6: 9 takes twice as long for 0.4% less on hotplugd's binary.
	zw, err := gzip.NewWriterLevel(&out, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	zw.Header = gzip.Header{OS: 255} // 255: unknown OS, as on every machine
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// writeOutputs writes the OCI layout into a fresh directory, the archive of
// it to out (atomically), and moves the layout to layoutDir if asked. It
// returns the index digest.
func writeOutputs(idx v1.ImageIndex, s buildSpec, out, layoutDir string) (v1.Hash, error) {
	d, err := idx.Digest()
	if err != nil {
		return v1.Hash{}, fmt.Errorf("build: %w", err)
	}
	parent := filepath.Dir(out)
	if layoutDir != "" {
		parent = filepath.Dir(filepath.Clean(layoutDir))
		if err := checkReplaceableLayout(layoutDir); err != nil {
			return v1.Hash{}, err
		}
	}
	tmp, err := os.MkdirTemp(parent, ".oci-layout-*")
	if err != nil {
		return v1.Hash{}, fmt.Errorf("build: %w", err)
	}
	defer os.RemoveAll(tmp)

	top := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add: idx,
		Descriptor: v1.Descriptor{Annotations: map[string]string{
			annotationRefName:        s.name,
			annotationContainerdName: s.name,
		}},
	})
	if _, err := layout.Write(tmp, top); err != nil {
		return v1.Hash{}, fmt.Errorf("build: write OCI layout: %w", err)
	}
	if err := writeFileAtomic(out, 0o644, func(w io.Writer) error {
		return writeArchive(w, tmp, s.epoch)
	}); err != nil {
		return v1.Hash{}, fmt.Errorf("build: write %s: %w", out, err)
	}
	if layoutDir != "" {
		if err := replaceDir(tmp, layoutDir); err != nil {
			return v1.Hash{}, fmt.Errorf("build: %w", err)
		}
	}
	return d, nil
}

// checkReplaceableLayout refuses to replace a directory that is not an OCI
// layout we may have written before (or empty).
func checkReplaceableLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("build: --layout %s: %w", dir, err)
	}
	if len(entries) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("build: --layout %s exists and is not an OCI image layout (no oci-layout file): remove it or choose another directory", dir)
	}
	return nil
}

// replaceDir puts the directory src at dst, replacing dst; its directories
// get mode 0755 and its files 0644 (the layout writer makes them 0777 &^ umask).
func replaceDir(src, dst string) error {
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	})
	if err != nil {
		return err
	}
	old := ""
	if _, err := os.Stat(dst); err == nil {
		old = src + ".old"
		if err := os.Rename(dst, old); err != nil {
			return err
		}
	}
	if err := os.Rename(src, dst); err != nil {
		return err
	}
	if old != "" {
		return os.RemoveAll(old)
	}
	return nil
}

// writeFileAtomic writes a file through a temporary file beside it and a
// rename, so a reader never sees a partial file.
func writeFileAtomic(file string, perm os.FileMode, write func(io.Writer) error) (err error) {
	if resolved, err := filepath.EvalSymlinks(file); err == nil {
		file = resolved
	}
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := write(f); err != nil {
		return err
	}
	if err := f.Chmod(perm); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}

// writeBytes is the write function of writeFileAtomic that writes b.
func writeBytes(b []byte) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}
}
