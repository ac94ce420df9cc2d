package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the hotplugd built for this test run.
var binary string

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeKubeletEnv); mode != "" {
		os.Exit(fakeKubelet(mode))
	}
	dir, err := os.MkdirTemp("", "hotplugd-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755) // TestIntegrationUnprivileged runs it as nobody
	binary = filepath.Join(dir, "hotplugd")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/hotplugd")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building hotplugd:", err)
		os.Exit(1)
	}
	code := m.Run()
	stopSharedAPIServer()
	os.RemoveAll(dir)
	os.Exit(code)
}

// logEntry is one JSON log line of the daemon.
type logEntry struct {
	Time    time.Time // when the test read it
	Level   string
	Msg     string
	Fields  map[string]any
	Logger  string
	RawLine string
}

func (e logEntry) str(key string) string {
	switch v := e.Fields[key].(type) {
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	case nil:
		return ""
	default:
		return fmt.Sprint(v)
	}
}

// daemonProc is a running `hotplugd run`.
type daemonProc struct {
	t           testing.TB
	cmd         *exec.Cmd
	metricsAddr string

	mu      sync.Mutex
	entries []logEntry
	cond    *sync.Cond
	exited  bool
}

// startDaemon runs hotplugd with JSON logs on stderr and metrics on a free
// loopback port, and waits until it logged its first snapshot. It is
// stopped (SIGTERM, then SIGKILL) by PID when the test ends.
func startDaemon(t testing.TB, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonAs(t, nil, extra...)
}

// startDaemonAs is startDaemon with the daemon running under cred (nil: as
// the test).
func startDaemonAs(t testing.TB, cred *syscall.Credential, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonArgs(t, cred, append([]string{"--standalone"}, extra...)...)
}

// startClusterDaemon is startDaemon without --standalone: extra says where
// the API server and the Node are.
func startClusterDaemon(t testing.TB, extra ...string) *daemonProc {
	t.Helper()
	return startDaemonArgs(t, nil, extra...)
}

func startDaemonArgs(t testing.TB, cred *syscall.Credential, extra ...string) *daemonProc {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"run", "--log-format", "json", "--log-level", "debug", "--metrics-addr", addr}, extra...)
	cmd := exec.Command(binary, args...)
	cmd.Env = filteredEnv()
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &daemonProc{t: t, cmd: cmd, metricsAddr: addr}
	p.cond = sync.NewCond(&p.mu)
	go p.read(stderr)
	t.Cleanup(p.stop)
	p.waitFor(10*time.Second, func(e logEntry) bool { return e.Msg == "topology" })
	return p
}

// filteredEnv is the test's environment without systemd's variables, so a
// test run under systemd does not make the daemon talk to it.
func filteredEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NOTIFY_SOCKET=") || strings.HasPrefix(kv, "JOURNAL_STREAM=") ||
			strings.HasPrefix(kv, "WATCHDOG_") || strings.HasPrefix(kv, "LISTEN_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (p *daemonProc) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var raw map[string]any
		e := logEntry{Time: time.Now(), RawLine: line}
		if err := json.Unmarshal([]byte(line), &raw); err == nil {
			e.Level, _ = raw["level"].(string)
			e.Msg, _ = raw["msg"].(string)
			e.Logger, _ = raw["logger"].(string)
			e.Fields = raw
		}
		p.mu.Lock()
		p.entries = append(p.entries, e)
		p.cond.Broadcast()
		p.mu.Unlock()
	}
	p.mu.Lock()
	p.exited = true
	p.cond.Broadcast()
	p.mu.Unlock()
}

// mark returns the number of log entries so far, for since().
func (p *daemonProc) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// since returns the entries logged after mark.
func (p *daemonProc) since(mark int) []logEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]logEntry(nil), p.entries[mark:]...)
}

// waitFor waits for an entry matching match and returns it.
func (p *daemonProc) waitFor(timeout time.Duration, match func(logEntry) bool) logEntry {
	p.t.Helper()
	e, ok := p.waitForFrom(0, timeout, match)
	if !ok {
		p.t.Fatalf("no matching log entry within %v; log:\n%s", timeout, p.dump())
	}
	return e
}

// waitForFrom waits for an entry after mark matching match.
func (p *daemonProc) waitForFrom(mark int, timeout time.Duration, match func(logEntry) bool) (logEntry, bool) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer timer.Stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := mark; ; {
		for ; i < len(p.entries); i++ {
			if match(p.entries[i]) {
				return p.entries[i], true
			}
		}
		if p.exited || time.Now().After(deadline) {
			return logEntry{}, false
		}
		p.cond.Wait()
	}
}

func (p *daemonProc) dump() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, e := range p.entries {
		b.WriteString(e.RawLine)
		b.WriteByte('\n')
	}
	return b.String()
}

// stop ends the daemon by PID: SIGTERM, then SIGKILL after 5 s.
func (p *daemonProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			p.t.Errorf("hotplugd exited with %v; log:\n%s", err, p.dump())
		}
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-done
		p.t.Errorf("hotplugd did not stop on SIGTERM within 5s")
	}
}

// metric returns the value of one sample from /metrics, e.g.
// `hotplugd_reconciles_total{trigger="uevent"}`; 0 when absent.
func (p *daemonProc) metric(name string) float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				p.t.Fatalf("metric %s: %v", name, err)
			}
			return v
		}
	}
	return 0
}

// healthz returns the /healthz status code.
func (p *daemonProc) healthz() int {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/healthz")
	if err != nil {
		p.t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// isChange matches the daemon's log entry for a changed capacity resource.
func isChange(resource, old, new string) func(logEntry) bool {
	return func(e logEntry) bool {
		return strings.HasPrefix(e.Msg, "topology changed") && e.str("resource") == resource &&
			e.Fields["numa_node"] == nil && e.str("old") == old && e.str("new") == new
	}
}

// capacityChanges returns the capacity (not per-node) changes among entries.
func capacityChanges(entries []logEntry) []string {
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Msg, "topology changed") && e.Fields["numa_node"] == nil {
			out = append(out, e.str("resource")+": "+e.str("old")+" -> "+e.str("new"))
		}
	}
	return out
}

// memoryBlocks lists this machine's memoryN/uevent files.
func memoryBlocks(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/devices/system/memory/memory*/uevent")
	if len(files) == 0 {
		t.Skip("no memory blocks here: cannot send synthetic memory uevents")
	}
	return files
}

// burst writes "online" to memory block uevent files until n synthetic
// uevents are sent. It changes nothing on the machine but sends real
// uevents.
func burst(t testing.TB, files []string, n int) {
	t.Helper()
	for sent := 0; sent < n; {
		for _, f := range files {
			if sent == n {
				break
			}
			if err := os.WriteFile(f, []byte("online"), 0); err != nil {
				t.Fatalf("synthetic uevent: %v", err)
			}
			sent++
		}
	}
}

func writeFile(path, value string) error {
	return os.WriteFile(path, []byte(value), 0)
}

// apiRequests are hotplugd_api_requests_total by verb.
type apiRequests map[string]float64

func (r apiRequests) total() float64 {
	var n float64
	for _, v := range r {
		n += v
	}
	return n
}

// writes counts the requests that change something.
func (r apiRequests) writes() float64 {
	return r["create"] + r["update"] + r["patch"] + r["delete"]
}

// requests reads hotplugd_api_requests_total from /metrics, summed by verb.
func (p *daemonProc) requests() apiRequests {
	p.t.Helper()
	resp, err := http.Get("http://" + p.metricsAddr + "/metrics")
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := apiRequests{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "hotplugd_api_requests_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		verb := ""
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, `verb="`); ok {
				verb = strings.TrimSuffix(v, `"`)
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			p.t.Fatalf("hotplugd_api_requests_total: %v", err)
		}
		out[verb] += v
	}
	return out
}
