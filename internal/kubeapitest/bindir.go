package kubeapitest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// EnvBinDir names a directory holding the programs hack/kubebin.sh builds;
// it takes precedence over hack/kubebin.sh's cache.
const EnvBinDir = "HOTPLUGD_KUBEBIN"

// binaries are the programs hack/kubebin.sh builds.
var binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kubelet"}

// BinDir returns the directory with kube-apiserver, kube-controller-manager,
// kube-scheduler, etcd and kubelet:
// $HOTPLUGD_KUBEBIN when set, else hack/kubebin.sh's cache directory when
// the script has already built them. It never builds (that takes about 8
// minutes); when they are missing, the error says how to build them.
func BinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if err := checkBinaries(dir); err != nil {
			return "", fmt.Errorf("kubeapitest: $%s: %w", EnvBinDir, err)
		}
		return dir, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	dir, err := cacheDir(root)
	if err != nil {
		return "", err
	}
	if err := checkBinaries(dir); err != nil {
		return "", fmt.Errorf("kubeapitest: the Kubernetes programs are not built yet (%w); run `hack/kubebin.sh` (about 8 minutes, once) or `make test`, or set $%s", err, EnvBinDir)
	}
	return dir, nil
}

func checkBinaries(dir string) error {
	for _, name := range binaries {
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return fmt.Errorf("%s is not executable", p)
		}
	}
	return nil
}

// repoRoot is the nearest directory at or above the working directory (a
// test runs in its package's directory) that holds hack/kubebin.sh.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kubeapitest: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "kubebin.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kubeapitest: no hack/kubebin.sh above the working directory; set $" + EnvBinDir)
		}
		dir = parent
	}
}

// cacheDir is the directory hack/kubebin.sh builds into and prints. It must
// compute what the script computes (TestCacheDirMatchesScript checks it):
//
//	key   = first 16 hex digits of sha256(test/kubebin/go.mod + go.sum)
//	cache = ${HOTPLUGD_KUBEBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/kubebin}
func cacheDir(root string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(root, "test", "kubebin", name))
		if err != nil {
			return "", fmt.Errorf("kubeapitest: %w", err)
		}
		h.Write(b)
	}
	key := hex.EncodeToString(h.Sum(nil))[:16]
	cache := os.Getenv("HOTPLUGD_KUBEBIN_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home := os.Getenv("HOME")
			if home == "" {
				return "", errors.New("kubeapitest: neither $HOME nor $XDG_CACHE_HOME is set; set $" + EnvBinDir)
			}
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "hotplugd", "kubebin")
	}
	return filepath.Join(cache, key), nil
}
