package kubeletversion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// BinaryID identifies one file on disk: a file with the same device, inode,
// size, modification and change times is the same file with the same bytes.
// The change time cannot be set by a user: any write, chmod, or rename over
// the path (a new inode) changes the identity.
type BinaryID struct {
	Path       string `json:"path"`
	Dev        uint64 `json:"dev"`
	Ino        uint64 `json:"ino"`
	Size       int64  `json:"size"`
	ModTimeNs  int64  `json:"mtimeNs"`
	ChangeTime int64  `json:"ctimeNs"`
}

// Identify stats path (following symbolic links: the file that would run).
func Identify(path string) (BinaryID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return BinaryID{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return BinaryID{}, fmt.Errorf("%s: no stat information", path)
	}
	return BinaryID{Path: path, Dev: uint64(st.Dev), Ino: st.Ino, Size: st.Size,
		ModTimeNs: st.Mtim.Nano(), ChangeTime: st.Ctim.Nano()}, nil
}

// cacheEntry is the version cache file: one binary and the version it
// printed.
type cacheEntry struct {
	Binary  BinaryID `json:"binary"`
	Version string   `json:"version"`
}

// Cached is where FromBinaryCached found the version.
type Cached struct {
	Version Version
	// Hit: the version came from the cache file, the binary was not run.
	Hit bool
	// Warning says why the cache file could not be read or written; the
	// version was then read from the binary (or not at all) as without it.
	Warning string
}

// FromBinaryCached is FromBinary with a cache: when cacheFile records the
// very file at path (BinaryID), its version is returned without running
// the binary. Otherwise the binary is run and, when it was the same file
// before and after the run, the cache file is replaced (atomically, mode
// 0600) with its identity and version, unless readOnly (a dry run changes
// nothing: the cache is read, never written).
//
// This keeps `kubelet --version` out of a kubelet's start: preflight runs in
// the kubelet's ExecStartPre, and on a loaded node the binary's first run
// can take seconds. The cache holds only what running the binary again
// gives, so a cache file that cannot be read is replaced, never trusted.
// An empty cacheFile is FromBinary.
func FromBinaryCached(ctx context.Context, path, cacheFile string, readOnly bool) (Cached, error) {
	if cacheFile == "" {
		v, err := FromBinary(ctx, path)
		return Cached{Version: v}, err
	}
	var c Cached
	before, err := Identify(path)
	if err != nil {
		return c, fmt.Errorf("kubeletversion: %w", err)
	}
	v, ok, err := fromCache(before, cacheFile)
	if ok {
		return Cached{Version: v, Hit: true}, nil
	}
	if err != nil {
		c.Warning = err.Error() + ": replaced by the binary's own answer"
	}
	c.Version, err = FromBinary(ctx, path)
	if err != nil {
		return c, err
	}
	after, err := Identify(path)
	if readOnly || err != nil || after != before {
		return c, nil // a dry run, or replaced while it ran: nothing to remember
	}
	b, err := json.Marshal(cacheEntry{Binary: before, Version: c.Version.String()})
	if err == nil {
		err = os.MkdirAll(filepath.Dir(cacheFile), 0o700)
	}
	if err == nil {
		err = statefile.Replace(cacheFile, append(b, '\n'))
	}
	if err != nil {
		c.Warning = join(c.Warning, fmt.Sprintf("the version cache %s cannot be written (%v): the next start runs the binary again", cacheFile, err))
	}
	return c, nil
}

// FromCache returns the version cacheFile records for the very file at path
// (the same BinaryID), as FromBinaryCached wrote it, without running
// anything: ok is false when the file is another one or the cache has
// none; err says why a cache file that exists could not be used.
func FromCache(path, cacheFile string) (v Version, ok bool, err error) {
	id, err := Identify(path)
	if err != nil {
		return Version{}, false, fmt.Errorf("kubeletversion: %w", err)
	}
	return fromCache(id, cacheFile)
}

func fromCache(id BinaryID, cacheFile string) (Version, bool, error) {
	// statefile.Read: preflight runs in the kubelet's start, which a FIFO
	// or a device at the path must not hang; a symlink or an oversized
	// file is not read either (and is replaced by the next write).
	b, err := statefile.Read(cacheFile)
	if errors.Is(err, fs.ErrNotExist) {
		return Version{}, false, nil
	}
	if err != nil {
		return Version{}, false, fmt.Errorf("the version cache %s cannot be read (%v)", cacheFile, err)
	}
	var e cacheEntry
	if err := json.Unmarshal(b, &e); err != nil {
		return Version{}, false, fmt.Errorf("the version cache %s is not readable JSON (%v)", cacheFile, err)
	}
	if e.Binary != id {
		return Version{}, false, nil
	}
	v, err := Parse(e.Version)
	if err != nil {
		return Version{}, false, fmt.Errorf("the version cache %s holds %q, not a version", cacheFile, e.Version)
	}
	return v, true, nil
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
