//go:build e2e

package node

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/machinetest"
	"github.com/hotplugd/hotplugd/internal/qemutest"
)

// repoRoot is the repository (the tests run in test/e2e/node).
const repoRoot = "../../.."

// Timeouts, generous for TCG on a loaded 2-core CI machine; the tests wait
// for what they expect and go on as soon as it is there.
const (
	bootTimeout  = 5 * time.Minute // QEMU start to the agent answering
	readyTimeout = 3 * time.Minute // a kubelet start to its Node reporting
	stepTimeout  = 2 * time.Minute // a change to the Node showing it
)

// Guest addresses (QEMU user-mode network, test/e2e/node/image/etc/systemd/network).
const (
	guestAgentPort   = 7070
	guestKubeletPort = 10250
	// apiServerAddr is where the guest reaches the API server: QEMU's
	// guestfwd to the host's 127.0.0.1, the guest's only way out.
	apiServerAddr = "10.0.2.100:6443"
)

// guestfwdArg makes the test binary a forwarder: QEMU's guestfwd runs
// "<test binary> guestfwd 127.0.0.1:<port>" for each connection the guest
// opens to apiServerAddr, with that connection as stdin and stdout.
const guestfwdArg = "guestfwd"

// running are the VMs not yet stopped, with the directories to remove.
var running struct {
	mu   sync.Mutex
	vms  map[*vm]bool
	dirs []string
	// ended: cleanup ran; nothing new may start (it would outlive the run).
	ended bool
}

func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == guestfwdArg {
		os.Exit(forward(os.Args[2]))
	}
	flag.Parse()
	machinetest.BeforeTimeout(10*time.Second, func() {
		fmt.Fprintln(os.Stderr, "node: go test's -timeout is near: stopping the VMs and the API server")
		cleanup()
	})
	code := m.Run()
	printResults(os.Stdout)
	cleanup()
	os.Exit(code)
}

// cleanup kills the VMs still running, by PID, stops the API server and
// removes the temporary directories.
func cleanup() {
	running.mu.Lock()
	for v := range running.vms {
		v.cmd.Process.Kill()
	}
	running.vms = nil
	running.ended = true
	dirs := running.dirs
	running.dirs = nil
	running.mu.Unlock()
	stopCluster()
	for _, d := range dirs {
		os.RemoveAll(d)
	}
}

// tempDir makes a temporary directory that cleanup removes, also when go
// test's -timeout cuts the run short (t.TempDir's are not).
func tempDir(t *testing.T, pattern string) string {
	t.Helper()
	running.mu.Lock()
	defer running.mu.Unlock()
	if running.ended {
		t.Fatal("the run is ending: no new temporary directory")
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	running.dirs = append(running.dirs, d)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// forward copies between stdin/stdout (a guest's connection) and a TCP
// connection to addr, until either side ends.
func forward(addr string) int {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guestfwd:", err)
		return 1
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(c, os.Stdin); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(os.Stdout, c); os.Stdout.Close(); done <- struct{}{} }()
	<-done
	<-done
	return 0
}

// assets is what the node VM boots: QEMU (hack/vm-assets.sh) and the node
// image (hack/node-image.sh), or the test skips saying why.
type assets struct {
	qemu  string // the wrapper that execs qemu-system-x86_64
	image string // disk.img, vmlinuz, initrd.img
}

func findAssets(t *testing.T) assets {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: not root: the end-to-end tests run as root (make e2e-node)")
	}
	var a assets
	vmDir := os.Getenv("HOTPLUGD_VM_ASSETS")
	if vmDir == "" {
		out, err := exec.Command(filepath.Join(repoRoot, "hack", "vm-assets.sh"), "--check").Output()
		if err != nil {
			t.Skip("SKIPPED: no QEMU: run hack/vm-assets.sh once (~25 s), or make e2e-node")
		}
		vmDir = strings.TrimSpace(string(out))
	}
	a.qemu = filepath.Join(vmDir, "qemu")
	a.image = os.Getenv("HOTPLUGD_NODE_IMAGE")
	if a.image == "" {
		out, err := exec.Command(filepath.Join(repoRoot, "hack", "node-image.sh"), "--check").Output()
		if err != nil {
			t.Skip("SKIPPED: no node image: run hack/node-image.sh once (a few minutes, Debian packages into ~/.cache/hotplugd/vm), or make e2e-node")
		}
		a.image = strings.TrimSpace(string(out))
	}
	for _, f := range []string{a.qemu, filepath.Join(a.image, "disk.img"), filepath.Join(a.image, "vmlinuz"), filepath.Join(a.image, "initrd.img")} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("SKIPPED: %v: run make e2e-node", err)
		}
	}
	return a
}

// node is one node VM's disk and what its boots share: each boot is a new
// QEMU on the same disk, as a machine powered off and on again.
type node struct {
	t      *testing.T
	assets assets
	dir    string
	disk   string
	boots  int
	// kubeletVersion is the node's /usr/bin/kubelet's version, asked once
	// (kubeletVersion).
	kubeletVersion string
}

// newNode copies the node image (the disk sparse, the kernel and the
// initramfs) into a temporary directory, which the node's boots use.
func newNode(t *testing.T, a assets) *node {
	t.Helper()
	dir := tempDir(t, "hotplugd-node-")
	disk := filepath.Join(dir, "disk.img")
	start := time.Now()
	// The kernel and initramfs too: every boot reads them, and
	// hack/node-image.sh removes an older image from the cache when it
	// builds a new one (another checkout's run may still be booting).
	for _, f := range []string{"disk.img", "vmlinuz", "initrd.img"} {
		if out, err := exec.Command("cp", "--sparse=always", filepath.Join(a.image, f), filepath.Join(dir, f)).CombinedOutput(); err != nil {
			t.Fatalf("copying the node image's %s: %v\n%s", f, err, out)
		}
	}
	t.Logf("disk, kernel and initramfs copied in %v", time.Since(start).Round(time.Millisecond))
	a.image = dir
	return &node{t: t, assets: a, dir: dir, disk: disk}
}

// vm is one boot of the node: QEMU, its QMP socket and the agent.
type vm struct {
	t       *testing.T
	n       *node
	cmd     *exec.Cmd
	qmp     *qemutest.QMP
	console string
	agent   string // http://127.0.0.1:<port>
	kubelet string // https://127.0.0.1:<port>, the guest's 10250
	cpus    int
	start   time.Time
	// booted is QEMU's start to the agent answering.
	booted time.Duration
	exited chan struct{}
	// stderr is QEMU's output (read once it exited).
	stderr *bytes.Buffer
}

// boot starts QEMU with cpus CPUs (room for 5) and 2 GiB of memory (room
// for 4 DIMMs up to 8 GiB) on the node's disk, and waits for the agent.
// QEMU is killed by its PID when the test ends unless powerOff stopped it.
func (n *node) boot(t *testing.T, cpus int) *vm {
	t.Helper()
	n.boots++
	ports := freePorts(t, 2)
	sock := filepath.Join(n.dir, fmt.Sprintf("qmp-%d.sock", n.boots))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	apiPort := clusterPort(t)
	netdev := strings.Join([]string{
		"user", "id=net0", "restrict=on",
		fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:%d", ports[0], guestAgentPort),
		fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:%d", ports[1], guestKubeletPort),
		fmt.Sprintf("guestfwd=tcp:%s-cmd:%s %s 127.0.0.1:%d", apiServerAddr, self, guestfwdArg, apiPort),
	}, ",")
	v := &vm{t: t, n: n, console: filepath.Join(n.dir, fmt.Sprintf("console-%d.log", n.boots)), cpus: cpus,
		agent: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), kubelet: fmt.Sprintf("https://127.0.0.1:%d", ports[1]),
		exited: make(chan struct{})}
	// lpj= presets the delay loop (see test/e2e/vm): a hot-added CPU
	// would otherwise calibrate it for ~2 s under TCG.
	cmdline := "console=ttyS0 root=/dev/vda rw panic=-1 lpj=8000000 memhp_default_state=online_movable"
	// thread=single: one host thread runs every vCPU in turn. With
	// multi-threaded TCG, QEMU 10 aborted in 2 of about 12 runs of this
	// package (system/physmem.c iotlb_to_section: "Assertion
	// `section_index < d->map.sections_nb' failed"), once while the guest
	// kernel probed PCI at boot and once at a CPU device_add: a vCPU using
	// a TLB entry of the memory map another vCPU had just changed. On this
	// 2-core host the guest's vCPUs never had a core each anyway. (The
	// nested VM of test/e2e/vm keeps multi-threaded TCG: it unplugs a CPU,
	// and with one thread QEMU 10 aborts at the unplug, "qemu_thread_join:
	// Resource deadlock avoided"; this node only adds CPUs.)
	v.cmd = exec.Command(n.assets.qemu,
		"-accel", "tcg,thread=single", "-cpu", "qemu64", "-m", "2G,slots=4,maxmem=10G", "-smp", fmt.Sprintf("%d,maxcpus=6", cpus),
		"-display", "none", "-nodefaults", "-no-reboot", "-serial", "file:"+v.console, "-monitor", "none",
		"-kernel", filepath.Join(n.assets.image, "vmlinuz"), "-initrd", filepath.Join(n.assets.image, "initrd.img"),
		"-append", cmdline,
		"-drive", "file="+n.disk+",if=virtio,format=raw,cache=unsafe",
		"-netdev", netdev, "-device", "virtio-net-pci,netdev=net0,romfile=", // no iPXE ROM: no network boot
		"-qmp", "unix:"+sock+",server=on,wait=off")
	stderr := new(bytes.Buffer)
	v.stderr = stderr
	v.cmd.Stdout, v.cmd.Stderr = stderr, stderr
	// Should the test binary die without its cleanups, the kernel kills
	// QEMU.
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	v.start = time.Now()
	running.mu.Lock()
	if running.ended {
		running.mu.Unlock()
		t.Fatal("the run is ending: no new VM")
	}
	if err := v.cmd.Start(); err != nil {
		running.mu.Unlock()
		t.Fatal(err)
	}
	if running.vms == nil {
		running.vms = map[*vm]bool{}
	}
	running.vms[v] = true
	running.mu.Unlock()
	go func() { v.cmd.Wait(); close(v.exited) }()
	// Killed when the whole test ends, not t (a subtest may boot the VM
	// the next one uses).
	n.t.Cleanup(v.kill)
	if v.qmp, err = qemutest.Dial(sock, 30*time.Second); err != nil {
		t.Fatalf("%v\nQEMU: %s", err, stderr.String())
	}
	n.t.Cleanup(v.qmp.Close)
	deadline := time.Now().Add(bootTimeout)
	for {
		if _, err := v.get("/ping"); err == nil {
			break
		}
		select {
		case <-v.exited:
			t.Fatalf("QEMU exited during boot: %v\nQEMU: %s\nconsole:\n%s", v.cmd.ProcessState, stderr.String(), v.consoleTail(60))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest agent did not answer within %v; console:\n%s", bootTimeout, v.consoleTail(60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	v.booted = time.Since(v.start)
	state := v.run("systemctl", "is-system-running", "--wait")
	t.Logf("boot %d (%d CPUs): QEMU start to the agent %v, to systemd %s %v", n.boots, cpus,
		v.booted.Round(time.Millisecond), strings.TrimSpace(state.Stdout), time.Since(v.start).Round(time.Millisecond))
	if strings.TrimSpace(state.Stdout) != "running" {
		t.Logf("failed units:\n%s", v.run("systemctl", "--failed", "--no-legend").Stdout)
	}
	return v
}

// powerOff shuts the guest down (systemctl poweroff) and waits for QEMU
// to exit.
func (v *vm) powerOff() {
	v.t.Helper()
	start := time.Now()
	v.runAsync("systemctl", "poweroff")
	select {
	case <-v.exited:
		v.t.Logf("powered off in %v", time.Since(start).Round(time.Millisecond))
	case <-time.After(2 * time.Minute):
		v.t.Fatalf("QEMU still running 2m after systemctl poweroff; console:\n%s", v.consoleTail(40))
	}
	v.kill()
}

// kill ends QEMU by its PID unless it exited.
func (v *vm) kill() {
	running.mu.Lock()
	delete(running.vms, v)
	running.mu.Unlock()
	select {
	case <-v.exited:
		return
	default:
	}
	v.cmd.Process.Kill()
	<-v.exited
}

// consoleTail is the last n lines of the serial console.
func (v *vm) consoleTail(n int) string {
	b, _ := os.ReadFile(v.console)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// reply is the agent's answer to a command.
type reply struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	Code   int    `json:"code"`
	Err    string `json:"err"`
}

func (r reply) String() string {
	return fmt.Sprintf("exit %d %s\nstdout:\n%s\nstderr:\n%s", r.Code, r.Err, r.Stdout, r.Stderr)
}

var agentClient = &http.Client{Timeout: 5 * time.Minute}

// exec runs a command in the guest and returns its reply, whatever its
// exit code; an agent that cannot be reached fails the test.
func (v *vm) exec(argv ...string) reply {
	v.t.Helper()
	r, err := v.execErr(argv...)
	if err != nil {
		v.t.Fatalf("guest %q: %v%s", argv, err, v.gone())
	}
	return r
}

// gone says whether QEMU has exited, with its output and the console's
// end, for a failure message.
func (v *vm) gone() string {
	select {
	case <-v.exited:
		return fmt.Sprintf("\nQEMU exited: %v\nQEMU: %s\nconsole:\n%s", v.cmd.ProcessState, v.stderr.String(), v.consoleTail(80))
	case <-time.After(time.Second):
		return "\n(QEMU still runs)"
	}
}

func (v *vm) execErr(argv ...string) (reply, error) {
	body, _ := json.Marshal(map[string]any{"argv": argv, "timeout": "4m"})
	resp, err := agentClient.Post(v.agent+"/exec", "application/json", bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return reply{}, fmt.Errorf("agent: %s: %s", resp.Status, b)
	}
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		return reply{}, fmt.Errorf("agent: %w: %s", err, b)
	}
	return r, nil
}

// run runs a command in the guest that must succeed.
func (v *vm) run(argv ...string) reply {
	v.t.Helper()
	r := v.exec(argv...)
	if r.Code != 0 && !(len(argv) > 1 && argv[0] == "systemctl" && argv[1] == "is-system-running") {
		v.t.Fatalf("guest %q: %s", argv, r)
	}
	return r
}

// sh runs a shell script in the guest that must succeed, and returns its
// standard output.
func (v *vm) sh(script string) string {
	v.t.Helper()
	return v.run("/bin/sh", "-ec", script).Stdout
}

// runAsync starts a command in the guest without waiting for its reply
// (poweroff: the agent may die before answering).
func (v *vm) runAsync(argv ...string) {
	body, _ := json.Marshal(map[string]any{"argv": argv, "timeout": "1m"})
	go func() {
		resp, err := agentClient.Post(v.agent+"/exec", "application/json", bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
	}()
}

// put writes a file in the guest.
func (v *vm) put(path string, data []byte, mode os.FileMode) {
	v.t.Helper()
	u := fmt.Sprintf("%s/file?path=%s&mode=%o", v.agent, url.QueryEscape(path), mode)
	req, err := http.NewRequest(http.MethodPut, u, bytes.NewReader(data))
	if err != nil {
		v.t.Fatal(err)
	}
	resp, err := agentClient.Do(req)
	if err != nil {
		v.t.Fatalf("writing %s in the guest: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		v.t.Fatalf("writing %s in the guest: %s: %s", path, resp.Status, b)
	}
}

// putFile copies a host file into the guest.
func (v *vm) putFile(src, dst string, mode os.FileMode) {
	v.t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		v.t.Fatal(err)
	}
	v.put(dst, b, mode)
}

// get is a GET of the agent.
func (v *vm) get(path string) (string, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(v.agent + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

// fetch is a GET of a URL inside the guest (its loopback services).
func (v *vm) fetch(u string) (string, error) {
	return v.get("/fetch?url=" + url.QueryEscape(u))
}

// cat reads a guest file.
func (v *vm) cat(path string) string {
	v.t.Helper()
	return v.run("cat", path).Stdout
}

// memTotal is the guest's MemTotal in bytes: what the kubelet reports as
// memory capacity.
func (v *vm) memTotal() int64 {
	v.t.Helper()
	b, err := qemutest.MemTotal(v.cat("/proc/meminfo"))
	if err != nil {
		v.t.Fatal(err)
	}
	return b
}

// freePorts returns n free TCP ports of 127.0.0.1.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// waitFor polls cond every interval until it holds or timeout passes;
// false on timeout.
func waitFor(timeout, interval time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
}
