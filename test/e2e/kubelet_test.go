//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"text/template"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubelet is the test's kubelet, run by shell scripts that stand for its
// supervisor (what systemd is to kubelet.service with hotplugd's drop-in):
//
//   - start: appends "start <unix ns>" to the calls file, starts the
//     kubelet with setsid (a session of its own, no terminal signals), its
//     output appended to its log, and writes its PID to the pid file;
//   - stop: appends "stop <unix ns>", sends SIGTERM to that PID and waits
//     for it to exit (SIGKILL after 20 s);
//   - supervised start: the supervisor's start with the drop-in: appends
//     "preflight <unix ns>", runs `hotplugd preflight -- <the kubelet's
//     command line>` with its output appended to the kubelet's log between
//     two marker lines (the second with its exit status), ignores that
//     status (systemd's ExecStartPre=-), then runs the start script;
//   - restart: hotplugd's --kubelet-restart-command: appends "restart
//     <unix ns>", runs the stop script, then the supervised start.
//
// The calls file thus reads "restart, stop, preflight, start" for one
// restart hotplugd asked for, and "stop" or "start" alone for the test's
// own.
type kubelet struct {
	s       *suite
	dir     string
	RootDir string
	Config  string
	// Args is the kubelet's command line as the start script runs it, the
	// binary first: what a unit's ExecStart gives it, and what
	// `hotplugd preflight --` is given.
	Args []string
	// StartScript and StopScript are the scripts' paths;
	// SupervisedStartScript runs hotplugd preflight before StartScript;
	// RestartScript is StopScript, then SupervisedStartScript.
	StartScript, StopScript              string
	SupervisedStartScript, RestartScript string
	log, calls, pidFile                  string
	healthz                              string
	// Started is when the harness started it last.
	Started time.Time
	// Port is its HTTPS port (anonymous, AlwaysAllow): /metrics/probes,
	// /stats/summary.
	Port int
}

// kubeletConfig is the KubeletConfiguration of testing.md §5, plus extra
// (YAML lines at the top level, e.g. the CPU manager policy).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{{.Socket}}
address: 127.0.0.1
port: {{.Port}}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: {{.HealthzPort}}
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
nodeStatusUpdateFrequency: 1s
# The kubelet's own memory threshold, but disk thresholds that only a full
# disk reaches: the disk is the machine's, shared with the suite's build
# caches, and the default imagefs.available<15% evicted the test's pods on
# a machine with 15% free (disk pressure is not what these tests test).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
  imagefs.inodesFree: 1%
podLogsDir: {{.Dir}}/pod-logs
volumePluginDir: {{.Dir}}/volume-plugins
{{.Extra}}`

// aliveFunc is the scripts' test of the process $pid, as kubelet.pid does
// it: it exists and is no zombie, and its command line has this kubelet's
// root directory (it is this kubelet, or setsid about to exec it) or is
// empty (it is in the middle of that exec); not another process that got
// the PID.
const aliveFunc = `{{define "alive"}}alive() {
	state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$state" ] && [ "$state" != Z ] || return 1
	grep -qzxF -- {{q .RootDirArg}} "/proc/$pid/cmdline" 2>/dev/null && return 0
	[ -z "$(tr -d '\000' <"/proc/$pid/cmdline" 2>/dev/null)" ]
}{{end}}`

const startScript = `#!/bin/sh
# Starts the e2e kubelet in the background, detached from this shell and
# its output, and records its PID.
set -eu
if [ -e {{q .NoStart}} ]; then
	echo "the e2e run is being cut short: not starting the kubelet" >&2
	exit 1
fi
{{template "alive" .}}
pid=$(cat {{q .PIDFile}} 2>/dev/null || true)
if [ -n "$pid" ] && alive; then
	echo "kubelet already running (pid $pid)" >&2
	exit 1
fi
now=$(date +%s%N)
echo "start $now" >>{{q .Calls}}
echo "==== e2e: start $now" >>{{q .Log}}
setsid{{range .Args}} {{q .}}{{end}} </dev/null >>{{q .Log}} 2>&1 &
echo $! >{{q .PIDFile}}
`

const stopScript = `#!/bin/sh
# Stops the e2e kubelet by the PID its start script recorded, and returns
# once it has exited.
set -u
echo "stop $(date +%s%N)" >>{{q .Calls}}
{{template "alive" .}}
pid=$(cat {{q .PIDFile}} 2>/dev/null || true)
[ -n "$pid" ] || exit 0
alive || exit 0
kill -TERM "$pid"
i=0
while alive; do
	i=$((i + 1))
	if [ "$i" -eq 400 ]; then kill -KILL "$pid"; fi
	if [ "$i" -gt 500 ]; then echo "kubelet $pid does not exit" >&2; exit 1; fi
	sleep 0.05
done
`

// supervisedStartScript is the kubelet's start as its supervisor makes it
// with hotplugd's drop-in: hotplugd preflight with the kubelet's command
// line, whose exit status is ignored (ExecStartPre=-: preflight never keeps
// the kubelet from starting), then the start. preflight's report goes to
// the kubelet's log, above the kubelet's own words, as in its journal.
const supervisedStartScript = `#!/bin/sh
# Starts the e2e kubelet as its supervisor would with hotplugd's drop-in:
# hotplugd preflight first, its exit status ignored, then the start script.
set -u
if [ -e {{q .NoStart}} ]; then
	echo "the e2e run is being cut short: not starting the kubelet" >&2
	exit 1
fi
now=$(date +%s%N)
echo "preflight $now" >>{{q .Calls}}
echo "==== e2e: preflight $now" >>{{q .Log}}
{{q .Hotplugd}} preflight --{{range .Args}} {{q .}}{{end}} </dev/null >>{{q .Log}} 2>&1
echo "==== e2e: preflight exit $?" >>{{q .Log}}
exec {{q .StartScript}}
`

// restartScript is hotplugd's --kubelet-restart-command: the supervisor's
// restart (systemctl restart kubelet with the drop-in).
const restartScript = `#!/bin/sh
# Restarts the e2e kubelet as its supervisor would: stop, then the
# supervised start (hotplugd preflight, then the start). hotplugd's
# --kubelet-restart-command.
set -u
if [ -e {{q .NoStart}} ]; then
	echo "the e2e run is being cut short: not restarting the kubelet" >&2
	exit 1
fi
echo "restart $(date +%s%N)" >>{{q .Calls}}
{{q .StopScript}} || exit 1
exec {{q .SupervisedStartScript}}
`

// startKubelet starts a kubelet registering nodeName, with extraConfig
// added to its configuration, and waits until its Node shows its
// capacity. The caller holds machinetest's lock. When t ends the kubelet is
// stopped and the host restored (also on SIGINT).
func startKubelet(t *testing.T, s *suite, extraConfig string) *kubelet {
	t.Helper()
	return startKubeletWith(t, s, kubeletSpec{Config: extraConfig})
}

// kubeletSpec is how startKubeletWith starts a kubelet.
type kubeletSpec struct {
	// Config is YAML lines added to its configuration file.
	Config string
	// RootDir is its --root-dir; "" for a directory of its own. One of
	// the test's choosing must be under the run's directory (removed when
	// the run is cut short); it is created, and removed when t ends.
	RootDir string
	// Flags are added to its command line, after the harness's own.
	Flags []string
	// Binary is the kubelet binary; "" for the suite's (the current
	// release's, hack/kubebin.sh).
	Binary string
	// KubeadmLayout puts its root directory at /var/lib/kubelet and its
	// configuration at /var/lib/kubelet/config.yaml, where kubeadm puts
	// them and where hotplugd's DaemonSet mounts them. /var/lib/kubelet
	// must not exist (the machine has no kubelet of its own); it is
	// removed when t ends, and on SIGINT.
	KubeadmLayout bool
}

// kubeadmRoot is the kubelet root directory of KubeadmLayout.
const kubeadmRoot = "/var/lib/kubelet"

// startKubeletWith is startKubelet with the kubelet's root directory and
// extra command-line flags of the test's choosing.
func startKubeletWith(t *testing.T, s *suite, spec kubeletSpec) *kubelet {
	t.Helper()
	deleteNode(t, s)
	// Under the run's directory (not t.TempDir): removed even when the run
	// is cut short.
	dir, err := os.MkdirTemp(s.dir, "kubelet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // after the host restore: registered first
	k := &kubelet{
		s: s, dir: dir, RootDir: filepath.Join(dir, "root"), Config: filepath.Join(dir, "kubelet.yaml"),
		StartScript: filepath.Join(dir, "start-kubelet.sh"), StopScript: filepath.Join(dir, "stop-kubelet.sh"),
		SupervisedStartScript: filepath.Join(dir, "supervised-start-kubelet.sh"), RestartScript: filepath.Join(dir, "restart-kubelet.sh"),
		log: filepath.Join(dir, "kubelet.log"), calls: filepath.Join(dir, "calls"), pidFile: filepath.Join(dir, "kubelet.pid"),
	}
	if spec.KubeadmLayout {
		if _, err := os.Lstat(kubeadmRoot); err == nil {
			t.Skipf("SKIPPED: %s exists: this machine has a kubelet of its own, whose directory the scenario would change", kubeadmRoot)
		}
		// Removed by the host restore: a path the kubelet creates
		// (kubeletHostPaths) that was missing before.
		k.RootDir, k.Config = kubeadmRoot, filepath.Join(kubeadmRoot, "config.yaml")
	} else if spec.RootDir != "" {
		if !strings.HasPrefix(spec.RootDir, s.dir+"/") {
			t.Fatalf("root directory %s is not under the run's directory %s", spec.RootDir, s.dir)
		}
		k.RootDir = filepath.Clean(spec.RootDir)
		t.Cleanup(func() { os.RemoveAll(k.RootDir) }) // after the host restore (the unmount)
	}
	bin := s.kubeletBin
	if spec.Binary != "" {
		bin = spec.Binary
	}
	k.Args = append([]string{bin, "--kubeconfig=" + s.kubeconfig, "--config=" + k.Config, k.rootDirArg(),
		"--cert-dir=" + filepath.Join(dir, "pki"), "--hostname-override=" + nodeName}, spec.Flags...)
	// Recorded before the root directory is made: a /var/lib/kubelet
	// (KubeadmLayout) that was missing is removed when t ends.
	pushHostRestore(t, k.RootDir) // after the kubelet stops: registered first
	for _, d := range []string{k.RootDir, filepath.Join(dir, "pki"), filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	ports := freePorts(t, 2)
	k.healthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])
	k.Port = ports[0]
	data := map[string]any{
		"Socket": s.containerd.Socket, "Port": ports[0], "HealthzPort": ports[1], "Dir": dir, "Extra": spec.Config,
		"Args": k.Args, "RootDirArg": k.rootDirArg(), "Log": k.log, "Calls": k.calls, "PIDFile": k.pidFile,
		"NoStart": s.noStart, "Hotplugd": s.hotplugd, "StartScript": k.StartScript, "StopScript": k.StopScript,
		"SupervisedStartScript": k.SupervisedStartScript,
	}
	writeTemplate(t, k.Config, kubeletConfig, data, 0o644)
	writeTemplate(t, k.StartScript, aliveFunc+startScript, data, 0o755)
	writeTemplate(t, k.StopScript, aliveFunc+stopScript, data, 0o755)
	writeTemplate(t, k.SupervisedStartScript, supervisedStartScript, data, 0o755)
	writeTemplate(t, k.RestartScript, restartScript, data, 0o755)

	stop := emergency.push("stop the kubelet", func() {
		if err := k.run(k.StopScript); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
		}
		if pid, alive := k.pid(); alive { // the script failed: by PID
			syscall.Kill(pid, syscall.SIGKILL)
			k.waitExit(5 * time.Second)
		}
	})
	t.Cleanup(stop)

	k.Started = time.Now()
	if err := k.run(k.StartScript); err != nil {
		t.Fatal(err)
	}
	k.waitReady(t, 60*time.Second)
	return k
}

// run runs one of the scripts, as hotplugd does (/bin/sh -c).
func (k *kubelet) run(script string) error {
	out, err := exec.Command("/bin/sh", "-c", script).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", filepath.Base(script), err, out)
	}
	return nil
}

// Start and Stop run the scripts for the test.
func (k *kubelet) Start(t *testing.T) {
	t.Helper()
	k.Started = time.Now()
	if err := k.run(k.StartScript); err != nil {
		t.Fatal(err)
	}
}

func (k *kubelet) Stop(t *testing.T) {
	t.Helper()
	if err := k.run(k.StopScript); err != nil {
		t.Fatal(err)
	}
}

// pid is the kubelet's PID from the pid file, and whether that process is
// alive: it exists and is no zombie, and its command line has this
// kubelet's root directory (it is this kubelet, or setsid about to exec it)
// or is empty (it is in the middle of that exec).
func (k *kubelet) pid() (int, bool) {
	b, err := os.ReadFile(k.pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil || isZombie(stat) {
		return pid, false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return pid, false
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	return pid, len(cmdline) == 0 || slices.Contains(args, k.rootDirArg())
}

// rootDirArg is the kubelet's --root-dir argument, which tells its process
// apart.
func (k *kubelet) rootDirArg() string { return "--root-dir=" + k.RootDir }

// healthy is whether the kubelet's healthz answers ok.
func (k *kubelet) healthy() bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(k.healthz)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// waitReady waits for the kubelet's healthz and for its Node to exist with
// a capacity; it fails with the end of the kubelet's log when the kubelet
// exits or timeout passes.
func (k *kubelet) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if k.healthy() {
			if n := getNode(t, k.s); n != nil && len(n.Status.Capacity) > 0 {
				return
			}
		}
		if _, alive := k.pid(); !alive {
			t.Fatalf("the kubelet exited at start; end of %s:\n%s", k.log, k.logTail(4000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kubelet is not ready after %v; end of %s:\n%s", timeout, k.log, k.logTail(4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits for the kubelet to exit; false when it still runs after
// timeout.
func (k *kubelet) waitExit(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, alive := k.pid(); !alive {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// logSize is the length of the kubelet's log now, for logSince.
func (k *kubelet) logSize() int {
	b, _ := os.ReadFile(k.log)
	return len(b)
}

// logSince is the kubelet's log from offset on.
func (k *kubelet) logSince(offset int) string {
	b, _ := os.ReadFile(k.log)
	if offset > len(b) {
		return ""
	}
	return string(b[offset:])
}

func (k *kubelet) logTail(n int) string {
	b, _ := os.ReadFile(k.log)
	return tail(b, n)
}

// call is one run of a script: "restart", "stop", "preflight" (the
// supervised start's) or "start", and when.
type call struct {
	what string
	at   time.Time
}

// callsSince are the script runs after t0.
func (k *kubelet) callsSince(t0 time.Time) []call {
	b, _ := os.ReadFile(k.calls)
	var out []call
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		ns, err := strconv.ParseInt(f[1], 10, 64)
		if at := time.Unix(0, ns); err == nil && !at.Before(t0) {
			out = append(out, call{f[0], at})
		}
	}
	return out
}

// countSince counts the script runs named what after t0.
func (k *kubelet) countSince(t0 time.Time, what string) int {
	n := 0
	for _, c := range k.callsSince(t0) {
		if c.what == what {
			n++
		}
	}
	return n
}

// startsSince counts the kubelet starts after t0.
func (k *kubelet) startsSince(t0 time.Time) int { return k.countSince(t0, "start") }

// oneSupervisedRestart says what is wrong ("" when nothing) with the script
// runs after t0 for one restart asked of the supervisor: exactly "restart,
// stop, preflight, start" in that order, nothing else (no stop or start
// of hotplugd's own, no second restart).
func (k *kubelet) oneSupervisedRestart(t0 time.Time) string {
	var got []string
	for _, c := range k.callsSince(t0) {
		got = append(got, c.what)
	}
	if want := []string{"restart", "stop", "preflight", "start"}; !slices.Equal(got, want) {
		return fmt.Sprintf("script runs %v (%s), want %v: one restart of the supervisor's, with preflight in the kubelet's start", got, timeline(k, t0), want)
	}
	return ""
}

// startPreflight is one run of hotplugd preflight by the supervised start,
// as the kubelet's log has it.
type startPreflight struct {
	// exit is its exit status (-1: the run has no end marker).
	exit int
	// report is what it printed: the text report, and warnings.
	report string
}

// preflightsSince are the supervised starts' preflight runs in the
// kubelet's log after offset (logSize).
func (k *kubelet) preflightsSince(offset int) []startPreflight {
	var out []startPreflight
	var cur *startPreflight
	var lines []string
	for _, line := range strings.Split(k.logSince(offset), "\n") {
		switch {
		case strings.HasPrefix(line, "==== e2e: preflight exit "):
			if cur != nil {
				cur.exit, _ = strconv.Atoi(strings.TrimPrefix(line, "==== e2e: preflight exit "))
				cur.report = strings.Join(lines, "\n")
				out = append(out, *cur)
				cur = nil
			}
		case strings.HasPrefix(line, "==== e2e: preflight "):
			cur, lines = &startPreflight{exit: -1}, nil
		case cur != nil:
			lines = append(lines, line)
		}
	}
	if cur != nil {
		cur.report = strings.Join(lines, "\n")
		out = append(out, *cur)
	}
	return out
}

// onePreflight returns the one preflight run in the kubelet's log after
// offset, and fails t when there is not exactly one or it did not end.
func (k *kubelet) onePreflight(t *testing.T, offset int) startPreflight {
	t.Helper()
	runs := k.preflightsSince(offset)
	if len(runs) != 1 || runs[0].exit < 0 {
		t.Fatalf("%d preflight runs in the kubelet's log, want 1 that ended: %+v; the log:\n%s", len(runs), runs, tail([]byte(k.logSince(offset)), 4000))
	}
	return runs[0]
}

// deleteNode removes nodeName and its Events, so that a scenario starts
// from a fresh registration.
func deleteNode(t *testing.T, s *suite) {
	t.Helper()
	ctx := context.Background()
	c := s.api.Client()
	if err := c.CoreV1().Nodes().Delete(ctx, nodeName, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	list, err := c.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + nodeName})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if err := c.CoreV1().Events(e.Namespace).Delete(ctx, e.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); getNode(t, s) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("node %s not deleted after 10s", nodeName)
		}
	}
}

// freePorts returns n distinct loopback ports that were free just now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// writeTemplate executes text with data into path. {{q x}} quotes x for
// the shell.
func writeTemplate(t *testing.T, path, text string, data any, mode os.FileMode) {
	t.Helper()
	tmpl := template.Must(template.New(filepath.Base(path)).Funcs(template.FuncMap{"q": shellQuote}).Parse(text))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(tmpl.Execute(f, data), f.Close())
	if err != nil {
		t.Fatal(err)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
