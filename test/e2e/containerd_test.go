//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hotplugd/hotplugd/internal/testimage"
)

// containerd is Debian's containerd on a private socket: its root, state,
// sockets, opt directory and CNI configuration directory are all under a
// temporary directory, so it writes nothing elsewhere on the host.
//
// Its pod sandboxes run pauseImage, built and imported by the scenarios that
// run pods (no registry is reachable). Its CNI configuration is one
// loopback network and its CNI plugin directory is empty: every pod the
// scenarios run is hostNetwork (as hotplugd's DaemonSet is), for which
// containerd calls no plugin, and a loaded configuration is what makes the
// runtime's network, and so the Node, Ready. A pod that is not hostNetwork
// fails at its sandbox, saying the plugin is missing; no host network
// interface or firewall rule is ever made.
type containerd struct {
	// restrictedOOM: this machine cannot lower oom_score_adj, and
	// containerd is told to clamp it (restrict_oom_score_adj).
	restrictedOOM bool
	// removeRun: shimSocketRoot was missing before containerd started.
	removeRun bool
	dir       string
	Socket    string
	log       string
	cmd       *exec.Cmd
	done      chan struct{}
}

// startContainerd writes a configuration (`containerd config default` with
// every host path moved under dir) and starts containerd with it, waiting
// until it has booted.
func startContainerd(dir string) (*containerd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &containerd{dir: dir, Socket: filepath.Join(dir, "containerd.sock"), log: filepath.Join(dir, "containerd.log"), done: make(chan struct{})}
	def, err := exec.Command("containerd", "config", "default").Output()
	if err != nil {
		return nil, fmt.Errorf("containerd config default: %w", err)
	}
	set := map[string]any{
		".root":         filepath.Join(dir, "root"),
		".state":        filepath.Join(dir, "state"),
		"grpc.address":  c.Socket,
		"ttrpc.address": c.Socket + ".ttrpc",
		"debug.address": filepath.Join(dir, "debug.sock"),
		`plugins."io.containerd.internal.v1.opt".path`:              filepath.Join(dir, "opt"),
		`plugins."io.containerd.grpc.v1.cri".cni.conf_dir`:          filepath.Join(dir, "cni", "net.d"),
		`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`:           filepath.Join(dir, "cni", "bin"),
		`plugins."io.containerd.grpc.v1.cri".stream_server_address`: "127.0.0.1",
		`plugins."io.containerd.grpc.v1.cri".sandbox_image`:         pauseImage,
		// runc's state of the kubelet's containers (default
		// /run/containerd/runc).
		`plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options.Root`: filepath.Join(dir, "runc"),
	}
	if !hasCapability(capSysResource) {
		// The kubelet gives pod sandboxes an oom_score_adj of -998 and
		// Guaranteed or node-critical containers -997; lowering it needs
		// CAP_SYS_RESOURCE, which some machines (container sandboxes)
		// withhold even from root, and runc then fails every pod ("failed
		// to update /proc/self/oom_score_adj: Permission denied").
		// containerd's own knob for that: no lower than its own.
		set[`plugins."io.containerd.grpc.v1.cri".restrict_oom_score_adj`] = true
	}
	c.restrictedOOM = !hasCapability(capSysResource)
	// containerd 1.6's shims put their sockets in /run/containerd/s
	// whatever its configuration: removed at the end when it was missing.
	if _, err := os.Lstat(shimSocketRoot); errors.Is(err, fs.ErrNotExist) {
		c.removeRun = true
	}
	cfg, err := privateContainerdConfig(def, set)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "cni", "net.d"), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "cni", "net.d", "10-e2e.conflist"), []byte(cniConfig), 0o600); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.OpenFile(c.log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	c.cmd = exec.Command("containerd", "--config", cfgPath)
	c.cmd.Stdout, c.cmd.Stderr = logFile, logFile
	// Its own process group (a terminal's Ctrl-C reaches only the test,
	// which stops it), and killed with the test binary if that dies.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting containerd: %w", err)
	}
	go func() {
		c.cmd.Wait()
		close(c.done)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(c.log)
		if bytes.Contains(b, []byte("containerd successfully booted")) {
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("containerd exited at start; %s:\n%s", c.log, tail(b, 3000))
		default:
		}
		if time.Now().After(deadline) {
			c.stop()
			return nil, fmt.Errorf("containerd not booted after 30s; %s:\n%s", c.log, tail(b, 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pauseImage is the pod sandbox image (test/e2e/images/pause).
const pauseImage = testimage.PauseName

// cniConfig is the runtime's one network: loopback only (see containerd).
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": "e2e-hostnetwork-only",
  "plugins": [{"type": "loopback"}]
}
`

// stop ends containerd by PID: first every container it still runs (a
// pod the kubelet did not get to stop; containers outlive containerd in
// their shims), then containerd itself (SIGTERM, SIGKILL after 10 s), then
// any shim of this containerd that is left, by PID.
func (c *containerd) stop() {
	select {
	case <-c.done:
		c.killShims()
		return
	default:
	}
	c.killTasks()
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
	c.killShims()
	// What its containers left mounted under its directory (their root
	// file systems, a sandbox's /dev/shm), the deepest first.
	if mounts, err := mountPoints(); err == nil {
		for i := len(mounts) - 1; i >= 0; i-- {
			if strings.HasPrefix(mounts[i], c.dir+"/") {
				syscall.Unmount(mounts[i], syscall.MNT_DETACH)
			}
		}
	}
	if c.removeRun {
		os.RemoveAll(shimSocketRoot)
	}
}

// tasks are the IDs of the containers running in the kubelet's namespace.
func (c *containerd) tasks() ([]string, error) {
	out, err := c.ctr("tasks", "ls", "-q")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// waitNoTasks waits until no container of the kubelet's runs (after its
// pods were deleted, before the kubelet stops: the host restore can only
// remove empty cgroups); what still runs after timeout is killed, and
// reported.
func (c *containerd) waitNoTasks(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ids, err := c.tasks()
		if err == nil && len(ids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			c.killTasks()
			return fmt.Errorf("containers still running %v after their pods were deleted (killed): %v", timeout, ids)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// shimSocketRoot is where containerd 1.6's shims put their sockets.
const shimSocketRoot = "/run/containerd"

// capSysResource is CAP_SYS_RESOURCE's bit.
const capSysResource = 24

// hasCapability reads this process's effective capabilities.
func hasCapability(bit uint) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// ctr runs ctr against this containerd in the kubelet's namespace.
func (c *containerd) ctr(args ...string) ([]byte, error) {
	cmd := exec.Command("ctr", append([]string{"--address", c.Socket, "--namespace", "k8s.io"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// killTasks kills and deletes every task (running container) in the
// kubelet's namespace.
func (c *containerd) killTasks() {
	out, err := c.ctr("tasks", "ls", "-q")
	if err != nil {
		return
	}
	for _, id := range strings.Fields(string(out)) {
		c.ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id)
		for i := 0; i < 50; i++ {
			if _, err := c.ctr("tasks", "delete", id); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// killShims sends SIGKILL to every containerd-shim whose command line
// names this containerd's socket (read from /proc).
func (c *containerd) killShims() {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) == 0 || !strings.Contains(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == c.Socket {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}

// privateContainerdConfig sets keys of containerd's TOML configuration.
// A key is "<table>.<name>", the table as written in its header without
// brackets ("" for the top level). Every key must be found: a containerd
// whose default configuration moved a path elsewhere would otherwise write
// to the host.
func privateContainerdConfig(def []byte, set map[string]any) ([]byte, error) {
	var out bytes.Buffer
	seen := map[string]bool{}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(def))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "[") && strings.HasSuffix(trimmed, "]") {
			table = strings.Trim(trimmed, "[]")
		} else if name, _, ok := strings.Cut(trimmed, " = "); ok {
			key := table + "." + name
			if v, ok := set[key]; ok {
				indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
				switch v := v.(type) {
				case string:
					line = indent + name + " = " + strconv.Quote(v)
				default:
					line = indent + name + " = " + fmt.Sprint(v)
				}
				seen[key] = true
			}
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	for k := range set {
		if !seen[k] {
			return nil, fmt.Errorf("containerd config default has no %q: cannot keep containerd off the host's paths", k)
		}
	}
	return out.Bytes(), nil
}

// tail is the end of b, at most n bytes.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
