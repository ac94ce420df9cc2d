package kubeletconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	netutils "k8s.io/utils/net"
)

// DefaultRootDir is the kubelet's --root-dir default
// (cmd/kubelet/app/options/options.go).
const DefaultRootDir = "/var/lib/kubelet"

// DefaultPodLogsDir is the kubelet's podLogsDir default
// (pkg/kubelet/apis/config/v1beta1/defaults.go), the same in every release
// hotplugd knows. Default does not set it: it would change every
// Fingerprint for a field that changes nothing in how the kubelet starts.
const DefaultPodLogsDir = "/var/log/pods"

var (
	// ErrNotFound is wrapped by Discover's error when no kubelet process runs
	// in the PID namespace it can see.
	ErrNotFound = errors.New("no kubelet process found")
	// ErrAmbiguous is wrapped by Discover's error when more than one kubelet
	// process runs (several kind nodes on one host, for instance).
	ErrAmbiguous = errors.New("more than one kubelet process")
)

// Kubelet is what hotplugd knows about the kubelet it serves.
type Kubelet struct {
	// PID is the kubelet's process, 0 when not discovered from a process.
	PID int
	// Cmdline is the kubelet's argv (Discover) or the arguments given to
	// FromArgs, for logs.
	Cmdline []string
	// ConfigPath is the --config file as the kubelet names it ("" if none).
	ConfigPath string
	// ConfigDir is --config-dir as the kubelet names it ("" if none).
	ConfigDir string
	// Config is the effective configuration: the --config file (or the
	// kubelet's defaults without one), the --config-dir drop-ins, then the
	// overriding flags, as the kubelet builds it. Only the fields this package
	// documents are defaulted (see Default).
	Config *kubeletv1beta1.KubeletConfiguration
	// RootDir is --root-dir made absolute against the kubelet's working
	// directory, DefaultRootDir when not given. It is a path in the kubelet's
	// mount namespace: where hotplugd reaches it is StateDir.
	RootDir string
	// FSRoot is where hotplugd sees the kubelet's "/": /proc/<pid>/root for
	// Discover ("/" without ptrace access to the kubelet), the fsRoot given
	// to FromArgs. The configuration is read under it; it is no place to
	// write (see StateDir).
	FSRoot string
	// Files are what the configuration was read from, as paths in
	// hotplugd's own file system, for a watcher (fsnotify) to re-discover
	// the kubelet when one changes: the --config file, the --config-dir
	// directory, then its subdirectories and the drop-ins the kubelet
	// reads, in the order of the walk (inotify does not watch a directory
	// tree, only each directory). A path is the kubelet's own when it names
	// the same file in hotplugd's file system (FSRoot "/", a shared mount),
	// else the path under FSRoot, which for /proc/<pid>/root works only
	// while that kubelet process lives.
	Files []string
	// AllocatableIgnoresEviction is the deprecated
	// --experimental-allocatable-ignore-eviction: when true the kubelet leaves
	// hard eviction thresholds out of node allocatable
	// (cmd/kubelet/app/server.go).
	AllocatableIgnoresEviction bool
	// HealthzURL is http://<healthzBindAddress>:<healthzPort>/healthz from the
	// effective configuration, "" when healthzPort is 0 (disabled). An
	// unspecified bind address (0.0.0.0, ::) is replaced by the loopback
	// address of its family: it is where the kubelet listens, not an address
	// to connect to.
	HealthzURL string

	// sources are the files read, with the hashes of their content, for
	// Fingerprint: the --config file, then the drop-ins.
	sources []source
}

// StateDir returns the kubelet's root dir (RootDir), where its state files
// are, as hotplugd can reach it to read and rewrite them:
//
//   - RootDir itself when FSRoot is "/" (hotplugd sees the kubelet's file
//     system as its own), or when RootDir under FSRoot is the same
//     directory as RootDir in hotplugd's file system (os.SameFile): the
//     same mount namespace, or a DaemonSet that mounts the kubelet's root
//     dir at the same path;
//   - for a kubelet given by FromArgs under another fsRoot (the host's "/"
//     mounted at /host), RootDir under that root: a mount of hotplugd's own;
//   - else an error that says what to mount. RootDir under
//     /proc/<pid>/root is not returned: that path disappears when the
//     kubelet process stops, which is what a remedy does first.
//
// An error also when RootDir cannot be looked at in the kubelet's file
// system (a kubelet that has not created it yet: errors.Is fs.ErrNotExist).
func (k *Kubelet) StateDir() (string, error) {
	switch {
	case k.FSRoot == "" || k.FSRoot == "/":
		return k.RootDir, nil
	case k.PID == 0:
		return filepath.Join(k.FSRoot, k.RootDir), nil
	}
	fsys := hostFS(k.FSRoot)
	theirs, err := fsys.stat(rel(k.RootDir))
	if err != nil {
		return "", fmt.Errorf("kubeletconfig: the kubelet's root dir %s (pid %d): %w", k.RootDir, k.PID, err)
	}
	mount := fmt.Sprintf("mount it into hotplugd at the same path (a DaemonSet: a hostPath volume with path %s and mountPath %s),"+
		" or give --kubelet-root-dir where hotplugd has it; its path under /proc/%d/root is no use for a remedy: it disappears when the kubelet stops",
		k.RootDir, k.RootDir, k.PID)
	ours, err := os.Stat(k.RootDir)
	if err != nil {
		return "", fmt.Errorf("kubeletconfig: the kubelet's root dir %s (pid %d) is not visible in hotplugd's file system (%w): %s", k.RootDir, k.PID, err, mount)
	}
	if !os.SameFile(theirs, ours) {
		return "", fmt.Errorf("kubeletconfig: the kubelet's root dir %s (pid %d) is another directory in hotplugd's file system: %s", k.RootDir, k.PID, mount)
	}
	return k.RootDir, nil
}

// PodLogsDir returns the kubelet's pod log directory (podLogsDir,
// DefaultPodLogsDir when the configuration leaves it unset), where the
// kubelet writes each pod's logs under <namespace>_<name>_<uid>/, as
// hotplugd reads it: like the configuration files (Files), the path itself
// when it is the same directory in hotplugd's file system (FSRoot "/", a
// DaemonSet that mounts it at the same path), else the path under FSRoot.
// It is for reading only, while the kubelet runs (pkg/podnames names the
// pods of a drain from it). "" when the configured path is not absolute:
// the kubelet refuses to start with it.
func (k *Kubelet) PodLogsDir() string {
	dir := DefaultPodLogsDir
	if k.Config != nil && k.Config.PodLogsDir != "" {
		dir = k.Config.PodLogsDir
	}
	if !filepath.IsAbs(dir) {
		return ""
	}
	dir = filepath.Clean(dir)
	if k.FSRoot == "" || k.FSRoot == "/" {
		return dir
	}
	return hostPath(hostFS(k.FSRoot), dir)
}

// hostPath is the kubelet's absolute path p in hotplugd's file system: p
// itself when it is the same file there, else p under the kubelet's root.
func hostPath(fsys hostFS, p string) string {
	if string(fsys) == "/" {
		return p
	}
	if theirs, err := fsys.stat(rel(p)); err == nil {
		if ours, err := os.Stat(p); err == nil && os.SameFile(theirs, ours) {
			return p
		}
	}
	return filepath.Join(string(fsys), p)
}

// Discover finds the running kubelet under procRoot (normally /proc,
// /host/proc in a container with hostPID) and builds its effective
// configuration.
//
// The kubelet is the process whose argv[0] has the base name "kubelet", or
// "hyperkube" followed by "kubelet" (the all-in-one binary of Kubernetes
// before 1.19; cheap to accept). Kubelets embedded in another binary (k3s,
// MicroK8s kubelite) have no such process: the operator names their
// configuration instead (FromArgs). Processes that vanish or whose cmdline
// cannot be read are skipped; if none could be read at all, that is the error.
// No kubelet: an error wrapping ErrNotFound. More than one: an error wrapping
// ErrAmbiguous that lists their PIDs.
//
// Paths on the command line are resolved as the kubelet resolves them: a
// relative one against /proc/<pid>/cwd, and files are read through
// /proc/<pid>/root, with symlinks followed inside that root (see hostFS), so
// that it works from another mount namespace. /proc/<pid>/root and cwd need
// ptrace access to the kubelet (CAP_SYS_PTRACE for a process with fewer
// capabilities, such as a DaemonSet pod that drops them): without it, files
// are read at the same paths in hotplugd's own file system, where the
// DaemonSet mounts them, and a relative path is an error.
func Discover(procRoot string) (*Kubelet, error) {
	pid, argv, err := findKubelet(procRoot)
	if err != nil {
		return nil, err
	}
	procDir := filepath.Join(procRoot, strconv.Itoa(pid))
	fsys := hostFS(filepath.Join(procDir, "root"))
	cwd := func() (string, error) { return os.Readlink(filepath.Join(procDir, "cwd")) }
	if _, err := os.Readlink(string(fsys)); errors.Is(err, fs.ErrPermission) {
		fsys = hostFS("/")
		cwd = func() (string, error) {
			return "", fmt.Errorf("%s: %w (no ptrace access to the kubelet: give --kubelet-config, or absolute paths)", filepath.Join(procDir, "cwd"), err)
		}
	}
	k, err := build(kubeletArgs(argv), fsys, cwd)
	if err != nil {
		return nil, fmt.Errorf("kubeletconfig: kubelet pid %d: %w", pid, err)
	}
	k.PID = pid
	k.Cmdline = argv
	return k, nil
}

// FromArgs builds a Kubelet from kubelet arguments given explicitly (without
// argv[0]), such as ["--config", path] for a configuration the operator names.
// Files are read inside fsRoot ("/" normally, /host when the host's file
// system is mounted there), and relative paths are taken against hotplugd's
// working directory, as a shell user would expect.
func FromArgs(args []string, fsRoot string) (*Kubelet, error) {
	k, err := build(args, hostFS(fsRoot), os.Getwd)
	if err != nil {
		return nil, fmt.Errorf("kubeletconfig: %w", err)
	}
	k.Cmdline = slices.Clone(args)
	return k, nil
}

// build computes the effective configuration from a kubelet command line, in
// the kubelet's order (cmd/kubelet/app/server.go NewKubeletCommand): the
// --config file with its defaults (or the defaults alone), the --config-dir
// drop-ins, then the configuration flags again over the result
// (kubeletConfigFlagPrecedence; see applyFlags). cwd gives the directory
// relative paths are resolved against.
func build(args []string, fsys hostFS, cwd func() (string, error)) (*Kubelet, error) {
	f, err := parseArgs(args)
	if err != nil {
		return nil, fmt.Errorf("parse command line: %w", err)
	}
	abs := func(flag, p string) (string, error) {
		if filepath.IsAbs(p) {
			return filepath.Clean(p), nil
		}
		d, err := cwd()
		if err != nil {
			return "", fmt.Errorf("resolve relative %s %q: working directory: %w", flag, p, err)
		}
		return filepath.Join(d, p), nil
	}
	k := &Kubelet{
		ConfigPath:                 f.config,
		ConfigDir:                  f.configDir,
		FSRoot:                     string(fsys),
		AllocatableIgnoresEviction: f.ignoreEviction,
		RootDir:                    DefaultRootDir,
	}
	c := Default()
	if f.config != "" {
		p, err := abs("--config", f.config)
		if err != nil {
			return nil, err
		}
		b, err := fsys.readFile(rel(p))
		if err != nil {
			return nil, fmt.Errorf("read --config: %w", err)
		}
		if c, err = Parse(b); err != nil {
			return nil, fmt.Errorf("parse --config %s: %w", filepath.Join(string(fsys), p), err)
		}
		k.sources = append(k.sources, source{path: p, sum: sum(b)})
		k.Files = append(k.Files, hostPath(fsys, p))
	}
	if f.configDir != "" {
		p, err := abs("--config-dir", f.configDir)
		if err != nil {
			return nil, err
		}
		var read dropinsRead
		if c, read, err = readDropins(c, fsys, p, applyDropins); err != nil {
			return nil, err
		}
		k.sources = append(k.sources, read.files...)
		for _, w := range read.paths {
			k.Files = append(k.Files, hostPath(fsys, w))
		}
	}
	if err := applyFlags(c, f.overrides); err != nil {
		return nil, err
	}
	if f.rootDir != "" {
		if k.RootDir, err = abs("--root-dir", f.rootDir); err != nil {
			return nil, err
		}
	}
	k.Config = c
	k.HealthzURL = healthzURL(c)
	return k, nil
}

// findKubelet scans procRoot for the kubelet process.
func findKubelet(procRoot string) (int, []string, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return 0, nil, fmt.Errorf("kubeletconfig: find kubelet: %w", err)
	}
	var (
		pids            []int
		argvs           = map[int][]string{}
		total, readable int
		firstErr        error
	)
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		total++
		argv, err := readCmdline(filepath.Join(procRoot, e.Name(), "cmdline"))
		if err != nil {
			// Gone since ReadDir, or hidden from us (hidepid, permissions).
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		readable++
		if kubeletArgs(argv) != nil {
			pids = append(pids, pid)
			argvs[pid] = argv
		}
	}
	switch {
	case total == 0:
		return 0, nil, fmt.Errorf("kubeletconfig: find kubelet: no process under %s: %w", procRoot, ErrNotFound)
	case readable == 0:
		return 0, nil, fmt.Errorf("kubeletconfig: find kubelet: could not read the command line of any of %d processes under %s: %w", total, procRoot, firstErr)
	case len(pids) == 0:
		return 0, nil, fmt.Errorf("kubeletconfig: find kubelet: none of %d processes under %s (is hotplugd in the host's PID namespace?): %w", readable, procRoot, ErrNotFound)
	case len(pids) > 1:
		slices.Sort(pids)
		s := make([]string, len(pids))
		for i, p := range pids {
			s[i] = strconv.Itoa(p)
		}
		return 0, nil, fmt.Errorf("kubeletconfig: find kubelet: %w: PIDs %s", ErrAmbiguous, strings.Join(s, ", "))
	}
	return pids[0], argvs[pids[0]], nil
}

// readCmdline reads /proc/<pid>/cmdline: argv, each argument ended by a NUL.
// Kernel threads and zombies have an empty one.
func readCmdline(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := readAllCapped(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return parseCmdline(b), nil
}

// parseCmdline splits a NUL-separated argv.
func parseCmdline(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	return strings.Split(string(bytes.TrimSuffix(b, []byte{0})), "\x00")
}

// kubeletArgs returns the kubelet's arguments (never nil) when argv is a
// kubelet's, nil otherwise. A kubelet binary run only to print its version
// or its help (`kubelet --version`, which hotplugd preflight and others run
// while the kubelet runs) is no kubelet.
func kubeletArgs(argv []string) []string {
	if n := len(argv); n >= 2 && n <= 3 {
		switch last := argv[n-1]; {
		case last == "--version" || strings.HasPrefix(last, "--version=") || last == "--help" || last == "-h":
			return nil
		}
	}
	switch {
	case len(argv) >= 1 && filepath.Base(argv[0]) == "kubelet":
		return append([]string{}, argv[1:]...)
	case len(argv) >= 2 && filepath.Base(argv[0]) == "hyperkube" && argv[1] == "kubelet":
		return append([]string{}, argv[2:]...)
	}
	return nil
}

// healthzURL is the kubelet's health endpoint, "" when disabled.
func healthzURL(c *kubeletv1beta1.KubeletConfiguration) string {
	if c.HealthzPort == nil || *c.HealthzPort <= 0 {
		return ""
	}
	host := c.HealthzBindAddress
	if ip := netutils.ParseIPSloppy(host); ip != nil {
		switch {
		case ip.IsUnspecified() && ip.To4() != nil:
			host = "127.0.0.1"
		case ip.IsUnspecified():
			host = "::1"
		default:
			host = ip.String()
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(int(*c.HealthzPort))) + "/healthz"
}
