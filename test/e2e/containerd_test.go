//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// containerd is Debian's containerd on a private socket: its root, state,
// sockets, opt directory and CNI configuration directory are all under a
// temporary directory, so it writes nothing elsewhere on the host.
type containerd struct {
	dir    string
	Socket string
	log    string
	cmd    *exec.Cmd
	done   chan struct{}
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
	cfg, err := privateContainerdConfig(def, map[string]string{
		".root":         filepath.Join(dir, "root"),
		".state":        filepath.Join(dir, "state"),
		"grpc.address":  c.Socket,
		"ttrpc.address": c.Socket + ".ttrpc",
		"debug.address": filepath.Join(dir, "debug.sock"),
		`plugins."io.containerd.internal.v1.opt".path`:              filepath.Join(dir, "opt"),
		`plugins."io.containerd.grpc.v1.cri".cni.conf_dir`:          filepath.Join(dir, "cni", "net.d"),
		`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`:           filepath.Join(dir, "cni", "bin"),
		`plugins."io.containerd.grpc.v1.cri".stream_server_address`: "127.0.0.1",
	})
	if err != nil {
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

// stop ends containerd by PID: SIGTERM, SIGKILL after 10 s.
func (c *containerd) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		c.cmd.Process.Kill()
		<-c.done
	}
}

// privateContainerdConfig sets keys of containerd's TOML configuration.
// A key is "<table>.<name>", the table as written in its header without
// brackets ("" for the top level). Every key must be found: a containerd
// whose default configuration moved a path elsewhere would otherwise write
// to the host.
func privateContainerdConfig(def []byte, set map[string]string) ([]byte, error) {
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
				line = indent + name + " = " + strconv.Quote(v)
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
