package daemontest

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Package is the import path Build compiles.
const Package = "github.com/hotplugd/hotplugd/cmd/hotplugd"

// Build compiles hotplugd into dir and returns the binary's path. It runs
// `go build` from the working directory, which must be inside the module
// (a test's package directory is).
func Build(dir string) (string, error) {
	return build(filepath.Join(dir, "hotplugd"))
}

// BuildTags is Build with build tags (e.g. "faultinject", which compiles
// in internal/faultpoint's pause points), into dir/hotplugd-<tags>, so that
// it can sit beside the binary Build makes.
func BuildTags(dir string, tags ...string) (string, error) {
	if len(tags) == 0 {
		return Build(dir)
	}
	return build(filepath.Join(dir, "hotplugd-"+strings.Join(tags, "-")), "-tags", strings.Join(tags, ","))
}

func build(binary string, flags ...string) (string, error) {
	args := append(append([]string{"build"}, flags...), "-o", binary, Package)
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("daemontest: building %s: %w", filepath.Base(binary), err)
	}
	return binary, nil
}

// Entry is one JSON log line of the daemon.
type Entry struct {
	Time    time.Time // when the test read it
	Level   string
	Msg     string
	Fields  map[string]any
	Logger  string
	RawLine string
}

// Str returns a field as a string ("" when absent).
func (e Entry) Str(key string) string {
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

// Daemon is a running `hotplugd run`.
type Daemon struct {
	t testing.TB
	// Cmd is the daemon's process.
	Cmd *exec.Cmd
	// MetricsAddr serves /metrics and /healthz.
	MetricsAddr string

	mu      sync.Mutex
	entries []Entry
	cond    *sync.Cond
	exited  bool
}

// Start runs `binary run` with JSON logs on stderr, debug level, metrics on
// a free loopback port and args, as cred (nil: as the test), and waits until
// it logged its first snapshot. It is stopped when t ends.
func Start(t testing.TB, binary string, cred *syscall.Credential, args ...string) *Daemon {
	t.Helper()
	return start(t, binary, cred, nil, args)
}

// StartEnv is Start, as the test, with env (KEY=value) added to the
// daemon's environment (e.g. internal/faultpoint's HOTPLUGD_FAULTPOINT).
func StartEnv(t testing.TB, binary string, env []string, args ...string) *Daemon {
	t.Helper()
	return start(t, binary, nil, env, args)
}

func start(t testing.TB, binary string, cred *syscall.Credential, env, args []string) *Daemon {
	t.Helper()
	addr := FreeAddr(t)
	if !slices.Contains(args, "--standalone") && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--state-dir") }) {
		// The remedy journal of a test's daemon is the test's, never the
		// machine's /var/lib/hotplugd.
		args = append(args, "--state-dir", t.TempDir())
	}
	args = append([]string{"run", "--log-format", "json", "--log-level", "debug", "--metrics-addr", addr}, args...)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(Env(), env...)
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
	d := &Daemon{t: t, Cmd: cmd, MetricsAddr: addr}
	d.cond = sync.NewCond(&d.mu)
	go d.read(stderr)
	t.Cleanup(d.Stop)
	d.WaitFor(10*time.Second, func(e Entry) bool { return e.Msg == "topology" })
	return d
}

// Env is the test's environment without systemd's variables, so a test run
// under systemd does not make the daemon talk to it.
func Env() []string {
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

// ParseEntry parses one line of the daemon's JSON log, read at t. A line
// that is not JSON gives an Entry with only RawLine and Time, and false.
func ParseEntry(line string, t time.Time) (Entry, bool) {
	e := Entry{Time: t, RawLine: line}
	var raw map[string]any
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		return e, false
	}
	e.Level, _ = raw["level"].(string)
	e.Msg, _ = raw["msg"].(string)
	e.Logger, _ = raw["logger"].(string)
	e.Fields = raw
	return e, true
}

func (d *Daemon) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		e, _ := ParseEntry(sc.Text(), time.Now())
		d.mu.Lock()
		d.entries = append(d.entries, e)
		d.cond.Broadcast()
		d.mu.Unlock()
	}
	d.mu.Lock()
	d.exited = true
	d.cond.Broadcast()
	d.mu.Unlock()
}

// Mark returns the number of log entries so far, for Since.
func (d *Daemon) Mark() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}

// Since returns the entries logged after mark.
func (d *Daemon) Since(mark int) []Entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Entry(nil), d.entries[mark:]...)
}

// WaitFor waits for an entry matching match and returns it; the test fails
// with the daemon's log when none comes within timeout.
func (d *Daemon) WaitFor(timeout time.Duration, match func(Entry) bool) Entry {
	d.t.Helper()
	e, ok := d.WaitForFrom(0, timeout, match)
	if !ok {
		d.t.Fatalf("no matching log entry within %v; log:\n%s", timeout, d.Dump())
	}
	return e
}

// WaitForFrom waits for an entry after mark matching match.
func (d *Daemon) WaitForFrom(mark int, timeout time.Duration, match func(Entry) bool) (Entry, bool) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer timer.Stop()
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := mark; ; {
		for ; i < len(d.entries); i++ {
			if match(d.entries[i]) {
				return d.entries[i], true
			}
		}
		if d.exited || time.Now().After(deadline) {
			return Entry{}, false
		}
		d.cond.Wait()
	}
}

// Dump is the daemon's whole log so far.
func (d *Daemon) Dump() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var b strings.Builder
	for _, e := range d.entries {
		b.WriteString(e.RawLine)
		b.WriteByte('\n')
	}
	return b.String()
}

// Wait waits up to timeout for the daemon to exit, on its own or on a
// signal the test sent to d.Cmd.Process, reads its log to the end, and
// returns how it exited. A daemon still running then is an error (and is
// left to Stop). The end of the log is its standard error closing, which
// the daemon's children do not hold (pkg/kubeletctl gives its commands a
// pipe of their own).
func (d *Daemon) Wait(timeout time.Duration) (*os.ProcessState, error) {
	if d.Cmd.ProcessState != nil {
		return d.Cmd.ProcessState, nil
	}
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	})
	defer timer.Stop()
	d.mu.Lock()
	for !d.exited && time.Now().Before(deadline) {
		d.cond.Wait()
	}
	exited := d.exited
	d.mu.Unlock()
	if !exited {
		return nil, fmt.Errorf("daemontest: hotplugd (pid %d) still runs after %v", d.Cmd.Process.Pid, timeout)
	}
	err := d.Cmd.Wait()
	if d.Cmd.ProcessState == nil {
		return nil, fmt.Errorf("daemontest: waiting for hotplugd: %w", err)
	}
	return d.Cmd.ProcessState, nil
}

// Stop ends the daemon by PID: SIGTERM, then SIGKILL after 5 s. It may be
// called more than once.
func (d *Daemon) Stop() {
	if d.Cmd.ProcessState != nil {
		return
	}
	d.Cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
	d.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- d.Cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			d.t.Errorf("hotplugd exited with %v; log:\n%s", err, d.Dump())
		}
	case <-time.After(5 * time.Second):
		d.Cmd.Process.Kill()
		<-done
		d.t.Errorf("hotplugd did not stop on SIGTERM within 5s")
	}
}

// Metric returns the value of one sample from /metrics, e.g.
// `hotplugd_reconciles_total{trigger="uevent"}`; 0 when absent.
func (d *Daemon) Metric(name string) float64 {
	d.t.Helper()
	var v float64
	found := false
	d.scanMetrics(func(line string) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok && !found {
			f, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err != nil {
				d.t.Fatalf("metric %s: %v", name, err)
			}
			v, found = f, true
		}
	})
	return v
}

// scanMetrics calls line for every line of /metrics.
func (d *Daemon) scanMetrics(line func(string)) {
	d.t.Helper()
	resp, err := http.Get("http://" + d.MetricsAddr + "/metrics")
	if err != nil {
		d.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line(sc.Text())
	}
}

// Healthz returns the /healthz status code.
func (d *Daemon) Healthz() int {
	d.t.Helper()
	resp, err := http.Get("http://" + d.MetricsAddr + "/healthz")
	if err != nil {
		d.t.Fatalf("GET /healthz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Requests are hotplugd_api_requests_total summed by verb.
type Requests map[string]float64

// Total is every request.
func (r Requests) Total() float64 {
	var n float64
	for _, v := range r {
		n += v
	}
	return n
}

// Writes counts the requests that change something.
func (r Requests) Writes() float64 {
	return r["create"] + r["update"] + r["patch"] + r["delete"]
}

// Requests reads hotplugd_api_requests_total from /metrics, summed by verb.
func (d *Daemon) Requests() Requests {
	d.t.Helper()
	out := Requests{}
	d.scanMetrics(func(line string) {
		rest, ok := strings.CutPrefix(line, "hotplugd_api_requests_total{")
		if !ok {
			return
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
			d.t.Fatalf("hotplugd_api_requests_total: %v", err)
		}
		out[verb] += v
	})
	return out
}

// FreeAddr is a loopback address with a port that was free just now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// MemoryBlocks lists this machine's memoryN/uevent files; it skips t when
// there are none.
func MemoryBlocks(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/devices/system/memory/memory*/uevent")
	if len(files) == 0 {
		t.Skip("no memory blocks here: cannot send synthetic memory uevents")
	}
	return files
}

// SyntheticUevents writes "online" to memory block uevent files (from
// MemoryBlocks), round robin, until n synthetic uevents are sent. It
// changes nothing on the machine but sends real uevents.
func SyntheticUevents(t testing.TB, files []string, n int) {
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
