package integration

import (
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
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The crash-safety test (issue 11, "Crash safety of the remedy"): hotplugd
// is killed (SIGKILL) or stopped (SIGTERM) at each phase of a kubelet
// restart, and a hotplugd started again must leave the node as the remedy
// meant to: the kubelet running, both state files fit for the machine, the
// Node showing it, nothing left under way in the journal.
//
// Each "node" of the test is a fixture machine (internal/fixturegen) that
// flips between two shapes every trial (4 CPUs and 4 GiB, 3 CPUs and
// 4.5 GiB), a Node on the shared API server, a kubelet root directory with
// cpu_manager_state (static policy, reservedSystemCPUs "0") and
// memory_manager_state (Static policy), a remedy journal of its own, and a
// fake kubelet: a real long-running process that, like the kubelet, reads
// the machine and both state files once at its start and refuses to start
// (exits 2, saying why) when a file does not verify for the machine
// (pkg/cpumgr, pkg/memmgr, with the kubelet's configuration), else reports
// the machine on its Node and runs until stopped. It is started and stopped
// through a service manager in the test process (a unix socket, like
// systemd's), by stop and start commands that hotplugd runs: both
// idempotent, the start waiting until the kubelet is up or has refused, as
// systemctl does for a Type=notify unit. The manager being the kubelet's
// parent, nothing is left as a zombie on a machine whose PID 1 reaps none.

// The helper processes the test binary becomes (see init).
const (
	crashHelperEnv     = "HOTPLUGD_CRASH_HELPER" // crashHelperKubelet, or "start"/"stop" (the control commands)
	crashHelperKubelet = "kubelet"
	crashSocketEnv     = "HOTPLUGD_CRASH_SOCKET"
	crashMachineEnv    = "HOTPLUGD_CRASH_MACHINE"
	crashConfigEnv     = "HOTPLUGD_CRASH_CONFIG"
	crashRootEnv       = "HOTPLUGD_CRASH_ROOT"
	crashKubeconfigEnv = "HOTPLUGD_CRASH_KUBECONFIG"
	crashNodeEnv       = "HOTPLUGD_CRASH_NODE"
	// crashTrialsEnv overrides the number of SIGKILL trials per phase
	// (SIGTERM trials: a fifth of it, at least one).
	crashTrialsEnv = "HOTPLUGD_CRASH_TRIALS"
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

// The crash test's shape: kills per phase, SIGTERMs per phase, nodes run
// in parallel, and how long a hotplugd started again has to converge.
const (
	crashKills       = 50
	crashTerms       = 10
	crashNodes       = 4
	crashConverge    = 30 * time.Second
	crashTermHold    = 300 * time.Millisecond
	crashMaxFailures = 5 // per signal and phase; the rest are skipped, so a bug does not cost an hour
)

// crashPhases are internal/faultpoint's points, in the remedy's order.
var crashPhases = []string{faultpoint.RemedyStopped, faultpoint.StateFileWrite, faultpoint.RemedyStarted, faultpoint.RemedyVerifying}

// crashKubeletStopped says, per phase, whether the kubelet is stopped at
// the fault point (the definition of the phase).
var crashKubeletStopped = map[string]bool{
	faultpoint.RemedyStopped:   true,
	faultpoint.StateFileWrite:  true,
	faultpoint.RemedyStarted:   false,
	faultpoint.RemedyVerifying: false,
}

// crashKubeletConfig: static CPU manager with cpu0 reserved, Static memory
// manager (reservedMemory = systemReserved + the default hard eviction
// threshold, as the kubelet requires), healthz off (the fake kubelet serves
// nothing).
const crashKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 0
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

// crashKubeletVersion is the kubelet release whose rules hotplugd and the
// fake kubelet apply.
const crashKubeletVersion = "v1.36.3"

// TestIntegrationCrash: SIGKILL of hotplugd at each phase of a kubelet
// restart (after the stop, inside a state-file write, after the start,
// during the verification), crashKills trials per phase, then hotplugd
// started again: the kubelet runs, both state files verify for the
// machine, the Node shows the machine and the journal has nothing under
// way, in every trial. SIGTERM at each phase (crashTerms trials per phase,
// held crashTermHold at the point): hotplugd exits 0 with the kubelet
// running, and the next hotplugd finishes what it left under way. The
// figures (trials, successes, time per trial) are logged as a table and as
// benchmark-style lines.
func TestIntegrationCrash(t *testing.T) {
	srv := sharedAPIServer(t)
	kills, terms := crashKills, crashTerms
	if testing.Short() {
		kills, terms = 5, 2
	}
	if s := os.Getenv(crashTrialsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("$%s=%q: want a positive number of SIGKILL trials per phase", crashTrialsEnv, s)
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

// crashSpec is one trial's kind: the signal and the phase it is sent at.
type crashSpec struct {
	sig   syscall.Signal
	phase string
}

func (s crashSpec) String() string { return signalName(s.sig) + "/" + s.phase }

func signalName(s syscall.Signal) string {
	if s == syscall.SIGKILL {
		return "SIGKILL"
	}
	return "SIGTERM"
}

// crashTrials is every trial to run, in a shuffled order (fixed seed), so
// that each node meets every phase and signal in turn.
func crashTrials(kills, terms int) []crashSpec {
	var out []crashSpec
	for _, p := range crashPhases {
		for range kills {
			out = append(out, crashSpec{syscall.SIGKILL, p})
		}
		for range terms {
			out = append(out, crashSpec{syscall.SIGTERM, p})
		}
	}
	r := rand.New(rand.NewPCG(11, 11))
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// crashMachine is one shape of the fixture machine.
type crashMachine struct {
	name                  string
	dir                   string // holds sys/ and proc/
	snap                  *topology.Snapshot
	capacity, allocatable v1.ResourceList
	// cpuState and memState are state files the kubelet accepts on it
	// (no pinned containers).
	cpuState, memState []byte
}

func (m *crashMachine) sys() string  { return filepath.Join(m.dir, "sys") }
func (m *crashMachine) proc() string { return filepath.Join(m.dir, "proc") }

// crashFixture is what every node shares: the two machines and the
// kubelet's configuration.
type crashFixture struct {
	machines [2]*crashMachine
	cfgPath  string
	cfg      *kubeletv1beta1.KubeletConfiguration
}

func newCrashFixture(t *testing.T) *crashFixture {
	t.Helper()
	dir := t.TempDir()
	fx := &crashFixture{cfgPath: filepath.Join(dir, "kubelet-config.yaml")}
	if err := os.WriteFile(fx.cfgPath, []byte(crashKubeletConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	var err error
	if fx.cfg, err = kubeletconfig.Load(fx.cfgPath); err != nil {
		t.Fatal(err)
	}
	shapes := []struct {
		name  string
		cpus  int
		memKB uint64
	}{{"4cpu-4GiB", 4, 4 << 20}, {"3cpu-4.5GiB", 3, 9 << 19}}
	for i, s := range shapes {
		m := &crashMachine{name: s.name, dir: filepath.Join(dir, s.name)}
		if err := fixturegen.OneNode(s.cpus, s.memKB, 0).WriteDir(m.dir); err != nil {
			t.Fatal(err)
		}
		if m.snap, err = topology.NewFS(m.sys(), m.proc()).Snapshot(); err != nil {
			t.Fatal(err)
		}
		m.capacity = m.snap.Capacity()
		if m.allocatable, err = m.snap.Allocatable(fx.cfg); err != nil {
			t.Fatal(err)
		}
		if m.cpuState, m.memState, err = crashStateFiles(m.snap, fx.cfg); err != nil {
			t.Fatalf("state files for %s: %v", m.name, err)
		}
		fx.machines[i] = m
	}
	// The files must fit their own machine and not the other: every
	// trial's remedy has both to repair.
	root := t.TempDir()
	for _, m := range fx.machines {
		writeCrashStateFiles(t, root, m)
		for _, on := range fx.machines {
			err := verifyCrashStateFiles(root, fx.cfg, on.snap)
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
// files under root for the machine snap: nil when its CPU and memory
// managers start with them. A missing file is an error here (the trials
// always have both).
func verifyCrashStateFiles(root string, cfg *kubeletv1beta1.KubeletConfiguration, snap *topology.Snapshot) error {
	rel, err := crashRelease()
	if err != nil {
		return err
	}
	var errs []error
	cpuPath := filepath.Join(root, preflight.CPUManagerState)
	if ccfg, err := cpumgr.NewConfig(cfg, snap, cpuPath, rel); err != nil {
		errs = append(errs, fmt.Errorf("%s: configuration: %w", preflight.CPUManagerState, err))
	} else if s, err := cpumgr.ReadFile(cpuPath); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", preflight.CPUManagerState, err))
	} else if err := cpumgr.Validate(s, snap, ccfg); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", preflight.CPUManagerState, err))
	}
	memPath := filepath.Join(root, preflight.MemoryManagerState)
	if mcfg, err := memmgr.NewConfig(cfg, snap, memPath, rel); err != nil {
		errs = append(errs, fmt.Errorf("%s: configuration: %w", preflight.MemoryManagerState, err))
	} else if s, err := memmgr.ReadFile(memPath); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", preflight.MemoryManagerState, err))
	} else if err := memmgr.Validate(s, snap, mcfg); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", preflight.MemoryManagerState, err))
	}
	return errors.Join(errs...)
}

// crashNode is one node of the test: its machine (which of the fixture's
// two it is now), Node, kubelet and hotplugd's state directory.
type crashNode struct {
	name       string
	fx         *crashFixture
	c          kubernetes.Interface
	node       string
	kubeconfig string
	root       string // the kubelet's root directory
	stateDir   string // hotplugd's --state-dir
	dir        string // markers and logs
	faulty     string // hotplugd built with -tags faultinject
	kubelet    *crashKubeletManager
	stop       string
	start      string
	// cur is the machine now (an index into fx.machines); seq counts the
	// trials.
	cur atomic.Int32 // read by the kubelet manager's goroutines
	seq int
}

func newCrashNode(t *testing.T, i int, c kubernetes.Interface, kubeconfig string, fx *crashFixture, faulty string) *crashNode {
	t.Helper()
	n := &crashNode{name: fmt.Sprintf("node%d", i), fx: fx, c: c, kubeconfig: kubeconfig,
		root: t.TempDir(), stateDir: t.TempDir(), dir: t.TempDir(), faulty: faulty}
	m := fx.machines[n.cur.Load()]
	writeCrashStateFiles(t, n.root, m)
	n.node = createNode(t, c, "crash", m.capacity, m.allocatable)
	n.kubelet = newCrashKubeletManager(t, n.dir, func() []string {
		return []string{crashMachineEnv + "=" + n.machine().dir, crashConfigEnv + "=" + fx.cfgPath, crashRootEnv + "=" + n.root,
			crashKubeconfigEnv + "=" + kubeconfig, crashNodeEnv + "=" + n.node}
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctl := func(op string) string {
		return fmt.Sprintf("GORACE=%s %s=%s %s=%s %s", shellQuote(crashHelperGorace()), crashHelperEnv, op, crashSocketEnv, shellQuote(n.kubelet.socket), shellQuote(self))
	}
	n.stop, n.start = ctl("stop"), ctl("start")
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

func (n *crashNode) machine() *crashMachine { return n.fx.machines[n.cur.Load()] }

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// args are hotplugd's arguments on machine m.
func (n *crashNode) args(m *crashMachine) []string {
	return []string{"--node-name", n.node, "--kubeconfig", n.kubeconfig,
		"--kubelet-config", n.fx.cfgPath, "--kubelet-root-dir", n.root, "--kubelet-version", crashKubeletVersion,
		"--sysfs-root", m.sys(), "--procfs-root", m.proc(), "--resync", "0", "--metrics-addr", "",
		"--remedy", "restart-kubelet", "--settle", "0s", "--remedy-interval", "0s", "--remedy-timeout", "20s",
		"--kubelet-grace", "0s", "--kubelet-poll", "1s", "--state-dir", n.stateDir,
		"--kubelet-stop-command", n.stop, "--kubelet-start-command", n.start}
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
	// At the signal (signalled: it was sent): the kubelet was stopped;
	// the journal's phase.
	signalled       bool
	stoppedAtSignal bool
	journalAtSignal string
	// SIGTERM: the exit code, whether the kubelet ran when hotplugd had
	// exited, and what the journal kept under way.
	exitCode      int
	runningAtExit bool
	journalAtExit string
	// fromJournal: the second hotplugd finished a remedy it found under
	// way in the journal.
	fromJournal    bool
	kubeletRefused int
}

// trial flips the machine, starts the faulty hotplugd stopping at
// spec.phase, sends spec.sig there, and starts a normal hotplugd that must
// bring the node to the machine.
func (n *crashNode) trial(t *testing.T, spec crashSpec) (o crashOutcome) {
	n.seq++
	o.seq = n.seq
	n.cur.Store(1 - n.cur.Load())
	m := n.machine()
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
	_, running := n.kubelet.Running()
	o.stoppedAtSignal = !running
	o.journalAtSignal = n.journalPhase()
	if o.stoppedAtSignal != crashKubeletStopped[spec.phase] {
		return fail("wrong phase", "at %s the kubelet was running=%v, want %v: the fault point is not where the phase says", spec.phase, running, !crashKubeletStopped[spec.phase])
	}
	if err := faulty.Cmd.Process.Signal(spec.sig); err != nil {
		return fail("signal", "sending %v: %v", spec.sig, err)
	}
	o.signalled = true
	ps, err := faulty.Wait(crashConverge)
	if err != nil {
		return fail("no exit", "after %v: %v", spec.sig, err)
	}
	if spec.sig == syscall.SIGTERM {
		_, o.runningAtExit = n.kubelet.Running()
		o.exitCode = ps.ExitCode()
		o.journalAtExit = n.journalPhase()
		if o.exitCode != 0 {
			return fail("exit status", "hotplugd exited with %v on SIGTERM, want 0", ps)
		}
		if !o.runningAtExit {
			return fail("kubelet left stopped", "hotplugd exited on SIGTERM at %s and left the kubelet stopped", spec.phase)
		}
	} else if ws, ok := ps.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return fail("exit status", "hotplugd ended with %v, want killed by SIGKILL", ps)
	}

	rec := time.Now()
	recovering = daemontest.Start(t, binary, nil, n.args(m)...)
	if why, ok := n.waitConverged(m, crashConverge); !ok {
		cause := "did not converge"
		if rolledBack(recovering) {
			cause = "rolled back"
			why += "; the second hotplugd rolled the restart back: it restored the state files of the previous machine, which the kubelet refuses"
		}
		if nodeNeverRead(recovering) {
			cause = causeNodeNeverRead + ", " + cause
			why += "; " + nodeNeverReadWhy
		}
		return fail(cause, "the node did not converge within %v of the second hotplugd's start: %s", crashConverge, why)
	}
	o.total, o.recovery = time.Since(began), time.Since(rec)
	o.fromJournal = slices.ContainsFunc(recovering.Since(0), func(e logEntry) bool {
		return strings.HasPrefix(e.Msg, "a kubelet restart was under way when hotplugd stopped")
	})
	if err := recovering.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fail("signal", "SIGTERM: %v", err)
	}
	if ps, err := recovering.Wait(crashConverge); err != nil || ps.ExitCode() != 0 {
		return fail("exit status", "the second hotplugd on SIGTERM: %v %v, want exit 0", ps, err)
	}
	if _, ok := n.kubelet.Running(); !ok {
		return fail("kubelet left stopped", "the kubelet stopped with the second hotplugd")
	}
	o.ok = true
	return o
}

// startFaulty starts the faultinject hotplugd on the node's machine, to
// stop at spec.phase (for SIGTERM, held there crashTermHold), and returns
// it and the file it creates there.
func (n *crashNode) startFaulty(t *testing.T, spec crashSpec) (*daemonProc, string) {
	t.Helper()
	marker := filepath.Join(n.dir, fmt.Sprintf("fault-%d", n.seq))
	env := []string{"HOTPLUGD_FAULTPOINT=" + spec.phase, "HOTPLUGD_FAULTPOINT_FILE=" + marker}
	if spec.sig == syscall.SIGTERM {
		env = append(env, "HOTPLUGD_FAULTPOINT_HOLD="+crashTermHold.String())
	}
	return daemontest.StartEnv(t, n.faulty, env, n.args(n.machine())...), marker
}

// causeNodeNeverRead is a failed trial's cause when a hotplugd never read
// its Node; nodeNeverReadWhy says what that looks like.
const (
	causeNodeNeverRead = "Node never read"
	nodeNeverReadWhy   = "hotplugd never read its Node: pkg/nodepatch logged nothing after \"watching the node\" " +
		"(no drift, no remedy, no verification until the Node changes; the informer's add event was handled before HasSynced turned true, " +
		"and Reporter.Run skips that wake-up)"
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

// rolledBack says whether d rolled a kubelet restart back.
func rolledBack(d *daemonProc) bool {
	return slices.ContainsFunc(d.Since(0), func(e logEntry) bool { return strings.HasPrefix(e.Msg, "rolling back") })
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
	if err := verifyCrashStateFiles(n.root, n.fx.cfg, m.snap); err != nil {
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

// diagnosis is what a failed trial leaves to read: the journal, the
// kubelet's log and both daemons' logs.
func (n *crashNode) diagnosis(faulty, recovering *daemonProc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n--- journal %s: ", filepath.Join(n.stateDir, journal.JournalFile))
	if j, err := journal.Open(n.stateDir); err != nil {
		fmt.Fprintf(&b, "%v\n", err)
	} else {
		a := j.Attempts()
		fmt.Fprintf(&b, "under way %+v; the last attempts of %d: %+v\n", j.Underway(), len(a), a[max(0, len(a)-3):])
	}
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

// crashKubeletManager is the fake kubelet's service manager: it starts the
// kubelet as its child (so it reaps it) and stops it, each idempotently,
// asked by crashControl over a unix socket, as systemctl asks systemd.
type crashKubeletManager struct {
	socket  string
	logPath string
	env     func() []string
	srv     *http.Server

	mu       sync.Mutex // one start or stop at a time
	proc     *crashProc
	refusals int
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

func newCrashKubeletManager(t *testing.T, dir string, env func() []string) *crashKubeletManager {
	t.Helper()
	// A short directory of its own: a socket's path has at most 107 bytes.
	sockDir, err := os.MkdirTemp("", "hotplugd-crash-")
	if err != nil {
		t.Fatal(err)
	}
	k := &crashKubeletManager{socket: filepath.Join(sockDir, "kubelet.sock"), logPath: filepath.Join(dir, "kubelet.log"), env: env}
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

// Refusals counts the kubelet starts that refused the state files.
func (k *crashKubeletManager) Refusals() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refusals
}

// Start starts a kubelet unless one runs, and waits until it is up (it
// has verified its state files) or has exited (its reason is in the
// error).
func (k *crashKubeletManager) Start() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.proc != nil && !k.proc.exited() {
		k.logf("start: already running (pid %d)", k.proc.cmd.Process.Pid)
		return nil
	}
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
	cmd := exec.Command(self)
	cmd.Env = append(append(daemontest.Env(), crashHelperEnv+"="+crashHelperKubelet, "GORACE="+crashHelperGorace()), k.env()...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{w} // fd 3: "ready" once the state files verified
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	p := &crashProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	k.proc = p
	k.logf("start: pid %d", cmd.Process.Pid)
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
		return fmt.Errorf("the kubelet exited at its start (%v): %s", cmd.ProcessState, k.lastLine(cmd.Process.Pid))
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("the kubelet (pid %d) was not up within 30s: killed", cmd.Process.Pid)
	}
}

// Stop stops the kubelet if one runs (SIGTERM; SIGKILL after 10 s) and
// waits until it has exited.
func (k *crashKubeletManager) Stop() error {
	k.mu.Lock()
	defer k.mu.Unlock()
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
	b, _ := os.ReadFile(k.logPath)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
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

// crashKubelet is the fake kubelet: it reads the machine and its state
// files once, as the kubelet does at its start, and refuses to start when
// they do not verify; otherwise it says it is up (fd 3), reports the
// machine on its Node and runs until SIGTERM.
func crashKubelet() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "%s kubelet %d: %s\n", time.Now().Format("15:04:05.000000"), os.Getpid(), fmt.Sprintf(format, args...))
	}
	machine, root := os.Getenv(crashMachineEnv), os.Getenv(crashRootEnv)
	cfg, err := kubeletconfig.Load(os.Getenv(crashConfigEnv))
	if err != nil {
		logf("%v", err)
		return 1
	}
	snap, err := topology.NewFS(filepath.Join(machine, "sys"), filepath.Join(machine, "proc")).Snapshot()
	if err != nil {
		logf("%v", err)
		return 1
	}
	if err := verifyCrashStateFiles(root, cfg, snap); err != nil {
		logf("refusing to start on %s: %v", filepath.Base(machine), strings.ReplaceAll(err.Error(), "\n", "; "))
		return 2
	}
	ready := os.NewFile(3, "ready")
	fmt.Fprintln(ready, "ready")
	ready.Close()
	alloc, err := snap.Allocatable(cfg)
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
		for _, p := range crashPhases {
			out = append(out, crashSpec{sig, p})
		}
	}
	return out
}

// table is the figures: one row per spec, benchmark-style lines, and a
// summary line.
func (r *crashResults) table(nodes int, wall time.Duration) []string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "signal\tphase\ttrials\tconverged\tskipped\tkubelet stopped at signal\tjournal at signal\texit 0 / kubelet up at exit\tjournal after exit\tfinished from journal\ttrial p50\trecovery p50\trecovery max\tkubelet refusals\tfailures")
	var bench []string
	var trials, ok, skipped int
	var all []time.Duration
	for _, s := range r.specs() {
		res := r.of(s)
		trials += res.trials
		ok += res.ok
		skipped += res.skipped
		var total, rec []time.Duration
		stopped, refused, fromJournal, exit0, upAtExit := 0, 0, 0, 0, 0
		atSignal, atExit, causes := map[string]int{}, map[string]int{}, map[string]int{}
		for _, o := range res.outcomes {
			if !o.ok {
				causes[o.cause]++
			}
			refused += o.kubeletRefused
			if !o.signalled {
				continue
			}
			if o.stoppedAtSignal {
				stopped++
			}
			atSignal[orNone(o.journalAtSignal)]++
			if s.sig == syscall.SIGTERM {
				atExit[orNone(o.journalAtExit)]++
				if o.exitCode == 0 {
					exit0++
				}
				if o.runningAtExit {
					upAtExit++
				}
			}
			if o.ok {
				total = append(total, o.total)
				rec = append(rec, o.recovery)
				if o.fromJournal {
					fromJournal++
				}
			}
		}
		all = append(all, total...)
		exit := "-"
		if s.sig == syscall.SIGTERM {
			exit = fmt.Sprintf("%d / %d", exit0, upAtExit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%v\t%v\t%v\t%d\t%s\n",
			signalName(s.sig), s.phase, res.trials, res.ok, res.skipped, stopped, counts(atSignal), exit, counts(atExit), fromJournal,
			round(median(total)), round(median(rec)), round(maxOf(rec)), refused, counts(causes))
		bench = append(bench, fmt.Sprintf("BenchmarkIntegrationCrash/%s/%s \t%6d\t%12d ns/trial\t%12d ns/recovery\t%6.1f %%converged",
			signalName(s.sig), s.phase, res.trials, median(total).Nanoseconds(), median(rec).Nanoseconds(), percent(res.ok, res.trials+res.skipped)))
	}
	tw.Flush()
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	lines = append(lines, bench...)
	lines = append(lines, fmt.Sprintf("crash safety: %d of %d trials converged (%.1f%%), %d skipped; median %v per trial; %d nodes in parallel; wall time %v",
		ok, trials+skipped, percent(ok, trials+skipped), skipped, round(median(all)), nodes, wall.Round(time.Millisecond)))
	return lines
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// counts prints a tally as "repairing 12, verifying 3".
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

// TestIntegrationCrashRecoveryBlind: hotplugd killed after the kubelet's
// start (the kubelet runs on the repaired state files; the journal says
// verifying), then started again while it cannot reach the API server, so
// that it cannot see the Node. The kubelet runs and nothing says the
// restart failed: it must be left running (the journal keeps the restart
// under way for a hotplugd that sees the Node). Then a hotplugd that
// reaches the API server verifies it and the node converges.
func TestIntegrationCrashRecoveryBlind(t *testing.T) {
	srv := sharedAPIServer(t)
	faulty := crashFaultyBinary(t)
	fx := newCrashFixture(t)
	kubeconfig := kubeconfigFor(t, srv)
	n := newCrashNode(t, 0, srv.Client(), kubeconfig, fx, faulty)

	n.seq++
	n.cur.Store(1 - n.cur.Load())
	m := n.machine()
	d, marker := n.startFaulty(t, crashSpec{syscall.SIGKILL, faultpoint.RemedyStarted})
	if err := waitCrashFile(marker, d, crashConverge); err != nil {
		t.Fatalf("the fault point was not reached: %v\n%s", err, d.Dump())
	}
	d.Cmd.Process.Kill()
	if _, err := d.Wait(crashConverge); err != nil {
		t.Fatal(err)
	}
	if p := n.journalPhase(); p != string(journal.PhaseVerifying) {
		t.Fatalf("journal phase %q after the kill at %s, want %s", p, faultpoint.RemedyStarted, journal.PhaseVerifying)
	}
	if _, ok := n.kubelet.Running(); !ok {
		t.Fatal("the kubelet is not running after its start")
	}
	if err := verifyCrashStateFiles(n.root, fx.cfg, m.snap); err != nil {
		t.Fatalf("the kubelet was started on state files that do not verify: %v", err)
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
	// Well past the remedy timeout, the kubelet must run.
	time.Sleep(timeout + 3*time.Second)
	_, running := n.kubelet.Running()
	blind.Stop()
	stopped := !running
	if stopped {
		t.Errorf("hotplugd, unable to see the Node, stopped the kubelet that ran on the repaired state files, and it stays stopped%s",
			n.diagnosis(nil, blind))
	}

	// The API server back: a hotplugd verifies and the node converges.
	again := daemontest.Start(t, binary, nil, n.args(m)...)
	if why, ok := n.waitConverged(m, crashConverge); !ok {
		if stopped {
			t.Errorf("and the node did not converge once hotplugd could see the Node: %s", why)
		} else {
			t.Errorf("the node did not converge once hotplugd could see the Node: %s%s", why, n.diagnosis(nil, again))
		}
	}
}
