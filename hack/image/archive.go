package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeArchive writes the OCI layout in dir as a tar: oci-layout and
// index.json first (a streaming reader learns what it holds before the
// blobs), then the directories and blobs in lexical order; every header
// fixed (USTAR, 0:0 without names, modes 0755/0644, the epoch as mtime).
func writeArchive(w io.Writer, dir string, epoch time.Time) error {
	names, err := treeEntries(dir)
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	rank := func(n string) int {
		switch n {
		case "oci-layout":
			return 0
		case "index.json":
			return 1
		}
		return 2
	}
	sort.Slice(names, func(i, j int) bool {
		if ri, rj := rank(names[i]), rank(names[j]); ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})

	tw := tar.NewWriter(w)
	for _, n := range names {
		if strings.HasSuffix(n, "/") {
			if err := tw.WriteHeader(fixedHeader(n, tar.TypeDir, 0o755, 0, epoch)); err != nil {
				return err
			}
			continue
		}
		if err := copyFileToTar(tw, filepath.Join(dir, filepath.FromSlash(n)), n, epoch); err != nil {
			return err
		}
	}
	return tw.Close()
}

// treeEntries lists what is below dir, slash-separated and relative to it,
// directories with a trailing "/", in the walk's order. Anything but
// directories and regular files (a symbolic link) is refused.
func treeEntries(dir string) ([]string, error) {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch {
		case d.IsDir():
			rel += "/"
		case d.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("%s is a symbolic link", p)
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is not a regular file", p)
		}
		names = append(names, rel)
		return nil
	})
	return names, err
}

func copyFileToTar(tw *tar.Writer, file, name string, epoch time.Time) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(fixedHeader(name, tar.TypeReg, 0o644, st.Size(), epoch)); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// extractArchive unpacks an OCI archive into dir, which must exist. Only
// directories and regular files with relative names inside dir are taken.
func extractArchive(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: not a tar archive: %w", archive, err)
		}
		rel := path.Clean(h.Name)
		if path.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, "../") {
			return fmt.Errorf("%s: entry %q is outside the archive", archive, h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q has type %q: an OCI archive holds only directories and files", archive, h.Name, h.Typeflag)
		}
	}
}

// archiveIndex is what an OCI archive's index.json names: the one index (or
// image) it holds and its reference name.
type archiveIndex struct {
	desc v1.Descriptor
	ref  string
}

// readArchiveIndex reads index.json from an OCI archive without unpacking
// the blobs.
func readArchiveIndex(archive string) (archiveIndex, error) {
	f, err := os.Open(archive)
	if err != nil {
		return archiveIndex{}, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return archiveIndex{}, fmt.Errorf("%s: no index.json: not an OCI archive", archive)
		}
		if err != nil {
			return archiveIndex{}, fmt.Errorf("%s: not a tar archive: %w", archive, err)
		}
		if path.Clean(h.Name) != "index.json" {
			continue
		}
		var idx v1.IndexManifest
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
			return archiveIndex{}, fmt.Errorf("%s: index.json: %w", archive, err)
		}
		return onlyManifest(archive, &idx)
	}
}

func onlyManifest(archive string, idx *v1.IndexManifest) (archiveIndex, error) {
	if len(idx.Manifests) != 1 {
		return archiveIndex{}, fmt.Errorf("%s: index.json lists %d manifests, want exactly one (the image index `image build` writes)", archive, len(idx.Manifests))
	}
	d := idx.Manifests[0]
	return archiveIndex{desc: d, ref: d.Annotations[annotationRefName]}, nil
}

// openArchive unpacks an OCI archive into a temporary directory and returns
// the image index it names; cleanup removes the directory.
func openArchive(archive string) (v1.ImageIndex, archiveIndex, func(), error) {
	dir, err := os.MkdirTemp("", "hotplugd-oci-*")
	if err != nil {
		return nil, archiveIndex{}, nil, err
	}
	cleanup := func() { os.RemoveAll(dir) }
	fail := func(err error) (v1.ImageIndex, archiveIndex, func(), error) {
		cleanup()
		return nil, archiveIndex{}, nil, err
	}
	if err := extractArchive(archive, dir); err != nil {
		return fail(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return fail(fmt.Errorf("%s: not an OCI image layout: %w", archive, err))
	}
	im, err := top.IndexManifest()
	if err != nil {
		return fail(fmt.Errorf("%s: index.json: %w", archive, err))
	}
	ai, err := onlyManifest(archive, im)
	if err != nil {
		return fail(err)
	}
	if !ai.desc.MediaType.IsIndex() {
		return fail(fmt.Errorf("%s: index.json names a %s, want an image index", archive, ai.desc.MediaType))
	}
	idx, err := top.ImageIndex(ai.desc.Digest)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", archive, err))
	}
	return idx, ai, cleanup, nil
}

func runDigest(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("digest", flag.ContinueOnError)
	archive := fs.String("archive", "", "OCI archive whose index digest to print (required)")
	if err := parseOnlyFlags(fs, args, stderr); err != nil {
		return err
	}
	if *archive == "" {
		return errors.New("digest: no --archive given: pass the OCI archive, e.g. --archive bin/image/hotplugd.oci.tar")
	}
	ai, err := readArchiveIndex(*archive)
	if err != nil {
		return fmt.Errorf("digest: %w", err)
	}
	fmt.Fprintln(stdout, ai.desc.Digest.String())
	return nil
}
