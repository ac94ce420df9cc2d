//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// staticCPUManagerFlags set the static CPU manager on the kubelet's command
// line, as kubeadm nodes do in KUBELET_EXTRA_ARGS; the configuration file
// the harness writes sets neither.
var staticCPUManagerFlags = []string{"--cpu-manager-policy=static", "--reserved-cpus=0"}

// policyMismatch is the kubelet's refusal of a cpu_manager_state written
// under the static policy when it is configured with none.
const policyMismatch = `configured policy "none" differs from state checkpoint policy "static"`

// TestPreflightArgsPolicyByFlag is scenario 5, first half: a kubelet with
// the static CPU manager set by flag (--cpu-manager-policy=static
// --reserved-cpus=0) and a configuration file that sets neither, machine
// unchanged. Given the kubelet's own command line after --, preflight finds
// its cpu_manager_state valid, exits 0 and touches nothing, and the kubelet
// starts. The control is what the drop-in gave preflight before it took the
// command line (the configuration file and root directory alone): policy
// none against a static checkpoint, exit 2. Under that drop-in (no "-" on
// its ExecStartPre) it was a kubelet that never started again; under
// today's it is a wrong report above a kubelet that starts.
func TestPreflightArgsPolicyByFlag(t *testing.T) {
	s := setup(t)
	acquireMachine(t)
	k := startFlagStaticKubelet(t, s, kubeletSpec{Flags: staticCPUManagerFlags})
	k.Stop(t)
	before := readStateFiles(t, k)
	const change = "none: static CPU manager by flag, kubelet stopped and started"

	t.Run("config file only", func(t *testing.T) {
		// Not the kubelet's command line: the blocked start of issue 11
		// (before the drop-in's "-" of issue 19), and still a wrong
		// judgement. Files untouched here too (exit 2 never writes).
		run := runPreflight(t, s, "--kubelet-config", k.Config, "--kubelet-root-dir", k.RootDir, "--kubelet-binary", s.kubeletBin)
		if run.code != 2 {
			t.Fatalf("preflight without the kubelet's flags exited %d, want 2 (it read policy none against a static checkpoint); %s", run.code, run)
		}
		res := run.result(t, preflight.CPUManagerState)
		if res.Verdict != preflight.NeedsPerson || !strings.Contains(res.Why, policyMismatch) {
			t.Errorf("cpu_manager_state: verdict %q why %q, want %q with %q", res.Verdict, res.Why, preflight.NeedsPerson, policyMismatch)
		}
		before.unchanged(t, readStateFiles(t, k))
		results.add(result{scenario: "5 kubelet flags (preflight)", side: "preflight --kubelet-config --kubelet-root-dir only (control)", change: change,
			correct: "never: exit 2, " + policyMismatch, restarts: 0, writes: -1, note: "preflight " + seconds(run.took)})
	})

	t.Run("kubelet's arguments", func(t *testing.T) {
		took, run := preflightThenStart(t, s, k)
		if res := run.result(t, preflight.CPUManagerState); res.Verdict != preflight.Valid {
			t.Errorf("cpu_manager_state: verdict %q, want %q; %s", res.Verdict, preflight.Valid, run)
		}
		before.unchanged(t, run.filesAfter)
		results.add(result{scenario: "5 kubelet flags (preflight)", side: "preflight -- <kubelet's arguments>", change: change,
			correct: seconds(took) + " from the start of the preflight to the new kubelet's status", restarts: 1, writes: 0,
			note: "exit 0, files untouched; preflight " + seconds(run.took)})
	})
}

// TestPreflightArgsRootDir is scenario 5, second half: the same kubelet
// with its --root-dir elsewhere (not /var/lib/kubelet, not next to its
// configuration: only its command line names it). Machine unchanged:
// preflight passes and the kubelet starts. Then cpu1 goes offline while the
// kubelet is down: alone it refuses to start; preflight, given the same
// arguments, repairs cpu_manager_state in that root directory and the
// kubelet starts with it.
func TestPreflightArgsRootDir(t *testing.T) {
	s := setup(t)
	m := acquireMachine(t)
	data, err := os.MkdirTemp(s.dir, "data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(data) }) // after the kubelet's cleanups: registered first
	k := startFlagStaticKubelet(t, s, kubeletSpec{RootDir: filepath.Join(data, "kubelet"), Flags: staticCPUManagerFlags})
	k.Stop(t)

	t.Run("machine unchanged", func(t *testing.T) {
		before := readStateFiles(t, k)
		took, run := preflightThenStart(t, s, k)
		if res := run.result(t, preflight.CPUManagerState); res.Verdict != preflight.Valid {
			t.Errorf("cpu_manager_state: verdict %q, want %q; %s", res.Verdict, preflight.Valid, run)
		}
		before.unchanged(t, run.filesAfter)
		results.add(result{scenario: "5 kubelet flags (preflight)", side: "preflight -- <kubelet's arguments>",
			change: "none: as above, --root-dir elsewhere", correct: seconds(took) + " from the start of the preflight to the new kubelet's status", restarts: 1, writes: 0,
			note: "exit 0, files untouched; preflight " + seconds(run.took)})
	})
	k.Stop(t) // the story goes on from a kubelet that is down

	m.SetCPUOnline(t, 1, false)
	const change = "--root-dir elsewhere; kubelet down, cpu1 offlined, kubelet started"

	if !t.Run("kubelet alone", func(t *testing.T) {
		t0 := time.Now()
		k.startRefused(t)
		results.add(result{scenario: "5 kubelet flags (preflight)", side: "kubelet alone", change: change,
			correct: "never: the kubelet exits at start (" + unquoted(cpuMismatch) + ")", restarts: k.startsSince(t0), writes: -1})
	}) {
		return // a kubelet that did not refuse: the repair would prove nothing
	}

	t.Run("preflight", func(t *testing.T) {
		before := readStateFiles(t, k)
		took, run := preflightThenStart(t, s, k)
		res := run.result(t, preflight.CPUManagerState)
		if res.Verdict != preflight.Repaired {
			t.Fatalf("cpu_manager_state: verdict %q, want %q; %s", res.Verdict, preflight.Repaired, run)
		}
		if filepath.Dir(res.Backup) != k.RootDir {
			t.Errorf("backup %q, want one in %s", res.Backup, k.RootDir)
		} else if b, err := os.ReadFile(res.Backup); err != nil || !bytes.Equal(b, before[preflight.CPUManagerState].data) {
			t.Errorf("backup %s does not hold the old file (%v): %s", res.Backup, err, b)
		}
		mem := preflight.MemoryManagerState
		stateFiles{mem: before[mem]}.unchanged(t, stateFiles{mem: run.filesAfter[mem]})
		if got := run.filesAfter[preflight.CPUManagerState].defaultCPUSet(t); got != "0" {
			t.Errorf("cpu_manager_state defaultCpuSet %q after the preflight, want 0", got)
		}
		if got := defaultCPUSet(t, k); got != "0" {
			t.Errorf("cpu_manager_state defaultCpuSet %q once the kubelet runs, want 0", got)
		}
		results.add(result{scenario: "5 kubelet flags (preflight)", side: "preflight -- <kubelet's arguments>", change: change,
			correct: seconds(took) + " from the start of the preflight to the new kubelet's status", restarts: 1, writes: 0,
			note: "cpu_manager_state in the --root-dir repaired to defaultCpuSet 0; preflight " + seconds(run.took)})
	})
}

// startFlagStaticKubelet starts a kubelet as spec says, whose flags set
// the static CPU manager with cpu0 reserved, and checks that it did take
// them: its Node shows 2 CPUs, 1 allocatable, and its cpu_manager_state
// says static, 0-1. It skips unless 2 CPUs are online.
func startFlagStaticKubelet(t *testing.T, s *suite, spec kubeletSpec) *kubelet {
	t.Helper()
	if strings.Contains(spec.Config, "cpuManagerPolicy") || strings.Contains(spec.Config, "reservedSystemCPUs") {
		t.Fatal("the configuration file must not set the CPU manager: the flags do")
	}
	k := startKubeletWith(t, s, spec)
	if n := getNode(t, s); !cpuIs("2")(n) {
		t.Skipf("SKIPPED: needs exactly 2 CPUs online to start with, the kubelet reports capacity %v allocatable %v",
			n.Status.Capacity, n.Status.Allocatable)
	}
	st := readStateFiles(t, k)[preflight.CPUManagerState]
	if !st.exists {
		t.Fatalf("the kubelet wrote no %s in %s", preflight.CPUManagerState, k.RootDir)
	}
	var cp struct {
		PolicyName string `json:"policyName"`
	}
	if err := json.Unmarshal(st.data, &cp); err != nil || cp.PolicyName != "static" || st.defaultCPUSet(t) != "0-1" {
		t.Fatalf("the kubelet started with %v wrote %s (%v), want policy static and defaultCpuSet 0-1", spec.Flags, st.data, err)
	}
	t.Logf("kubelet: %s", strings.Join(k.Args, " "))
	for _, line := range strings.Split(k.logSince(0), "\n") {
		if strings.Contains(line, "deprecated") {
			t.Logf("kubelet: %s", line)
		}
	}
	return k
}

// preflightRun is one run of `hotplugd preflight -o json`.
type preflightRun struct {
	args           []string
	code           int
	report         preflight.Report
	stdout, stderr string
	took           time.Duration
	// filesAfter are the state files right after it (before any kubelet
	// start).
	filesAfter stateFiles
}

func (r preflightRun) String() string {
	return "hotplugd " + strings.Join(r.args, " ") + "\nexit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "stderr:\n" + r.stderr
}

// result is the report's result for file.
func (r preflightRun) result(t *testing.T, file string) preflight.Result {
	t.Helper()
	for _, res := range r.report.Results {
		if res.File == file {
			return res
		}
	}
	t.Fatalf("no %s in the report; %s", file, r)
	return preflight.Result{}
}

// runPreflight runs `hotplugd preflight -o json args...` and decodes its
// report.
func runPreflight(t *testing.T, s *suite, args ...string) preflightRun {
	t.Helper()
	r := preflightRun{args: append([]string{"preflight", "-o", "json"}, args...)}
	cmd := exec.Command(s.hotplugd, r.args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	t0 := time.Now()
	err := cmd.Run()
	r.took = time.Since(t0)
	r.stdout, r.stderr = stdout.String(), stderr.String()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("hotplugd preflight: %v", err)
	}
	if err := json.Unmarshal(stdout.Bytes(), &r.report); err != nil {
		t.Fatalf("preflight's report: %v; %s", err, r)
	}
	t.Logf("preflight took %v, exit %d:\n%s%s", r.took.Round(time.Millisecond), r.code, r.stdout, r.stderr)
	return r
}

// preflightThenStart does what the drop-in does: `hotplugd preflight --
// <the kubelet's command line>`, then the kubelet's start (the drop-in's
// "-" starts it whatever preflight's exit status; here preflight must exit
// 0, which is what it has to find). It requires a report without warnings
// whose files are in the kubelet's root directory, a kubelet that comes up
// and stays up, and a Node status from it with what the machine has now;
// it returns the time from the start of the preflight to that status.
func preflightThenStart(t *testing.T, s *suite, k *kubelet) (time.Duration, preflightRun) {
	t.Helper()
	// The stopped kubelet's Node stays as it left it: "correct" is a
	// status the new kubelet wrote (nothing else writes the Node here).
	var rv0 string
	if n := getNode(t, s); n != nil {
		rv0 = n.ResourceVersion
	}
	t0 := time.Now()
	run := runPreflight(t, s, append([]string{"--"}, k.Args...)...)
	run.filesAfter = readStateFiles(t, k)
	if run.code != 0 {
		t.Fatalf("preflight exited %d, want 0: the kubelet would not start; %s", run.code, run)
	}
	// A warning means it could not judge (and exit 0 proves nothing).
	if strings.TrimSpace(run.stderr) != "" {
		t.Errorf("preflight warned; %s", run)
	}
	for _, res := range run.report.Results {
		if want := filepath.Join(k.RootDir, res.File); res.Path != want {
			t.Errorf("preflight checked %s, want %s (the kubelet's --root-dir)", res.Path, want)
		}
		if res.File == preflight.MemoryManagerState && res.Verdict != preflight.Valid && res.Verdict != preflight.Absent {
			t.Errorf("memory_manager_state: verdict %q, want valid or absent; %s", res.Verdict, run)
		}
	}

	offset := k.logSize()
	k.Start(t)
	want := "2"
	if online, _ := readTrim(cpu1Online); online == "0" {
		want = "1"
	}
	took, n, ok := waitNode(t, s, t0, time.Minute, func(n *v1.Node) bool {
		return n.ResourceVersion != rv0 && cpuIs(want)(n) && k.healthy()
	})
	if !ok {
		t.Fatalf("no Node status with cpu %s from the new kubelet 1 min after the preflight: capacity %v allocatable %v; the kubelet's log:\n%s",
			want, n.Status.Capacity, n.Status.Allocatable, tail([]byte(k.logSince(offset)), 4000))
	}
	t.Logf("preflight start -> the new kubelet healthy and its Node status correct (cpu %s): %v", want, took.Round(time.Millisecond))
	// It keeps running (a kubelet refusing its state exits within 1 s).
	if n, held := holdNode(t, s, 3*time.Second, cpuIs(want)); !held {
		t.Errorf("the Node changed: capacity %v allocatable %v", n.Status.Capacity, n.Status.Allocatable)
	}
	if _, alive := k.pid(); !alive || !k.healthy() {
		t.Fatalf("the kubelet started after the preflight is not running; its log:\n%s", tail([]byte(k.logSince(offset)), 4000))
	}
	timeGoal(t, "preflight start -> Node correct", took, 5*time.Second)
	for name, f := range readStateFiles(t, k) {
		if a := run.filesAfter[name]; !bytes.Equal(a.data, f.data) || !a.modTime.Equal(f.modTime) {
			t.Logf("the kubelet rewrote %s at its start: %s -> %s", name, a.data, f.data)
		}
	}
	return took, run
}

// stateFile is one of the kubelet's state files as read.
type stateFile struct {
	exists  bool
	data    []byte
	modTime time.Time
}

// defaultCPUSet is a cpu_manager_state's defaultCpuSet.
func (f stateFile) defaultCPUSet(t *testing.T) string {
	t.Helper()
	var st struct {
		DefaultCPUSet string `json:"defaultCpuSet"`
	}
	if err := json.Unmarshal(f.data, &st); err != nil {
		t.Fatalf("cpu_manager_state: %v: %s", err, f.data)
	}
	return st.DefaultCPUSet
}

// stateFiles are both state files, and the backups, by name.
type stateFiles map[string]stateFile

// readStateFiles reads the kubelet's state files and lists any
// hotplugd backup in its root directory.
func readStateFiles(t *testing.T, k *kubelet) stateFiles {
	t.Helper()
	out := stateFiles{}
	for _, name := range []string{preflight.CPUManagerState, preflight.MemoryManagerState} {
		p := filepath.Join(k.RootDir, name)
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			out[name] = stateFile{}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = stateFile{exists: true, data: b, modTime: fi.ModTime()}
	}
	backups, _ := filepath.Glob(filepath.Join(k.RootDir, "*.hotplugd-backup-*"))
	for _, b := range backups {
		out[filepath.Base(b)] = stateFile{exists: true}
	}
	return out
}

// unchanged requires now to be f: the same files, bytes and modification
// times, and no backup made.
func (f stateFiles) unchanged(t *testing.T, now stateFiles) {
	t.Helper()
	for name, a := range f {
		b := now[name]
		if a.exists != b.exists || !bytes.Equal(a.data, b.data) || !a.modTime.Equal(b.modTime) {
			t.Errorf("%s changed: before (exists %v, %v) %s; after (exists %v, %v) %s",
				name, a.exists, a.modTime, a.data, b.exists, b.modTime, b.data)
		}
	}
	for name := range now {
		if _, ok := f[name]; !ok {
			t.Errorf("%s appeared in the kubelet's root directory", name)
		}
	}
}
