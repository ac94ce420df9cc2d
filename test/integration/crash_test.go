package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/faultpoint"
	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The crash-safety test (issue 19, "Must show"): a kubelet restart is one
// job of the kubelet's supervisor, with the state-file repair (hotplugd
// preflight) inside the kubelet's start, so nothing of hotplugd's stands
// between the kubelet's stop and its start. hotplugd is killed (SIGKILL)
// or stopped (SIGTERM) at each moment of a remedy: the journal says
// "restarting" and the supervisor is not asked yet; the supervisor's
// restart is done and the journal still says "restarting"; the kubelet's
// healthz answered and the Node is being checked; and, while the restart
// job runs, with preflight inside it. preflight itself is killed inside
// its atomic write of a state file. After each: the kubelet runs; its
// state files were never torn (the old file with a backup, or the file
// valid for the machine) and end valid for the machine; the supervisor was
// asked for exactly one restart; the next hotplugd settles what the first
// left under way (remediated, or interrupted when the restart was never
// asked for) without stopping or restarting the kubelet for it.
//
// Each "node" of the test is a fixture machine of its own
// (internal/fixturegen) that changes every trial (crashShape: 4 CPUs and 3
// by turns, memory growing), a Node on the shared API server, a kubelet
// root directory with cpu_manager_state (static policy,
// reservedSystemCPUs "0") and memory_manager_state (Static policy), a
// remedy journal of its own, and a fake kubelet: a real long-running
// process, run as <dir>/bin/kubelet --config ... --root-dir ... (hotplugd
// discovers it in the fixture's procfs, where its /proc/<pid> is linked),
// that like the kubelet reads the machine and both state files once at
// its start and refuses to start (exits 2, saying why; 3 when a file does
// not even parse: torn) when a file does not verify for the machine
// (pkg/cpumgr, pkg/memmgr, with the kubelet's configuration), else serves
// its healthz, reports the machine on its Node and runs until stopped.
//
// Its supervisor is a service manager in the test process (a unix socket,
// like systemd's), with systemd's Restart=always: a kubelet that exits
// when it was not stopped is started again after crashRestartDelay, each
// start (also those) preceded by hotplugd preflight whose failure never
// stops it (systemd's ExecStartPre=-). hotplugd's --kubelet-restart-command
// is a script: stop, preflight (|| true), start, the start waiting until
// the kubelet is up or has refused, as systemctl does for a Type=notify
// unit. The manager being the kubelet's parent, nothing is left as a
// zombie on a machine whose PID 1 reaps none.

// The helper processes the test binary becomes (see init).
const (
	crashHelperEnv     = "HOTPLUGD_CRASH_HELPER" // crashHelperKubelet, or "start"/"stop" (the control commands)
	crashHelperKubelet = "kubelet"
	crashSocketEnv     = "HOTPLUGD_CRASH_SOCKET"
	crashMachineEnv    = "HOTPLUGD_CRASH_MACHINE"
	crashKubeconfigEnv = "HOTPLUGD_CRASH_KUBECONFIG"
	crashNodeEnv       = "HOTPLUGD_CRASH_NODE"
	// crashTrialsEnv overrides the number of SIGKILL trials per moment
	// (SIGTERM trials: a fifth of it, at least one).
	crashTrialsEnv = "HOTPLUGD_CRASH_TRIALS"
)

// The fake kubelet's exit statuses at its start.
const (
	crashExitRefused = 2 // a state file does not verify for the machine
	crashExitTorn    = 3 // a state file does not parse: a torn write
)

// init turns the test binary into one of the crash test's helpers before
// TestMain builds anything: the fake kubelet, or the command that asks the
// test's service manager to start or stop it.
func init() {
	switch h := os.Getenv(crashHelperEnv); h {
	case "":
	case crashHelperKubelet:
		os.Exit(crashKubelet())
	default:
		os.Exit(crashControl(h))
	}
}

// The crash test's shape: SIGKILLs and SIGTERMs per moment (make test runs
// a few per moment; HOTPLUGD_CRASH_TRIALS=20 or more for the figures),
// nodes run in parallel, how long a node has to converge, how long a
// SIGTERM trial holds hotplugd at its fault point, the supervisor's
// restart delay, and hotplugd's --remedy-timeout (which bounds how long
// the next hotplugd takes to find that a restart was never carried out).
const (
	crashKills        = 6
	crashTerms        = 2
	crashNodes        = 4
	crashConverge     = 30 * time.Second
	crashTermHold     = 300 * time.Millisecond
	crashJobHold      = time.Second
	crashRestartDelay = 300 * time.Millisecond
	crashTimeout      = 5 * time.Second
	crashMaxFailures  = 3 // per spec; the rest are skipped, so a bug does not cost an hour
)

// crashTarget is the process a trial signals.
type crashTarget string

const (
	targetHotplugd  crashTarget = "hotplugd"
	targetPreflight crashTarget = "preflight"
)

// crashMoment is where a trial signals what.
type crashMoment struct {
	target crashTarget
	// point is internal/faultpoint's point the target (hotplugd, or
	// preflight in the restart command hotplugd runs) pauses at.
	point string
}

func (m crashMoment) String() string { return string(m.target) + "@" + m.point }

// crashMoments are the remedy's moments, in its order: hotplugd before it
// asks the supervisor, hotplugd while the restart job runs (preflight
// holds crashJobHold inside its write, then goes on), preflight inside its
// write, hotplugd after the supervisor's restart, hotplugd during the
// verification.
var crashMoments = []crashMoment{
	{targetHotplugd, faultpoint.RemedyRestarting},
	{targetHotplugd, faultpoint.StateFileWrite},
	{targetPreflight, faultpoint.StateFileWrite},
	{targetHotplugd, faultpoint.RemedyRestarted},
	{targetHotplugd, faultpoint.RemedyVerifying},
}

// crashKubeletConfig: static CPU manager with cpu0 reserved, Static memory
// manager (reservedMemory = systemReserved + the default hard eviction
// threshold, as the kubelet requires); the healthz address is each node's.
const crashKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cpuManagerPolicy: static
reservedSystemCPUs: "0"
memoryManagerPolicy: Static
systemReserved:
  memory: 200Mi
reservedMemory:
- numaNode: 0
  limits:
    memory: 300Mi
`

// crashKubeletVersion is the kubelet release whose rules hotplugd,
// preflight and the fake kubelet apply.
const crashKubeletVersion = "v1.36.3"

// TestIntegrationCrash: SIGKILL and SIGTERM at each moment of a remedy
// (crashMoments), crashKills and crashTerms trials per moment, each on a
// machine that changed since the kubelet started (both state files need a
// repair). A trial converges when the kubelet runs, both state files
// verify for the machine, the Node shows it, the journal has nothing under
// way, the supervisor was asked for exactly one restart in the trial, the
// journal records it as the one restarted attempt (remediated; an attempt
// left before the supervisor was asked is closed as interrupted, not
// restarted), no kubelet start found a torn state file, and the next
// hotplugd, having settled the record, decided nothing more and left the
// kubelet process it found running. The figures (trials, successes, time
// per trial) are logged as a table and as benchmark-style lines.
func TestIntegrationCrash(t *testing.T) {
	srv := sharedAPIServer(t)
	kills, terms := crashKills, crashTerms
	if testing.Short() {
		kills, terms = 2, 1
	}
	if s := os.Getenv(crashTrialsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("$%s=%q: want a positive number of SIGKILL trials per moment", crashTrialsEnv, s)
		}
		kills, terms = n, max(1, n/5)
	}
	faulty := crashFaultyBinary(t)
	fx := newCrashFixture(t)
	kubeconfig := kubeconfigFor(t, srv)
	nodes := make([]*crashNode, crashNodes)
	for i := range nodes {
		nodes[i] = newCrashNode(t, i, srv.Client(), kubeconfig, fx, faulty)
	}

	specs := crashTrials(kills, terms)
	queue := make(chan crashSpec, len(specs))
	for _, s := range specs {
		queue <- s
	}
	close(queue)
	res := newCrashResults()
	began := time.Now()
	// The nodes' subtests run at once from goroutines of their own, not
	// with t.Parallel, which -test.parallel (GOMAXPROCS, 2 here) would cap.
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() {
			t.Run(n.name, func(t *testing.T) {
				for spec := range queue {
					if res.failures(spec) >= crashMaxFailures {
						res.skip(spec)
						continue
					}
					o := n.trial(t, spec)
					res.add(spec, o)
					if !o.ok {
						t.Errorf("%s trial %d on %s: %s", spec, o.seq, n.name, o.why)
						n.reset(t)
					}
				}
				t.Logf("%s: %d trials", n.name, n.seq)
			})
		})
	}
	wg.Wait()
	wall := time.Since(began)
	for _, line := range res.table(len(nodes), wall) {
		t.Log(line)
	}
	for _, s := range res.specs() {
		if r := res.of(s); r.ok != r.trials || r.skipped > 0 {
			t.Errorf("%s: %d of %d trials converged (%d skipped after %d failures), want all", s, r.ok, r.trials+r.skipped, r.skipped, crashMaxFailures)
		}
	}
}

// The hotplugd built with -tags faultinject, once per test binary, beside
// the normal one (TestMain removes both).
var (
	faultyOnce   sync.Once
	faultyBinary string
	faultyErr    error
)

func crashFaultyBinary(t *testing.T) string {
	t.Helper()
	faultyOnce.Do(func() {
		began := time.Now()
		faultyBinary, faultyErr = daemontest.BuildTags(filepath.Dir(binary), "faultinject")
		t.Logf("built hotplugd with -tags faultinject in %v", time.Since(began).Round(time.Millisecond))
	})
	if faultyErr != nil {
		t.Fatal(faultyErr)
	}
	return faultyBinary
}

// crashSpec is one trial's kind: the signal and the moment it is sent at.
type crashSpec struct {
	sig    syscall.Signal
	moment crashMoment
}

func (s crashSpec) String() string { return signalName(s.sig) + "/" + s.moment.String() }

func signalName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// crashTrials is every trial to run, in a shuffled order (fixed seed), so
// that each node meets every moment and signal in turn.
func crashTrials(kills, terms int) []crashSpec {
	var out []crashSpec
	for _, m := range crashMoments {
		for range kills {
			out = append(out, crashSpec{syscall.SIGKILL, m})
		}
		for range terms {
			out = append(out, crashSpec{syscall.SIGTERM, m})
		}
	}
	r := rand.New(rand.NewPCG(19, 19))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// crashMachine is one machine of a node: a fixture (internal/fixturegen)
// in a directory of the node's own, whose proc/ has the node's kubelet
// linked in.
type crashMachine struct {
	name                  string
	dir                   string // holds sys/ and proc/
	snap                  *topology.Snapshot
	capacity, allocatable v1.ResourceList
	// cpuState and memState are the state files a kubelet writes when it
	// starts on it with no pod.
	cpuState, memState []byte
}

func (m *crashMachine) sys() string  { return filepath.Join(m.dir, "sys") }
func (m *crashMachine) proc() string { return filepath.Join(m.dir, "proc") }

// crashShape is a node's machine at its trial seq (0: before the first):
// 4 CPUs and 3 by turns, so that cpu_manager_state needs a repair every
// trial; memory growing by 256 MiB a trial, so that memory_manager_state
// does too, and never shrinking: a memory decrease that no memory uevent
// explains (a fixture machine sends none) is a balloon to hotplugd,
// reported and not remedied.
func crashShape(seq int) (cpus int, memKB uint64) {
	return 4 - seq%2, 4<<20 + uint64(seq)*(256<<10)
}

// newCrashMachine writes the machine of trial seq under dir.
func newCrashMachine(dir string, seq int, cfg *kubeletv1beta1.KubeletConfiguration) (*crashMachine, error) {
	cpus, memKB := crashShape(seq)
	m := &crashMachine{name: fmt.Sprintf("%dcpu-%dMiB", cpus, memKB>>10), dir: filepath.Join(dir, fmt.Sprintf("machine-%d", seq))}
	if err := fixturegen.OneNode(cpus, memKB, 0).WriteDir(m.dir); err != nil {
		return nil, err
	}
	// The uptime, for the kubelet's start time.
	if err := os.Symlink("/proc/uptime", filepath.Join(m.proc(), "uptime")); err != nil {
		return nil, err
	}
	var err error
	if m.snap, err = topology.NewFS(m.sys(), m.proc()).Snapshot(); err != nil {
		return nil, err
	}
	m.capacity = m.snap.Capacity()
	if m.allocatable, err = m.snap.Allocatable(cfg); err != nil {
		return nil, err
	}
	if m.cpuState, m.memState, err = crashStateFiles(m.snap, cfg); err != nil {
		return nil, fmt.Errorf("state files for %s: %w", m.name, err)
	}
	return m, nil
}

// crashFixture is what every node shares: the kubelet's configuration
// (the nodes' own add their healthz address).
type crashFixture struct {
	cfg *kubeletv1beta1.KubeletConfiguration
}

func newCrashFixture(t *testing.T) *crashFixture {
	t.Helper()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "kubelet-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(crashKubeletConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	fx := &crashFixture{}
	var err error
	if fx.cfg, err = kubeletconfig.Load(cfgPath); err != nil {
		t.Fatal(err)
	}
	// The files of one trial's machine must fit it and not the next
	// trial's: every remedy has both to repair.
	var ms []*crashMachine
	for seq := range 3 {
		m, err := newCrashMachine(dir, seq, fx.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	root := t.TempDir()
	for i, m := range ms[:2] {
		writeCrashStateFiles(t, root, m)
		for _, on := range ms[i : i+2] {
			torn, err := verifyCrashStateFiles(root, fx.cfg, on.snap)
			if torn != nil {
				t.Fatal(torn)
			}
			if on == m && err != nil {
				t.Fatalf("the state files written for %s do not verify on it: %v", m.name, err)
			}
			if on != m && (err == nil || !strings.Contains(err.Error(), preflight.CPUManagerState) || !strings.Contains(err.Error(), preflight.MemoryManagerState)) {
				t.Fatalf("the state files written for %s on %s: %v, want both refused", m.name, on.name, err)
			}
		}
	}
	return fx
}

// crashRelease is the kubelet release of crashKubeletVersion.
func crashRelease() (*kubeletversion.Release, error) {
	v, err := kubeletversion.Parse(crashKubeletVersion)
	if err != nil {
		return nil, err
	}
	return kubeletversion.Lookup(v)
}

// crashStateFiles are the files a kubelet with cfg writes when it starts
// on snap without any and admits no pod.
func crashStateFiles(snap *topology.Snapshot, cfg *kubeletv1beta1.KubeletConfiguration) (cpu, mem []byte, err error) {
	rel, err := crashRelease()
	if err != nil {
		return nil, nil, err
	}
	cpu, err = (&cpumgr.State{Format: cpumgr.FormatV2, PolicyName: cpumgr.PolicyStatic, DefaultCPUSet: cpumgr.KubeletCPUs(snap)}).Marshal()
	if err != nil {
		return nil, nil, err
	}
	mcfg, err := memmgr.NewConfig(cfg, snap, "", rel)
	if err != nil {
		return nil, nil, err
	}
	ms, err := memmgr.New(snap, mcfg)
	if err != nil {
		return nil, nil, err
	}
	mem, err = ms.Marshal()
	return cpu, mem, err
}

func writeCrashStateFiles(t testing.TB, root string, m *crashMachine) {
	t.Helper()
	for name, b := range map[string][]byte{preflight.CPUManagerState: m.cpuState, preflight.MemoryManagerState: m.memState} {
		if err := os.WriteFile(filepath.Join(root, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// verifyCrashStateFiles is the kubelet's start-up verdict on both state
// files under root for the machine snap: torn names the files that do not
// even parse (a write that was cut), refused the files the kubelet's CPU
// or memory manager refuses on snap; both nil when it starts with them. A
// missing file is refused here (the trials always have both).
func verifyCrashStateFiles(root string, cfg *kubeletv1beta1.KubeletConfiguration, snap *topology.Snapshot) (torn, refused error) {
	rel, err := crashRelease()
	if err != nil {
		return nil, err
	}
	var torns, refusals []error
	cpuPath := filepath.Join(root, preflight.CPUManagerState)
	if ccfg, err := cpumgr.NewConfig(cfg, snap, cpuPath, rel); err != nil {
		refusals = append(refusals, fmt.Errorf("%s: configuration: %w", preflight.CPUManagerState, err))
	} else if s, err := cpumgr.ReadFile(cpuPath); err != nil {
		if _, perr := cpumgr.Parse(readFileBytes(cpuPath)); perr != nil && !errors.Is(err, os.ErrNotExist) {
			torns = append(torns, fmt.Errorf("%s: %w", preflight.CPUManagerState, err))
		} else {
			refusals = append(refusals, fmt.Errorf("%s: %w", preflight.CPUManagerState, err))
		}
	} else if err := cpumgr.Validate(s, snap, ccfg); err != nil {
		refusals = append(refusals, fmt.Errorf("%s: %w", preflight.CPUManagerState, err))
	}
	memPath := filepath.Join(root, preflight.MemoryManagerState)
	if mcfg, err := memmgr.NewConfig(cfg, snap, memPath, rel); err != nil {
		refusals = append(refusals, fmt.Errorf("%s: configuration: %w", preflight.MemoryManagerState, err))
	} else if s, err := memmgr.ReadFile(memPath); err != nil {
		if _, perr := memmgr.Parse(readFileBytes(memPath)); perr != nil && !errors.Is(err, os.ErrNotExist) {
			torns = append(torns, fmt.Errorf("%s: %w", preflight.MemoryManagerState, err))
		} else {
			refusals = append(refusals, fmt.Errorf("%s: %w", preflight.MemoryManagerState, err))
		}
	} else if err := memmgr.Validate(s, snap, mcfg); err != nil {
		refusals = append(refusals, fmt.Errorf("%s: %w", preflight.MemoryManagerState, err))
	}
	return errors.Join(torns...), errors.Join(refusals...)
}

func readFileBytes(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

// crashNode is one node of the test: its machine (which of its two it is
// now), Node, kubelet and hotplugd's state directory.
type crashNode struct {
	name       string
	fx         *crashFixture
	c          kubernetes.Interface
	node       string
	kubeconfig string
	root       string // the kubelet's root directory
	cfgPath    string // its configuration
	kubeletBin string // the path it runs as: a symlink to the test binary
	stateDir   string // hotplugd's --state-dir
	dir        string // markers, logs, scripts
	faulty     string // hotplugd built with -tags faultinject
	kubelet    *crashKubeletManager
	restart    string // hotplugd's --kubelet-restart-command
	budgetNS   string // its restart budget's namespace
	// cur is the machine now, prev the one before; seq counts the
	// trials.
	cur  atomic.Pointer[crashMachine] // read by the kubelet manager's goroutines
	prev *crashMachine
	seq  int
}

func newCrashNode(t *testing.T, i int, c kubernetes.Interface, kubeconfig string, fx *crashFixture, faulty string) *crashNode {
	t.Helper()
	n := &crashNode{name: fmt.Sprintf("node%d", i), fx: fx, c: c, kubeconfig: kubeconfig,
		root: t.TempDir(), stateDir: t.TempDir(), dir: t.TempDir(), faulty: faulty}
	n.nextMachine(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n.kubeletBin = filepath.Join(n.dir, "bin", "kubelet")
	if err := os.MkdirAll(filepath.Dir(n.kubeletBin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, n.kubeletBin); err != nil {
		t.Fatal(err)
	}
	n.cfgPath = filepath.Join(n.dir, "kubelet-config.yaml")
	_, port, _ := net.SplitHostPort(daemontest.FreeAddr(t))
	if err := os.WriteFile(n.cfgPath, []byte(crashKubeletConfig+"healthzBindAddress: 127.0.0.1\nhealthzPort: "+port+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := n.machine()
	writeCrashStateFiles(t, n.root, m)
	n.node = createNode(t, c, "crash", m.capacity, m.allocatable)
	n.budgetNS = budgetNamespace(t, c, n.node)
	kubeletArgs := []string{"--config", n.cfgPath, "--root-dir", n.root}
	// preflight, as the kubelet's start runs it: the kubelet's command line
	// after "--", the machine as it is now.
	preflightArgs := func(bin string) []string {
		cur := filepath.Join(n.dir, "current")
		return append([]string{bin, "preflight", "--sysfs-root", filepath.Join(cur, "sys"), "--procfs-root", filepath.Join(cur, "proc"),
			"--kubelet-version", crashKubeletVersion, "--", n.kubeletBin}, kubeletArgs...)
	}
	n.kubelet = newCrashKubeletManager(t, crashManagerOptions{
		dir:  n.dir,
		argv: append([]string{n.kubeletBin}, kubeletArgs...),
		env: func() []string {
			return []string{crashMachineEnv + "=" + n.machine().dir, crashKubeconfigEnv + "=" + kubeconfig, crashNodeEnv + "=" + n.node}
		},
		preStart: preflightArgs(binary),
	})
	n.kubelet.SetProcDirs(m.proc())
	ctl := func(op string) string {
		return fmt.Sprintf("GORACE=%s %s=%s %s=%s %s", shellQuote(crashHelperGorace()), crashHelperEnv, op, crashSocketEnv, shellQuote(n.kubelet.socket), shellQuote(self))
	}
	// The restart command: its environment is hotplugd's, so the faulty
	// hotplugd's $HOTPLUGD_FAULTPOINT reaches preflight (the faulty
	// binary: a normal build ignores it).
	var quoted []string
	for _, a := range preflightArgs(faulty) {
		quoted = append(quoted, shellQuote(a))
	}
	n.restart = filepath.Join(n.dir, "restart.sh")
	// It says what it does on its standard output, as service managers'
	// commands do, also after hotplugd is gone.
	script := fmt.Sprintf(`#!/bin/sh
# The kubelet's supervisor restarts it: stop, hotplugd preflight (its
# failure never stops the start), start (waits until the kubelet is up).
log=%[1]s
echo "begin $$ $(date +%%s%%N)" >> "$log"
echo "stopping the kubelet"
%[2]s || { echo "end $$ $(date +%%s%%N) stop-failed" >> "$log"; exit 1; }
echo "checking its state files"
%[3]s >> %[4]s 2>&1 || true
echo "starting the kubelet"
%[5]s
status=$?
echo "end $$ $(date +%%s%%N) $status" >> "$log"
exit $status
`, shellQuote(n.restartLog()), ctl("stop"), strings.Join(quoted, " "), shellQuote(filepath.Join(n.dir, "preflight.log")), ctl("start"))
	if err := os.WriteFile(n.restart, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := n.kubelet.Start(); err != nil {
		t.Fatal(err)
	}
	if why, ok := n.waitConverged(m, crashConverge); !ok {
		t.Fatalf("%s did not start converged: %s", n.name, why)
	}
	return n
}

// crashHelperGorace is $GORACE for the helpers: under -race (make unit)
// the test binary sleeps a second at exit by default, which would add
// seconds to every kubelet stop and start.
func crashHelperGorace() string {
	return strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
}

func (n *crashNode) machine() *crashMachine { return n.cur.Load() }

// nextMachine makes the machine of trial n.seq the node's machine: for
// hotplugd's next start, the kubelet's next start and preflight's
// (through the symlink "current", replaced atomically); the running
// kubelet is linked into its procfs.
func (n *crashNode) nextMachine(t testing.TB) *crashMachine {
	t.Helper()
	m, err := newCrashMachine(n.dir, n.seq, n.fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	n.prev = n.cur.Load()
	n.cur.Store(m)
	tmp := filepath.Join(n.dir, "current.tmp")
	os.Remove(tmp)
	if err := os.Symlink(m.dir, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(n.dir, "current")); err != nil {
		t.Fatal(err)
	}
	if n.kubelet != nil {
		dirs := []string{m.proc()}
		if n.prev != nil {
			dirs = append(dirs, n.prev.proc())
		}
		n.kubelet.SetProcDirs(dirs...)
	}
	return m
}

func (n *crashNode) restartLog() string { return filepath.Join(n.dir, "restarts.log") }

// restarts are the restart commands run so far (begun) and those that have
// ended.
func (n *crashNode) restarts() (begun, ended int) {
	for _, line := range strings.Split(string(readFileBytes(n.restartLog())), "\n") {
		switch {
		case strings.HasPrefix(line, "begin "):
			begun++
		case strings.HasPrefix(line, "end "):
			ended++
		}
	}
	return begun, ended
}

// args are hotplugd's arguments on machine m: the kubelet discovered as a
// process in m's procfs, restarted by the restart command, no daily bound.
func (n *crashNode) args(m *crashMachine) []string {
	return []string{"--node-name", n.node, "--kubeconfig", n.kubeconfig, "--kubelet-version", crashKubeletVersion,
		"--sysfs-root", m.sys(), "--procfs-root", m.proc(), "--resync", "0", "--metrics-addr", "",
		"--remedy", "restart-kubelet", "--settle", "0s", "--remedy-interval", "0s", "--remedy-timeout", crashTimeout.String(),
		"--max-restarts-per-day", "0", "--kubelet-grace", "0s", "--kubelet-poll", "500ms", "--state-dir", n.stateDir,
		"--kubelet-restart-command", n.restart, "--restart-budget-namespace", n.budgetNS}
}

// crashOutcome is one trial's result.
type crashOutcome struct {
	seq int
	ok  bool
	why string
	// cause is a failure's kind, for the table.
	cause string
	// total is from the faulty hotplugd's start to convergence, recovery
	// from the second hotplugd's start.
	total, recovery time.Duration
	// signalled: the signal was sent; journalAtSignal is the journal's
	// phase then, journalAtExit when the faulty hotplugd had exited.
	signalled       bool
	journalAtSignal string
	journalAtExit   string
	// settledBy is the second hotplugd's outcome for the record the
	// faulty one left under way ("": none left); settled the outcomes of
	// the trial's journal entries, in order.
	settledBy, settled string
	kubeletRefused     int
}

// trialMark is what a trial compares against: the state before it.
type trialMark struct {
	restarts int
	attempts int
	torn     int
	backups  map[string]bool
	pid      int
	// files are the state files' contents.
	files map[string][]byte
}

func (n *crashNode) mark() trialMark {
	begun, _ := n.restarts()
	pid, _ := n.kubelet.Running()
	files := map[string][]byte{}
	for _, name := range []string{preflight.CPUManagerState, preflight.MemoryManagerState} {
		files[name] = readFileBytes(filepath.Join(n.root, name))
	}
	return trialMark{restarts: begun, attempts: len(n.attempts()), torn: n.kubelet.Torn(), backups: n.backups(), pid: pid, files: files}
}

// trial flips the machine, starts the faulty hotplugd with the fault
// point of spec's moment, sends spec.sig to the moment's target there, and
// starts a normal hotplugd that must settle the remedy.
func (n *crashNode) trial(t *testing.T, spec crashSpec) (o crashOutcome) {
	n.seq++
	o.seq = n.seq
	before := n.mark()
	m := n.nextMachine(t)
	refusals := n.kubelet.Refusals()
	defer func() { o.kubeletRefused = n.kubelet.Refusals() - refusals }()
	began := time.Now()
	faulty, marker := n.startFaulty(t, spec)
	var recovering *daemonProc
	fail := func(cause, format string, args ...any) crashOutcome {
		o.cause = cause
		o.why = fmt.Sprintf(format, args...) + n.diagnosis(faulty, recovering)
		for _, d := range []*daemonProc{faulty, recovering} {
			if d != nil {
				d.Cmd.Process.Kill()
				d.Wait(5 * time.Second)
			}
		}
		return o
	}
	if err := waitCrashFile(marker, faulty, crashConverge); err != nil {
		if nodeNeverRead(faulty) {
			return fail(causeNodeNeverRead, "the fault point was not reached: %v: %s", err, nodeNeverReadWhy)
		}
		return fail("fault point not reached", "the fault point was not reached: %v", err)
	}
	o.journalAtSignal = n.journalPhase()
	target := faulty.Cmd.Process.Pid
	if spec.moment.point == faultpoint.StateFileWrite {
		// Only preflight writes state files: the process that holds there
		// is preflight, in the restart command, never the daemon.
		pid, argv, err := faultProcess(marker)
		if err != nil {
			return fail("fault point", "%v", err)
		}
		if pid == faulty.Cmd.Process.Pid || !slices.Contains(argv, "preflight") {
			return fail("daemon wrote a state file", "process %d %q holds at %s, want hotplugd preflight in the restart command (the daemon is %d)", pid, argv, spec.moment.point, faulty.Cmd.Process.Pid)
		}
		if spec.moment.target == targetPreflight {
			target = pid
		}
	}
	if why := n.atPoint(spec.moment, before); why != "" {
		return fail("wrong moment", "at %s: %s", spec.moment, why)
	}
	if spec.moment.target == targetPreflight {
		// The supervisor starts the kubelet again (preflight first) only
		// once the files preflight left are looked at.
		n.kubelet.Hold()
		defer n.kubelet.Release()
	}
	if err := syscall.Kill(target, spec.sig); err != nil {
		return fail("signal", "sending %v to %s (pid %d): %v", spec.sig, spec.moment.target, target, err)
	}
	o.signalled = true

	if spec.moment.target == targetPreflight {
		// preflight is gone before its rename: each state file is the
		// machine's old one, one of them with the backup preflight made.
		if err := waitProcessGone(target, crashConverge); err != nil {
			return fail("preflight survived", "%v", err)
		}
		why := n.oldFilesWithBackup(before)
		n.kubelet.Release()
		if why != "" {
			return fail("torn file", "after preflight's %v: %s", spec.sig, why)
		}
		// The kubelet starts on the old files, refuses, and its supervisor
		// starts it again with preflight in its start; the faulty hotplugd
		// verifies that restart, its own.
		if _, ok := faulty.WaitForFrom(0, crashConverge, func(e logEntry) bool { return e.Msg == "remedy done" || e.Msg == "remedy failed" }); !ok {
			return fail("remedy did not end", "hotplugd logged no end of its remedy after preflight's %v", spec.sig)
		}
		if err := faulty.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
			return fail("signal", "SIGTERM: %v", err)
		}
	}
	ps, err := faulty.Wait(crashConverge)
	if err != nil {
		return fail("no exit", "after %v: %v", spec.sig, err)
	}
	if spec.sig == syscall.SIGKILL && spec.moment.target == targetHotplugd {
		if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			return fail("exit status", "hotplugd ended with %v, want killed by SIGKILL", ps)
		}
	} else if ps.ExitCode() != 0 {
		return fail("exit status", "hotplugd exited with %v on SIGTERM, want 0", ps)
	}
	o.journalAtExit = n.journalPhase()
	askedAtExit, _ := n.restarts()
	askedAtExit -= before.restarts

	rec := time.Now()
	recovering = daemontest.Start(t, binary, nil, n.args(m)...)
	if o.journalAtExit != "" {
		// The record left under way is settled first: verified when the
		// restart was asked for, interrupted when it never was (then the
		// kubelet that ran still runs, on its files).
		e, ok := recovering.WaitForFrom(0, crashTimeout+crashConverge, isOutcome)
		if !ok {
			return fail("not settled", "the second hotplugd did not settle the record it found under way")
		}
		// Killed before it asked the supervisor, hotplugd asked nothing;
		// stopped there (SIGTERM), it may ask on its way out (the command
		// goes on, detached); anywhere later, it had asked.
		neverAsked := spec.moment.point == faultpoint.RemedyRestarting && spec.sig == syscall.SIGKILL
		mayBeAsked := spec.moment.point == faultpoint.RemedyRestarting && spec.sig == syscall.SIGTERM
		switch o.settledBy = e.Str("outcome"); {
		case o.settledBy == string(journal.OutcomeRemediated) && !neverAsked:
		case o.settledBy == string(journal.OutcomeInterrupted) && (neverAsked || mayBeAsked):
			if why := n.untouched(before, "the record closed as interrupted"); why != "" {
				return fail("interrupted", "%s", why)
			}
			// It concluded nothing: the drift is remedied, with one
			// restart, and the trial converges as the others do.
		default:
			return fail("settled as "+o.settledBy, "the second hotplugd settled the record %s (%s), want remediated when the supervisor was asked, interrupted when it was never asked", o.settledBy, e.Str("error"))
		}
	}
	// Converged, and the next hotplugd decided nothing more after
	// settling the record.
	deadline := time.Now().Add(crashConverge)
	for {
		why, ok := n.converged(m)
		if ok {
			_, decided := recovering.WaitForFrom(0, 0, isNothingToDo)
			begun, ended := n.restarts()
			switch {
			case !decided:
				ok, why = false, "the second hotplugd has not decided that the kubelet reports the machine"
			case begun != ended:
				ok, why = false, "a restart command has not exited"
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fail("did not converge", "the node did not converge within %v of the second hotplugd's start: %s", crashConverge, why)
		}
		time.Sleep(20 * time.Millisecond)
	}
	o.total, o.recovery = time.Since(began), time.Since(rec)
	pid, _ := n.kubelet.Running()
	if why := n.settled(before, askedAtExit, &o); why != "" {
		return fail("restarts", "%s", why)
	}
	if torn := n.kubelet.Torn() - before.torn; torn > 0 {
		return fail("torn file", "%d kubelet starts found a state file that does not parse", torn)
	}
	// The repair is in the kubelet's start: the kubelet refuses no start,
	// except the one after preflight was stopped inside its write (then
	// its supervisor starts it again, preflight first).
	wantRefusals := 0
	if spec.moment.target == targetPreflight {
		wantRefusals = 1
	}
	if refused := n.kubelet.Refusals() - refusals; refused != wantRefusals {
		return fail("kubelet refused", "the kubelet refused %d starts in the trial, want %d", refused, wantRefusals)
	}
	if err := recovering.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fail("signal", "SIGTERM: %v", err)
	}
	if ps, err := recovering.Wait(crashConverge); err != nil || ps.ExitCode() != 0 {
		return fail("exit status", "the second hotplugd on SIGTERM: %v %v, want exit 0", ps, err)
	}
	if now, ok := n.kubelet.Running(); !ok || now != pid {
		return fail("kubelet restarted", "the kubelet is pid %d (running %v) after the second hotplugd's exit, want %d as it was", now, ok, pid)
	}
	if begun, _ := n.restarts(); begun-before.restarts != 1 {
		return fail("restarts", "%d restarts asked for in the trial, want 1", begun-before.restarts)
	}
	o.ok = true
	return o
}

// untouched says how the kubelet differs from before the trial, after
// what ("" when it does not): it must run as the same process, on the same
// state files, with no restart asked for.
func (n *crashNode) untouched(before trialMark, after string) string {
	var why []string
	if pid, ok := n.kubelet.Running(); !ok || pid != before.pid {
		why = append(why, fmt.Sprintf("the kubelet is pid %d (running %v), was %d", pid, ok, before.pid))
	}
	if begun, _ := n.restarts(); begun != before.restarts {
		why = append(why, fmt.Sprintf("%d restarts asked for", begun-before.restarts))
	}
	for name, b := range before.files {
		if !bytes.Equal(readFileBytes(filepath.Join(n.root, name)), b) {
			why = append(why, name+" changed")
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "after " + after + ": " + strings.Join(why, "; ")
}

// isOutcome matches the end of a remedy or of the record's settlement.
func isOutcome(e logEntry) bool {
	return (e.Msg == "remedy done" || e.Msg == "remedy failed") && e.Str("outcome") != ""
}

// isNothingToDo matches hotplugd's decision that the Node shows the
// machine.
func isNothingToDo(e logEntry) bool {
	return e.Msg == "remedy plan" && strings.HasPrefix(e.Str("plan"), "none: the kubelet reports this machine")
}

// atPoint checks the node at the fault point of moment against what the
// moment is ("": as it should be).
func (n *crashNode) atPoint(moment crashMoment, before trialMark) string {
	phase := n.journalPhase()
	begun, ended := n.restarts()
	done := begun == ended // every restart command asked for has exited
	begun -= before.restarts
	pid, running := n.kubelet.Running()
	switch moment.point {
	case faultpoint.RemedyRestarting:
		if phase != string(journal.PhaseRestarting) || begun != 0 || !running || pid != before.pid {
			return fmt.Sprintf("journal %q, %d restarts asked, kubelet pid %d running %v; want %q, none asked, the kubelet as it was (pid %d)",
				phase, begun, pid, running, journal.PhaseRestarting, before.pid)
		}
	case faultpoint.StateFileWrite:
		if phase != string(journal.PhaseRestarting) || begun != 1 || running {
			return fmt.Sprintf("journal %q, %d restarts asked, kubelet running %v; want %q, one restart asked, the kubelet stopped by it", phase, begun, running, journal.PhaseRestarting)
		}
	case faultpoint.RemedyRestarted:
		if phase != string(journal.PhaseRestarting) || begun != 1 || !done || !running || pid == before.pid {
			return fmt.Sprintf("journal %q, %d restarts asked, kubelet pid %d running %v; want %q, one restart done, a new kubelet", phase, begun, pid, running, journal.PhaseRestarting)
		}
	case faultpoint.RemedyVerifying:
		if phase != string(journal.PhaseVerifying) || begun != 1 || !running || pid == before.pid {
			return fmt.Sprintf("journal %q, %d restarts asked, kubelet pid %d running %v; want %q, one restart done, a new kubelet", phase, begun, pid, running, journal.PhaseVerifying)
		}
	}
	return ""
}

// settled checks the journal entries of the trial: exactly one restarted
// attempt, remediated and the last; before it, only attempts that
// restarted nothing (a record left before the supervisor was asked,
// closed as interrupted). When the faulty hotplugd had asked for the
// restart, the entries hold just that one.
func (n *crashNode) settled(before trialMark, askedAtExit int, o *crashOutcome) string {
	entries := n.attempts()[before.attempts:]
	var outcomes []string
	restarted := 0
	for _, e := range entries {
		outcomes = append(outcomes, string(e.Outcome))
		if e.Restarted {
			restarted++
		}
	}
	o.settled = strings.Join(outcomes, ",")
	switch last := len(entries) - 1; {
	case last < 0:
		return "no journal entry for the trial's remedy"
	case restarted != 1 || !entries[last].Restarted || entries[last].Outcome != journal.OutcomeRemediated:
		return fmt.Sprintf("journal entries %s (restarted: %d), want one restarted attempt, remediated, last", o.settled, restarted)
	case askedAtExit == 1 && last != 0:
		return fmt.Sprintf("journal entries %s: the faulty hotplugd had asked for the restart, want that one attempt only", o.settled)
	}
	for _, e := range entries[:len(entries)-1] {
		if e.Outcome != journal.OutcomeInterrupted {
			return fmt.Sprintf("journal entries %s: before the remedy only interrupted records, want none else", o.settled)
		}
	}
	return ""
}

// oldFilesWithBackup checks the state files after preflight was stopped
// inside its write: each is the file as it was before the trial, and
// preflight left a new backup of one of them with the same bytes.
func (n *crashNode) oldFilesWithBackup(before trialMark) string {
	var why []string
	olds, backups := before.files, before.backups
	backedUp := 0
	for name, want := range olds {
		if got := readFileBytes(filepath.Join(n.root, name)); !bytes.Equal(got, want) {
			why = append(why, fmt.Sprintf("%s is not the old file (%d bytes, want %d): %q", name, len(got), len(want), got))
		}
	}
	for b := range n.backups() {
		if backups[b] {
			continue
		}
		name := strings.SplitN(filepath.Base(b), ".hotplugd-backup-", 2)[0]
		if bytes.Equal(readFileBytes(b), olds[name]) {
			backedUp++
		} else {
			why = append(why, "the backup "+b+" is not the old file")
		}
	}
	if backedUp != 1 {
		why = append(why, fmt.Sprintf("%d new backups of the old files, want 1 (the file preflight was writing)", backedUp))
	}
	return strings.Join(why, "; ")
}

// backups are the state files' backups in the kubelet's root directory.
func (n *crashNode) backups() map[string]bool {
	out := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(n.root, "*.hotplugd-backup-*"))
	for _, f := range files {
		out[f] = true
	}
	return out
}

// startFaulty starts the faultinject hotplugd on the node's machine, with
// the fault point of spec's moment in its environment (and so in its
// restart command's), and returns it and the file created there.
// hotplugd, to be killed, holds there until killed; for SIGTERM,
// crashTermHold; preflight holds until signalled, or crashJobHold when
// hotplugd is signalled while it holds.
func (n *crashNode) startFaulty(t *testing.T, spec crashSpec) (*daemonProc, string) {
	t.Helper()
	marker := filepath.Join(n.dir, fmt.Sprintf("fault-%d", n.seq))
	env := []string{"HOTPLUGD_FAULTPOINT=" + spec.moment.point, "HOTPLUGD_FAULTPOINT_FILE=" + marker}
	switch {
	case spec.moment.point == faultpoint.StateFileWrite && spec.moment.target == targetHotplugd:
		env = append(env, "HOTPLUGD_FAULTPOINT_HOLD="+crashJobHold.String())
	case spec.sig == syscall.SIGTERM && spec.moment.target == targetHotplugd:
		env = append(env, "HOTPLUGD_FAULTPOINT_HOLD="+crashTermHold.String())
	}
	return daemontest.StartEnv(t, n.faulty, env, n.args(n.machine())...), marker
}

// faultProcess finds the process that holds at the fault point whose
// marker file is marker (it has it in its environment) and returned it.
func faultProcess(marker string) (int, []string, error) {
	want := []byte("HOTPLUGD_FAULTPOINT_FILE=" + marker + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil, err
	}
	var found []int
	var argv []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		a := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
		if len(a) == 0 || !strings.HasPrefix(filepath.Base(a[0]), "hotplugd") {
			continue // the restart command's shell and helpers
		}
		if slices.Contains(a, "run") {
			continue // the daemon: it has the variable too
		}
		found, argv = append(found, pid), a
	}
	if len(found) != 1 {
		return 0, nil, fmt.Errorf("%d hotplugd processes other than the daemon with the fault point's marker %s: %v", len(found), marker, found)
	}
	return found[0], argv, nil
}

// waitProcessGone waits until pid has exited and been reaped.
func waitProcessGone(pid int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still there after %v", pid, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// causeNodeNeverRead is a failed trial's cause when a hotplugd never read
// its Node; nodeNeverReadWhy says what that looks like.
const (
	causeNodeNeverRead = "Node never read"
	nodeNeverReadWhy   = "hotplugd never read its Node: pkg/nodepatch logged nothing after \"watching the node\" " +
		"(no drift, no remedy, no verification until the Node changes)"
)

// nodeNeverRead says whether d's node reporter stayed silent for seconds
// after it started watching the Node (it logs the drift, or writes the
// condition, within milliseconds when it reads the Node): it did not
// compare the Node with the machine until something else woke it.
func nodeNeverRead(d *daemonProc) bool {
	entries := d.Since(0)
	i := slices.IndexFunc(entries, func(e logEntry) bool { return e.Msg == "watching the node" })
	if i < 0 {
		return false
	}
	watching := entries[i].Time
	next := slices.IndexFunc(entries[i+1:], func(e logEntry) bool { return e.Logger == "nodepatch" })
	return next < 0 || entries[i+1+next].Time.Sub(watching) > 5*time.Second
}

// waitCrashFile waits for the fault point's marker file, failing early
// when the daemon exits.
func waitCrashFile(path string, d *daemonProc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if _, err := d.Wait(0); err == nil {
			return errors.New("hotplugd exited before it")
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s within %v", filepath.Base(path), timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// converged says whether the node is as the remedy meant it (and if not,
// why): the kubelet runs, both state files verify for m, the Node shows m,
// the journal has nothing under way.
func (n *crashNode) converged(m *crashMachine) (string, bool) {
	if p := n.journalPhase(); p != "" {
		return "the journal has a remedy under way, phase " + p, false
	}
	if _, ok := n.kubelet.Running(); !ok {
		return "the kubelet is not running", false
	}
	torn, refused := verifyCrashStateFiles(n.root, n.fx.cfg, m.snap)
	if err := errors.Join(torn, refused); err != nil {
		return "the state files do not verify for " + m.name + ": " + err.Error(), false
	}
	node, err := n.c.CoreV1().Nodes().Get(context.Background(), n.node, metav1.GetOptions{})
	if err != nil {
		return err.Error(), false
	}
	if d := resourceDiff(m.capacity, node.Status.Capacity); d != "" {
		return "the Node's capacity differs from " + m.name + ": " + d, false
	}
	if d := resourceDiff(m.allocatable, node.Status.Allocatable); d != "" {
		return "the Node's allocatable differs from " + m.name + ": " + d, false
	}
	return "", true
}

func (n *crashNode) waitConverged(m *crashMachine, timeout time.Duration) (string, bool) {
	deadline := time.Now().Add(timeout)
	for {
		why, ok := n.converged(m)
		if ok || time.Now().After(deadline) {
			return why, ok
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// resourceDiff lists the resources of want that got has otherwise.
func resourceDiff(want, got v1.ResourceList) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		w, g := want[name], got[name]
		if w.Cmp(g) != 0 {
			out = append(out, fmt.Sprintf("%s %s, want %s", name, g.String(), w.String()))
		}
	}
	return strings.Join(out, ", ")
}

// journalPhase is the phase of the remedy under way in the journal, ""
// when none.
func (n *crashNode) journalPhase() string {
	j, err := journal.Open(n.stateDir)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	if u := j.Underway(); u != nil {
		return string(u.Phase)
	}
	return ""
}

// attempts are the journal's finished attempts.
func (n *crashNode) attempts() []journal.Entry {
	j, err := journal.Open(n.stateDir)
	if err != nil {
		return nil
	}
	return j.Attempts()
}

// diagnosis is what a failed trial leaves to read: the journal, the
// restart commands, preflight's and the kubelet's logs and both daemons'
// logs.
func (n *crashNode) diagnosis(faulty, recovering *daemonProc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- journal %s: ", filepath.Join(n.stateDir, journal.JournalFile))
	if j, err := journal.Open(n.stateDir); err != nil {
		fmt.Fprintf(&b, "%v\n", err)
	} else {
		a := j.Attempts()
		fmt.Fprintf(&b, "under way %+v; the last attempts of %d: %+v\n", j.Underway(), len(a), a[max(0, len(a)-3):])
	}
	fmt.Fprintf(&b, "--- restart commands (last 6 lines):\n%s\n", lastLines(string(readFileBytes(n.restartLog())), 6))
	fmt.Fprintf(&b, "--- preflight (last 20 lines):\n%s\n", lastLines(string(readFileBytes(filepath.Join(n.dir, "preflight.log"))), 20))
	fmt.Fprintf(&b, "--- kubelet manager and kubelet (last 40 lines):\n%s\n", n.kubelet.LogTail(40))
	files, _ := filepath.Glob(filepath.Join(n.root, "*"))
	fmt.Fprintf(&b, "--- kubelet root: %s\n", strings.Join(files, " "))
	if faulty != nil {
		fmt.Fprintf(&b, "--- hotplugd stopped at the fault point:\n%s", faulty.Dump())
	}
	if recovering != nil {
		fmt.Fprintf(&b, "--- hotplugd started again:\n%s", recovering.Dump())
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// reset brings a node whose trial failed back to a known state for the
// next trials: the kubelet stopped, fresh state files for its machine, no
// journal, the kubelet started, the Node converged.
func (n *crashNode) reset(t *testing.T) {
	t.Helper()
	m := n.machine()
	if err := n.kubelet.Stop(); err != nil {
		t.Fatalf("reset of %s: %v", n.name, err)
	}
	writeCrashStateFiles(t, n.root, m)
	if err := os.Remove(filepath.Join(n.stateDir, journal.JournalFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if err := n.kubelet.Start(); err != nil {
		t.Fatalf("reset of %s: %v", n.name, err)
	}
	if why, ok := n.waitConverged(m, crashConverge); !ok {
		t.Fatalf("reset of %s: %s", n.name, why)
	}
}

// crashManagerOptions configure a crashKubeletManager.
type crashManagerOptions struct {
	dir string // for its log
	// argv is the kubelet's command line, argv[0] the path it runs as.
	argv []string
	// env is added to the kubelet's environment at each start.
	env func() []string
	// preStart is run before each start the manager makes on its own
	// (Restart=always); its failure never stops the start.
	preStart []string
}

// crashKubeletManager is the fake kubelet's service manager: it starts the
// kubelet as its child (so it reaps it) and stops it, each idempotently,
// asked by crashControl over a unix socket, as systemctl asks systemd; a
// kubelet that exits without being stopped is started again after
// crashRestartDelay, with preStart first (systemd's Restart=always and
// ExecStartPre=-).
type crashKubeletManager struct {
	o       crashManagerOptions
	socket  string
	logPath string
	srv     *http.Server

	mu sync.Mutex // one start or stop at a time, as systemd's jobs
	// wanted: started and not stopped since; gen counts the stops, so
	// that an automatic start planned before one is dropped.
	proc     *crashProc
	wanted   bool
	gen      int
	refusals int
	torn     int
	// held: automatic starts wait (Hold, Release).
	held bool
	// dirs are where the kubelet's /proc/<pid> is linked while it runs
	// (the procfs hotplugd reads).
	dirs []string
}

// crashProc is one kubelet process.
type crashProc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once it has exited and been reaped
}

func (p *crashProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func newCrashKubeletManager(t *testing.T, o crashManagerOptions) *crashKubeletManager {
	t.Helper()
	// A short directory of its own: a socket's path has at most 107 bytes.
	sockDir, err := os.MkdirTemp("", "hotplugd-crash-")
	if err != nil {
		t.Fatal(err)
	}
	k := &crashKubeletManager{o: o, socket: filepath.Join(sockDir, "kubelet.sock"), logPath: filepath.Join(o.dir, "kubelet.log")}
	ln, err := net.Listen("unix", k.socket)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /start", func(w http.ResponseWriter, _ *http.Request) { k.answer(w, "start", k.Start) })
	mux.HandleFunc("POST /stop", func(w http.ResponseWriter, _ *http.Request) { k.answer(w, "stop", k.Stop) })
	k.srv = &http.Server{Handler: mux}
	go k.srv.Serve(ln)
	t.Cleanup(func() {
		if err := k.Stop(); err != nil {
			t.Error(err)
		}
		k.srv.Close()
		os.RemoveAll(sockDir)
	})
	return k
}

func (k *crashKubeletManager) answer(w http.ResponseWriter, op string, f func() error) {
	if err := f(); err != nil {
		k.logf("%s failed: %v", op, err)
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	io.WriteString(w, op+": ok\n")
}

// logf appends a line to the kubelet's log, which the kubelet processes
// write to as well.
func (k *crashKubeletManager) logf(format string, args ...any) {
	f, err := os.OpenFile(k.logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s manager: %s\n", time.Now().Format("15:04:05.000000"), fmt.Sprintf(format, args...))
}

// Running returns the kubelet's PID while one runs.
func (k *crashKubeletManager) Running() (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc == nil || k.proc.exited() {
		return 0, false
	}
	return k.proc.cmd.Process.Pid, true
}

// Refusals counts the kubelet starts that refused the state files; Torn
// those that found one that does not parse.
func (k *crashKubeletManager) Refusals() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refusals
}

func (k *crashKubeletManager) Torn() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.torn
}

// Start starts a kubelet unless one runs, and waits until it is up (it
// has verified its state files) or has exited (its reason is in the
// error; it is started again after crashRestartDelay).
func (k *crashKubeletManager) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wanted = true
	if k.proc != nil && !k.proc.exited() {
		k.logf("start: already running (pid %d)", k.proc.cmd.Process.Pid)
		return nil
	}
	return k.startLocked()
}

func (k *crashKubeletManager) startLocked() error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(k.logPath, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := &exec.Cmd{Path: self, Args: k.o.argv}
	cmd.Env = append(append(daemontest.Env(), crashHelperEnv+"="+crashHelperKubelet, "GORACE="+crashHelperGorace()), k.o.env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w} // fd 3: "ready" once the state files verified
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	k.link(pid, k.dirs)
	p := &crashProc{cmd: cmd, done: make(chan struct{})}
	go k.reap(p)
	k.proc = p
	k.logf("start: pid %d", pid)
	ready := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		ready <- string(b)
	}()
	select {
	case s := <-ready:
		if strings.TrimSpace(s) == "ready" {
			return nil
		}
		<-p.done
		k.refusals++
		if cmd.ProcessState.ExitCode() == crashExitTorn {
			k.torn++
		}
		return fmt.Errorf("the kubelet exited at its start (%v): %s", cmd.ProcessState, k.lastLine(pid))
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the kubelet (pid %d) was not up within 30s: killed", pid)
	}
}

// reap waits for the kubelet process p, unlinks it, and when it was not
// stopped, starts the kubelet again after crashRestartDelay, preStart
// first.
func (k *crashKubeletManager) reap(p *crashProc) {
	p.cmd.Wait()
	close(p.done)
	pid := p.cmd.Process.Pid
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, d := range k.dirs {
		os.Remove(filepath.Join(d, strconv.Itoa(pid)))
	}
	if k.proc != p || !k.wanted {
		return
	}
	k.logf("pid %d exited (%v): starting it again in %v", pid, p.cmd.ProcessState, crashRestartDelay)
	gen := k.gen
	var auto func()
	auto = func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		if gen != k.gen || !k.wanted || (k.proc != nil && !k.proc.exited()) {
			return
		}
		if k.held {
			time.AfterFunc(crashRestartDelay, auto)
			return
		}
		pre := exec.Command(k.o.preStart[0], k.o.preStart[1:]...)
		pre.Env = daemontest.Env()
		out, err := pre.CombinedOutput()
		k.logf("automatic start: preflight (%v): %s", err, strings.TrimSpace(string(out)))
		if err := k.startLocked(); err != nil {
			k.logf("automatic start: %v", err)
		}
	}
	time.AfterFunc(crashRestartDelay, auto)
}

// SetProcDirs makes dirs the procfs directories the kubelet is linked into
// while it runs; a running kubelet is linked into them now.
func (k *crashKubeletManager) SetProcDirs(dirs ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dirs = dirs
	if k.proc != nil && !k.proc.exited() {
		k.link(k.proc.cmd.Process.Pid, dirs)
	}
}

func (k *crashKubeletManager) link(pid int, dirs []string) {
	for _, d := range dirs {
		if err := os.Symlink(fmt.Sprintf("/proc/%d", pid), filepath.Join(d, strconv.Itoa(pid))); err != nil && !errors.Is(err, os.ErrExist) {
			k.logf("linking pid %d into %s: %v", pid, d, err)
		}
	}
}

// Hold makes automatic starts wait until Release (a test looks at the
// state files a start is about to change).
func (k *crashKubeletManager) Hold() {
	k.mu.Lock()
	k.held = true
	k.mu.Unlock()
}

func (k *crashKubeletManager) Release() {
	k.mu.Lock()
	k.held = false
	k.mu.Unlock()
}

// Stop stops the kubelet if one runs (SIGTERM; SIGKILL after 10 s) and
// waits until it has exited; no automatic start follows.
func (k *crashKubeletManager) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.wanted = false
	k.gen++
	if k.proc == nil || k.proc.exited() {
		k.logf("stop: not running")
		k.proc = nil
		return nil
	}
	p := k.proc
	pid := p.cmd.Process.Pid
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		k.logf("stop: pid %d killed after 10s", pid)
	}
	k.logf("stop: pid %d exited (%v)", pid, p.cmd.ProcessState)
	k.proc = nil
	return nil
}

// lastLine is the last line the kubelet with pid logged.
func (k *crashKubeletManager) lastLine(pid int) string {
	b, _ := os.ReadFile(k.logPath)
	tag := fmt.Sprintf("kubelet %d: ", pid)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if _, rest, ok := strings.Cut(lines[i], tag); ok {
			return rest
		}
	}
	return "(nothing logged)"
}

// LogTail is the end of the kubelet's log.
func (k *crashKubeletManager) LogTail(n int) string {
	return lastLines(string(readFileBytes(k.logPath)), n)
}

// crashControl is the kubelet's stop or start command: it asks the
// manager at $HOTPLUGD_CRASH_SOCKET and exits 0 once it is done.
func crashControl(op string) int {
	sock := os.Getenv(crashSocketEnv)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Post("http://kubelet/"+op, "text/plain", nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet %s: %v\n", op, err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	os.Stdout.Write(body)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}

// crashKubelet is the fake kubelet: it reads its command line, the machine
// and its state files once, as the kubelet does at its start, and refuses
// to start when they do not verify; otherwise it says it is up (fd 3),
// serves its healthz, reports the machine on its Node and runs until
// SIGTERM.
func crashKubelet() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s kubelet %d: %s\n", time.Now().Format("15:04:05.000000"), os.Getpid(), fmt.Sprintf(format, args...))
	}
	k, err := kubeletconfig.FromArgs(os.Args[1:], "/")
	if err != nil {
		logf("%v", err)
		return 1
	}
	machine := os.Getenv(crashMachineEnv)
	snap, err := topology.NewFS(filepath.Join(machine, "sys"), filepath.Join(machine, "proc")).Snapshot()
	if err != nil {
		logf("%v", err)
		return 1
	}
	torn, refused := verifyCrashStateFiles(k.RootDir, k.Config, snap)
	if torn != nil {
		logf("refusing to start on %s: a state file does not parse (torn): %v", filepath.Base(machine), strings.ReplaceAll(torn.Error(), "\n", "; "))
		return crashExitTorn
	}
	if refused != nil {
		logf("refusing to start on %s: %v", filepath.Base(machine), strings.ReplaceAll(refused.Error(), "\n", "; "))
		return crashExitRefused
	}
	if k.HealthzURL != "" {
		addr := strings.TrimSuffix(strings.TrimPrefix(k.HealthzURL, "http://"), "/healthz")
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			logf("healthz: %v", err)
			return 1
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
		go http.Serve(ln, mux)
	}
	ready := os.NewFile(3, "ready")
	fmt.Fprintln(ready, "ready")
	ready.Close()
	alloc, err := snap.Allocatable(k.Config)
	if err != nil {
		logf("%v", err)
		return 1
	}
	rc, err := clientcmd.BuildConfigFromFlags("", os.Getenv(crashKubeconfigEnv))
	if err != nil {
		logf("%v", err)
		return 1
	}
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		logf("%v", err)
		return 1
	}
	logf("started on %s: state files verified", filepath.Base(machine))
	for {
		err := patchStatus(c, os.Getenv(crashNodeEnv), snap.Capacity(), alloc)
		if err == nil {
			break
		}
		logf("reporting the Node: %v", err)
		select {
		case <-sig:
			return 0
		case <-time.After(200 * time.Millisecond):
		}
	}
	logf("reported %s on the Node", filepath.Base(machine))
	<-sig
	logf("stopping")
	return 0
}

// crashResults gathers the trials' outcomes by spec, from every node.
type crashResults struct {
	mu sync.Mutex
	by map[crashSpec]*crashResult
}

type crashResult struct {
	trials, ok, skipped int
	outcomes            []crashOutcome
}

func newCrashResults() *crashResults { return &crashResults{by: map[crashSpec]*crashResult{}} }

func (r *crashResults) get(s crashSpec) *crashResult {
	if r.by[s] == nil {
		r.by[s] = &crashResult{}
	}
	return r.by[s]
}

func (r *crashResults) add(s crashSpec, o crashOutcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.get(s)
	res.trials++
	if o.ok {
		res.ok++
	}
	res.outcomes = append(res.outcomes, o)
}

func (r *crashResults) skip(s crashSpec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.get(s).skipped++
}

func (r *crashResults) failures(s crashSpec) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := r.get(s)
	return res.trials - res.ok
}

func (r *crashResults) of(s crashSpec) crashResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.get(s)
}

// specs are the specs in the table's order.
func (r *crashResults) specs() []crashSpec {
	var out []crashSpec
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		for _, m := range crashMoments {
			out = append(out, crashSpec{sig, m})
		}
	}
	return out
}

// table is the figures: one row per spec, benchmark-style lines, and a
// summary line.
func (r *crashResults) table(nodes int, wall time.Duration) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "signal\tmoment\ttrials\tok\tskipped\tjournal at signal\tjournal after exit\tsettled by the next\tjournal entries\ttrial p50\trecovery p50\trecovery max\tkubelet refusals\tfailures")
	var bench []string
	var trials, ok, skipped int
	var all []time.Duration
	for _, s := range r.specs() {
		res := r.of(s)
		trials += res.trials
		ok += res.ok
		skipped += res.skipped
		var total, rec []time.Duration
		refused := 0
		atSignal, atExit, settledBy, settled, causes := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
		for _, o := range res.outcomes {
			if !o.ok {
				causes[o.cause]++
			}
			refused += o.kubeletRefused
			if !o.signalled {
				continue
			}
			atSignal[orNone(o.journalAtSignal)]++
			atExit[orNone(o.journalAtExit)]++
			if o.ok {
				settledBy[orNone(o.settledBy)]++
				settled[o.settled]++
				total = append(total, o.total)
				rec = append(rec, o.recovery)
			}
		}
		all = append(all, total...)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%v\t%v\t%v\t%d\t%s\n",
			signalName(s.sig), s.moment, res.trials, res.ok, res.skipped, counts(atSignal), counts(atExit), counts(settledBy), counts(settled),
			round(median(total)), round(median(rec)), round(maxOf(rec)), refused, counts(causes))
		bench = append(bench, fmt.Sprintf("BenchmarkIntegrationCrash/%s/%s \t%6d\t%12d ns/trial\t%12d ns/recovery\t%6.1f %%ok",
			signalName(s.sig), s.moment, res.trials, median(total).Nanoseconds(), median(rec).Nanoseconds(), percent(res.ok, res.trials+res.skipped)))
	}
	tw.Flush()
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	lines = append(lines, bench...)
	lines = append(lines, fmt.Sprintf("crash safety: %d of %d trials ok (%.1f%%), %d skipped; median %v per trial; %d nodes in parallel; wall time %v",
		ok, trials+skipped, percent(ok, trials+skipped), skipped, round(median(all)), nodes, wall.Round(time.Millisecond)))
	return lines
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// counts prints a tally as "restarting 12, verifying 3".
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func maxOf(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return slices.Max(d)
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func percent(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// TestIntegrationCrashRecoveryBlind: hotplugd killed during the
// verification of a restart the supervisor carried out (the kubelet runs
// on the repaired state files; the journal says verifying), then started
// again while it cannot reach the API server, so that it cannot see the
// Node. An API server away is not a failed kubelet: the record is closed
// as unverified, and the kubelet, which runs, is neither stopped nor
// restarted. Then a hotplugd that reaches the API server finds the node
// converged and restarts nothing.
func TestIntegrationCrashRecoveryBlind(t *testing.T) {
	srv := sharedAPIServer(t)
	faulty := crashFaultyBinary(t)
	fx := newCrashFixture(t)
	kubeconfig := kubeconfigFor(t, srv)
	n := newCrashNode(t, 0, srv.Client(), kubeconfig, fx, faulty)

	n.seq++
	m := n.nextMachine(t)
	d, marker := n.startFaulty(t, crashSpec{syscall.SIGKILL, crashMoment{targetHotplugd, faultpoint.RemedyVerifying}})
	if err := waitCrashFile(marker, d, crashConverge); err != nil {
		t.Fatalf("the fault point was not reached: %v\n%s", err, d.Dump())
	}
	d.Cmd.Process.Kill()
	if _, err := d.Wait(crashConverge); err != nil {
		t.Fatal(err)
	}
	if p := n.journalPhase(); p != string(journal.PhaseVerifying) {
		t.Fatalf("journal phase %q after the kill at %s, want %s", p, faultpoint.RemedyVerifying, journal.PhaseVerifying)
	}
	pid, ok := n.kubelet.Running()
	if !ok {
		t.Fatal("the kubelet is not running after its restart")
	}
	if torn, refused := verifyCrashStateFiles(n.root, fx.cfg, m.snap); torn != nil || refused != nil {
		t.Fatalf("the kubelet was restarted on state files that do not verify: %v", errors.Join(torn, refused))
	}

	// The same hotplugd, but the API server is away: its address is a
	// loopback port nothing listens on.
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	away := filepath.Join(t.TempDir(), "kubeconfig-away")
	if err := os.WriteFile(away, []byte(strings.ReplaceAll(string(b), srv.URL, "https://"+daemontest.FreeAddr(t))), 0o600); err != nil {
		t.Fatal(err)
	}
	const timeout = 2 * time.Second
	args := append(n.args(m), "--kubeconfig", away, "--remedy-timeout", timeout.String())
	blind := daemontest.Start(t, binary, nil, args...)
	e, ok := blind.WaitForFrom(0, timeout+10*time.Second, func(e logEntry) bool { return strings.HasPrefix(e.Msg, "remedy ") && e.Str("outcome") != "" })
	if !ok || e.Str("outcome") != string(journal.OutcomeUnverified) {
		t.Errorf("hotplugd unable to see the Node ended the record %q (%s), want %s%s", e.Str("outcome"), e.Str("error"), journal.OutcomeUnverified, n.diagnosis(nil, blind))
	}
	blind.Stop()
	if now, ok := n.kubelet.Running(); !ok || now != pid {
		t.Errorf("hotplugd, unable to see the Node, stopped or restarted the kubelet: pid %d running %v, was %d%s", now, ok, pid, n.diagnosis(nil, blind))
	}
	if p := n.journalPhase(); p != "" {
		t.Errorf("the journal still has the restart under way (%s)", p)
	}
	if a := n.attempts(); len(a) == 0 || a[len(a)-1].Outcome != journal.OutcomeUnverified || !a[len(a)-1].Restarted {
		t.Errorf("journal attempts %+v, want the restart recorded as unverified (restarted)", a)
	}

	// The API server back: a hotplugd finds the node converged and does
	// nothing.
	again := daemontest.Start(t, binary, nil, n.args(m)...)
	if why, ok := n.waitConverged(m, crashConverge); !ok {
		t.Errorf("the node did not converge once hotplugd could see the Node: %s%s", why, n.diagnosis(nil, again))
	}
	again.WaitFor(crashConverge, isNothingToDo)
	if begun, _ := n.restarts(); begun != 1 {
		t.Errorf("%d restarts asked for, want the one of the killed hotplugd", begun)
	}
	if now, ok := n.kubelet.Running(); !ok || now != pid {
		t.Errorf("the kubelet is pid %d (running %v), want %d as it was", now, ok, pid)
	}
}

// TestIntegrationCrashStaleRecords: records the next hotplugd does not
// verify, and never acts on by a restart.
//   - A record of the earlier design, in which hotplugd stopped the kubelet
//     itself ("stopping"), killed after the stop: the kubelet may be
//     stopped. The next hotplugd would ask the supervisor to start it; a
//     restart command has no start, so it restarts nothing and says, as a
//     RemediationFailed Warning Event, to make sure the kubelet runs; the
//     record is closed as interrupted, not restarted.
//   - A "restarting" record older than 15 minutes: closed as interrupted
//     without verifying it; the running kubelet is left as it is.
func TestIntegrationCrashStaleRecords(t *testing.T) {
	srv := sharedAPIServer(t)
	faulty := crashFaultyBinary(t)
	fx := newCrashFixture(t)
	kubeconfig := kubeconfigFor(t, srv)
	for i, tc := range []struct {
		name        string
		underway    journal.Underway
		stopKubelet bool
		// why is in the entry's Why; event, when set, in a
		// RemediationFailed Event's message.
		why, event string
	}{{
		name:        "legacy stopping, kubelet stopped",
		underway:    journal.Underway{Key: "legacy", Phase: journal.LegacyPhaseStopping, Start: time.Now().Add(-time.Minute), Drift: "capacity cpu 8 -> 4"},
		stopKubelet: true,
		why:         `phase "stopping", and this hotplugd cannot start the kubelet: make sure it runs`,
		event:       "make sure it runs",
	}, {
		name:     "restarting older than 15 minutes",
		underway: journal.Underway{Key: "old", Phase: journal.PhaseRestarting, Start: time.Now().Add(-20 * time.Minute), Drift: "capacity cpu 8 -> 4", Before: &journal.Process{PID: 1, Start: 1}},
		why:      "too old to verify now",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCrashNode(t, i, srv.Client(), kubeconfig, fx, faulty)
			m := n.machine()
			if tc.stopKubelet {
				if err := n.kubelet.Stop(); err != nil {
					t.Fatal(err)
				}
			}
			pid, running := n.kubelet.Running()
			j, err := journal.Open(n.stateDir)
			if err != nil {
				t.Fatal(err)
			}
			if err := j.Begin(tc.underway); err != nil {
				t.Fatal(err)
			}
			d := daemontest.Start(t, binary, nil, n.args(m)...)
			e, ok := d.WaitForFrom(0, crashConverge, func(e logEntry) bool { return strings.HasPrefix(e.Msg, "remedy ") && e.Str("outcome") != "" })
			if !ok || e.Str("outcome") != string(journal.OutcomeInterrupted) || !strings.Contains(e.Str("error"), tc.why) {
				t.Errorf("the record ended %q (%s), want %s saying %q%s", e.Str("outcome"), e.Str("error"), journal.OutcomeInterrupted, tc.why, n.diagnosis(nil, d))
			}
			if tc.event != "" {
				ev := waitEvents(t, n.c, n.node, nodepatch.ReasonRemediationFailed, 1, 10*time.Second)
				if ev[0].Type != v1.EventTypeWarning || !strings.Contains(ev[0].Message, tc.event) {
					t.Errorf("event %s %q, want a Warning saying %q", ev[0].Type, ev[0].Message, tc.event)
				}
			}
			if !tc.stopKubelet {
				d.WaitFor(crashConverge, isNothingToDo)
			}
			d.Stop()
			if begun, _ := n.restarts(); begun != 0 {
				t.Errorf("%d restarts asked for, want none", begun)
			}
			if now, ok := n.kubelet.Running(); ok != running || now != pid {
				t.Errorf("the kubelet is pid %d running %v, want as it was: pid %d running %v", now, ok, pid, running)
			}
			if p := n.journalPhase(); p != "" {
				t.Errorf("the journal still has a remedy under way (%s)", p)
			}
			a := n.attempts()
			if len(a) != 1 || a[0].Outcome != journal.OutcomeInterrupted || a[0].Restarted || a[0].Key != tc.underway.Key {
				t.Errorf("journal attempts %+v, want the record closed as interrupted, not restarted", a)
			}
		})
	}
}

// TestIntegrationOneHotplugdPerStateDir: a second hotplugd on the same
// --state-dir (the systemd unit and the DaemonSet both installed) exits 1
// at once, saying another hotplugd runs and which, and leaves the first
// running; once the first has stopped, it starts.
func TestIntegrationOneHotplugdPerStateDir(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	node := createNode(t, c, "lock", capacity, allocatable)
	state := t.TempDir()
	args := []string{"--node-name", node, "--kubeconfig", kubeconfigFor(t, srv), "--kubelet-config", cfg, "--state-dir", state}
	first := startClusterDaemon(t, args...)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, binary, append([]string{"run", "--log-format", "json", "--metrics-addr", ""}, args...)...)
	second.Env = daemontest.Env()
	out, err := second.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("a second hotplugd on the same --state-dir: %v, want exit status 1; its output:\n%s", err, out)
	}
	for _, want := range []string{journal.ErrLocked.Error(), "process " + strconv.Itoa(first.Cmd.Process.Pid), filepath.Join(state, journal.LockFile)} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the second hotplugd's output does not say %q:\n%s", want, out)
		}
	}
	if _, err := first.Wait(0); err == nil {
		t.Fatalf("the first hotplugd exited; its log:\n%s", first.Dump())
	}
	first.Stop()
	startClusterDaemon(t, args...)
}
