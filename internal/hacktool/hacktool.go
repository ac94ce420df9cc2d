package hacktool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

var (
	mu    sync.Mutex
	found = map[string]result{}
)

type result struct {
	path string
	err  error
}

// EnvVar is the variable that names a tool's binary instead of
// hack/tool.sh's build: HOTPLUGD_<NAME> (HOTPLUGD_KUSTOMIZE).
func EnvVar(name string) string { return "HOTPLUGD_" + strings.ToUpper(name) }

// Path is the named tool's binary: $HOTPLUGD_<NAME> when set (it must be an
// executable file), else what `hack/tool.sh <name>` prints, which builds it
// the first time on a machine (minutes) and then answers from its cache.
// The script runs at most once per process and name; its error is kept.
func Path(name string) (string, error) {
	if p := os.Getenv(EnvVar(name)); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("hacktool: $%s=%s is not an executable file (%v)", EnvVar(name), p, err)
		}
		return p, nil
	}
	mu.Lock()
	defer mu.Unlock()
	if r, ok := found[name]; ok {
		return r.path, r.err
	}
	var r result
	root, err := repoRoot()
	if err != nil {
		r.err = err
	} else {
		cmd := exec.Command(filepath.Join(root, "hack", "tool.sh"), name)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			r.err = fmt.Errorf("hacktool: hack/tool.sh %s: %v\n%s", name, err, lastLines(stderr.String(), 20))
		} else {
			r.path = strings.TrimSpace(string(out))
		}
	}
	found[name] = r
	return r.path, r.err
}

// repoRoot is the nearest directory at or above the working directory (a
// test runs in its package's directory) that holds hack/tool.sh.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("hacktool: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "tool.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("hacktool: no hack/tool.sh above the working directory")
		}
		dir = parent
	}
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
