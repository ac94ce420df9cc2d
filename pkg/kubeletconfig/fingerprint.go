package kubeletconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strconv"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// fingerprintVersion is hashed first: a change of what Fingerprint covers
// changes every fingerprint, rather than making two kubelets that differ in
// the new part look the same to a record written before.
const fingerprintVersion = "hotplugd kubeletconfig fingerprint v1"

// source is a file the configuration was built from: the kubelet's
// absolute path and the SHA-256 of its content as read.
type source struct {
	path string
	sum  [sha256.Size]byte
}

func sum(b []byte) [sha256.Size]byte { return sha256.Sum256(b) }

// Fingerprint identifies the kubelet's start-up behavior as hotplugd reads
// it: a SHA-256, in hex, of its command line (Cmdline), of the content of
// the --config file and of every --config-dir drop-in as read while
// building Config (with their paths), of the effective configuration
// (Config, serialized), of RootDir and of AllocatableIgnoresEviction. Two
// kubelets with the same fingerprint start the same way for hotplugd's
// purposes; a record of what was tried for one kubelet (a remedy that
// failed) is still about the same kubelet after either process restarts.
//
// It errs on the side of "changed": any argument counts, even one hotplugd
// ignores (--v), and any byte of a file read, comments included. It does
// not cover the process (PID; see ProcessStart), where hotplugd reads the
// files from (FSRoot, Files), what is derived from the configuration
// (HealthzURL), nor the kubelet's binary: compare the version separately.
// Fields a caller changes after Discover (an operator's RootDir) are
// covered. It is stable across hotplugd's releases unless
// fingerprintVersion changes.
func (k *Kubelet) Fingerprint() string {
	h := sha256.New()
	var n [8]byte
	// Every value length-prefixed, every group named and counted: no two
	// different inputs write the same bytes.
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	group := func(name string, values ...[]byte) {
		write([]byte(name))
		binary.BigEndian.PutUint64(n[:], uint64(len(values)))
		h.Write(n[:])
		for _, v := range values {
			write(v)
		}
	}
	group(fingerprintVersion)
	args := make([][]byte, len(k.Cmdline))
	for i, a := range k.Cmdline {
		args[i] = []byte(a)
	}
	group("cmdline", args...)
	files := make([][]byte, 0, 2*len(k.sources))
	for _, s := range k.sources {
		files = append(files, []byte(s.path), s.sum[:])
	}
	group("files", files...)
	var config []byte
	if k.Config != nil {
		var err error
		// encoding/json is deterministic: struct fields in order, map
		// keys sorted. A KubeletConfiguration always marshals.
		if config, err = json.Marshal(k.Config); err != nil {
			config = []byte("error: " + err.Error())
		}
	}
	group("config", config)
	group("rootdir", []byte(k.RootDir))
	group("allocatable-ignores-eviction", []byte(strconv.FormatBool(k.AllocatableIgnoresEviction)))
	return hex.EncodeToString(h.Sum(nil))
}

// dropinsRead is what readDropins read under --config-dir, as the kubelet
// names it: the drop-ins the kubelet reads with their hashes, and every
// path looked at (the directory, its subdirectories and the drop-ins) in
// the order of the walk, the directory first.
type dropinsRead struct {
	files []source
	paths []string
}

func (a dropinsRead) equal(b dropinsRead) bool {
	return slices.Equal(a.files, b.files) && slices.Equal(a.paths, b.paths)
}

// maxDropinReads bounds how often readDropins builds the configuration
// when the drop-ins keep changing under it.
const maxDropinReads = 3

// readDropins applies the drop-ins under dir with apply (applyDropins), and
// returns the drop-ins it read with the hashes of the content it applied.
// applyDropins does not say what it read: the drop-ins are listed and
// hashed before and after it, and when the two differ (an editor was
// writing) it is all done again, up to maxDropinReads times. Equal hashes
// before and after mean apply read that content.
func readDropins(c *kubeletv1beta1.KubeletConfiguration, fsys hostFS, dir string,
	apply func(*kubeletv1beta1.KubeletConfiguration, hostFS, string) (*kubeletv1beta1.KubeletConfiguration, error),
) (*kubeletv1beta1.KubeletConfiguration, dropinsRead, error) {
	for range maxDropinReads {
		before, errBefore := listDropins(fsys, dir)
		out, err := apply(c, fsys, dir)
		if err != nil {
			// apply's error names the problem the way the kubelet meets it.
			return nil, dropinsRead{}, err
		}
		after, err := listDropins(fsys, dir)
		if err != nil {
			return nil, dropinsRead{}, err
		}
		if errBefore == nil && before.equal(after) {
			return out, after, nil
		}
	}
	return nil, dropinsRead{}, fmt.Errorf("--config-dir %s: the drop-ins kept changing while being read (%d times)",
		filepath.Join(string(fsys), dir), maxDropinReads)
}

// listDropins lists and hashes what applyDropins reads under dir, the same
// way: the *.conf files found by fs.WalkDir, subdirectories included,
// nothing under a dir that is itself a symlink (but the dir itself when its
// name ends in .conf).
func listDropins(fsys hostFS, dir string) (dropinsRead, error) {
	var r dropinsRead
	read := func(name string) error {
		b, err := fsys.readFile(name)
		if err != nil {
			return fmt.Errorf("read drop-in: %w", err)
		}
		p := path.Join("/", name)
		r.files = append(r.files, source{path: p, sum: sum(b)})
		r.paths = append(r.paths, p)
		return nil
	}
	link, err := fsys.isSymlink(dir)
	if err != nil {
		return r, fmt.Errorf("walk --config-dir: %w", err)
	}
	switch {
	case link && filepath.Ext(dir) == dropinExt:
		// Read as a drop-in file (walked as a non-directory).
		return r, read(rel(dir))
	case link:
		// Not descended into: nothing read, but the place to watch.
		r.paths = append(r.paths, dir)
		return r, nil
	}
	err = fs.WalkDir(fsys, rel(dir), func(name string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			r.paths = append(r.paths, path.Join("/", name))
			return nil
		case path.Ext(d.Name()) != dropinExt:
			return nil
		}
		return read(name)
	})
	if err != nil {
		return r, fmt.Errorf("walk --config-dir: %w", err)
	}
	return r, nil
}
