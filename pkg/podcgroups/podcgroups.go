package podcgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Drivers, as the kubelet's cgroupDriver names them.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// ErrNoPodCgroups: the kubelet's QoS cgroups are in no hierarchy (it runs
// with cgroupsPerQOS false, another cgroupRoot, or not at all): which pods
// run is not known.
var ErrNoPodCgroups = errors.New("no kubelet QoS cgroup found: pods running cannot be told")

// Config is what of the kubelet's configuration places its cgroups.
type Config struct {
	// CgroupRoot is the kubelet's cgroupRoot ("" or "/": the root).
	CgroupRoot string
	// CgroupDriver is DriverCgroupfs ("" too) or DriverSystemd.
	CgroupDriver string
	// CgroupsPerQOS is the kubelet's cgroupsPerQOS (true by default).
	CgroupsPerQOS bool
}

// Running returns the UIDs of the pods that have a pod cgroup, cgroupfs
// being the cgroup file system's mount point as hotplugd sees it
// (/sys/fs/cgroup, /host/sys/fs/cgroup in a container). It only lists
// directories.
func Running(cgroupfs string, cfg Config) (map[string]bool, error) {
	if !cfg.CgroupsPerQOS {
		return nil, fmt.Errorf("podcgroups: %w (cgroupsPerQOS is false)", ErrNoPodCgroups)
	}
	var conv converter
	switch cfg.CgroupDriver {
	case "", DriverCgroupfs:
		conv = cgroupfsNames{}
	case DriverSystemd:
		conv = systemdNames{}
	default:
		return nil, fmt.Errorf("podcgroups: unknown cgroup driver %q", cfg.CgroupDriver)
	}
	mounts, err := hierarchies(cgroupfs)
	if err != nil {
		return nil, fmt.Errorf("podcgroups: %w", err)
	}
	root := append(parseCgroupfs(cfg.CgroupRoot), "kubepods")
	qos := [][]string{root, append(clone(root), "burstable"), append(clone(root), "besteffort")}
	found := map[string]bool{}
	seen := false
	for _, m := range mounts {
		for _, q := range qos {
			dir := conv.name(q)
			entries, err := os.ReadDir(filepath.Join(m, dir))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("podcgroups: %w", err)
			}
			seen = true
			for _, e := range entries {
				if !e.IsDir() {
					continue
				}
				// As GetAllPodsFromCgroups: the last component of the
				// internal name, split on "pod".
				parts := conv.parse(path.Join(dir, e.Name()))
				base := parts[len(parts)-1]
				if !strings.Contains(base, "pod") {
					continue
				}
				s := strings.Split(base, "pod")
				if len(s) != 2 || s[1] == "" {
					continue
				}
				found[s[1]] = true
			}
		}
	}
	if !seen {
		return nil, fmt.Errorf("podcgroups: %w under %s (cgroupRoot %q, driver %s)", ErrNoPodCgroups, cgroupfs, cfg.CgroupRoot, conv)
	}
	return found, nil
}

// hierarchies are the cgroup hierarchies under the mount point: itself
// under cgroup v2 (cgroup.controllers), each directory under v1.
func hierarchies(cgroupfs string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(cgroupfs, "cgroup.controllers")); err == nil {
		return []string{cgroupfs}, nil
	}
	entries, err := os.ReadDir(cgroupfs)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		// v1 mounts each controller on a directory; cpu and cpuacct are
		// often symlinks to cpu,cpuacct: read that one once.
		if e.IsDir() {
			out = append(out, filepath.Join(cgroupfs, e.Name()))
		}
	}
	return out, nil
}

func clone(s []string) []string { return append([]string(nil), s...) }

// parseCgroupfs is the kubelet's ParseCgroupfsToCgroupName.
func parseCgroupfs(name string) []string {
	c := strings.Split(strings.TrimPrefix(name, "/"), "/")
	if len(c) == 1 && c[0] == "" {
		return nil
	}
	return c
}

// converter is the kubelet's cgroup manager's Name and CgroupName for one
// driver.
type converter interface {
	name(internal []string) string
	parse(fsName string) []string
	String() string
}

type cgroupfsNames struct{}

func (cgroupfsNames) name(c []string) string  { return "/" + path.Join(c...) }
func (cgroupfsNames) parse(n string) []string { return parseCgroupfs(n) }
func (cgroupfsNames) String() string          { return DriverCgroupfs }

type systemdNames struct{}

// name is CgroupName.ToSystemd: components "-"-escaped to "_", joined by
// "-", then expanded as systemd expands a slice name
// ("a-b.slice" is /a.slice/a-b.slice).
func (systemdNames) name(c []string) string {
	if len(c) == 0 {
		return "/"
	}
	parts := make([]string, len(c))
	for i, p := range c {
		parts[i] = strings.ReplaceAll(p, "-", "_")
	}
	var b strings.Builder
	for i := range parts {
		b.WriteString("/" + strings.Join(parts[:i+1], "-") + ".slice")
	}
	return b.String()
}

// parse is ParseSystemdToCgroupName: the base name, ".slice" removed,
// split on "-", each part unescaped.
func (systemdNames) parse(n string) []string {
	parts := strings.Split(strings.TrimSuffix(path.Base(n), ".slice"), "-")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, "_", "-")
	}
	return parts
}

func (systemdNames) String() string { return DriverSystemd }
