package kubeapitest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// cacheDir is the directory hack/kubebin.sh builds the e2e release's
// programs into, as the script itself computes it (hack/kubebin.sh --check
// prints it and never builds).
func cacheDir(root string) (string, error) {
	cmd := exec.Command("bash", filepath.Join(root, "hack", "kubebin.sh"), "--check")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	dir := lines[len(lines)-1]
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("kubeapitest: hack/kubebin.sh --check printed no directory (%v): %s", err, strings.TrimSpace(stderr.String()))
	}
	return dir, nil
}
