package fleet

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/kubeapitest"
	"github.com/hotplugd/hotplugd/pkg/budget"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// The settings, from the environment; the defaults are make test's smoke.
const (
	envNodes  = "HOTPLUGD_FLEET_NODES"
	envBudget = "HOTPLUGD_FLEET_BUDGET"
	envKills  = "HOTPLUGD_FLEET_KILLS"
	envIdle   = "HOTPLUGD_FLEET_IDLE"
	envReport = "HOTPLUGD_FLEET_REPORT"
)

type config struct {
	nodes, budget, kills int
	idle                 time.Duration
	report               string
}

func loadConfig() (config, error) {
	c := config{nodes: 50, budget: 2, kills: 2, idle: 30 * time.Second, report: os.Getenv(envReport)}
	for _, x := range []struct {
		env string
		v   *int
		min int
	}{{envNodes, &c.nodes, 1}, {envBudget, &c.budget, 1}, {envKills, &c.kills, 0}} {
		s := os.Getenv(x.env)
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < x.min || n > 9999 {
			return c, fmt.Errorf("$%s=%q: want a number from %d to 9999", x.env, s, x.min)
		}
		*x.v = n
	}
	if s := os.Getenv(envIdle); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			return c, fmt.Errorf("$%s=%q: want a duration of at least 10s", envIdle, s)
		}
		c.idle = d
	}
	return c, nil
}

// hotplugd's settings that the fleet's timings depend on: the budget's
// (given) and the defaults it keeps.
const (
	budgetLease = 15 * time.Second
	budgetPoll  = 2 * time.Second
	settle      = 3 * time.Second // --settle's default
	heartbeat   = 5 * time.Minute // --heartbeat-interval's default
	// remedyTimeout and remedyInterval are --remedy-timeout's and
	// --remedy-interval's defaults.
	remedyTimeout  = time.Minute
	remedyInterval = 10 * time.Minute
)

// The harness's pace and bounds.
const (
	// wave is how many hotplugd processes start at once: the next starts
	// when one of them has written its Node's condition, so that a
	// 2-core machine is never swamped by a thousand starting at once.
	wave = 20
	// nodeStart bounds one hotplugd's start to its condition.
	nodeStart = 2 * time.Minute
	// restartDelay is how long after a kill the node's hotplugd is
	// started again, as the DaemonSet controller does.
	restartDelay = time.Second
	// registerWorkers register the Nodes in parallel.
	registerWorkers = 16
)

// fleetKubeletConfig is every node's kubelet configuration: reservations,
// so that allocatable differs from capacity; no static CPU or memory
// manager (no state file to repair); no healthz (no kubelet process: the
// remedy verifies by the Node alone); the pod log directory is the
// fleet's, not the machine's /var/log/pods.
const fleetKubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
healthzPort: 0
podLogsDir: %s
systemReserved:
  memory: 200Mi
kubeReserved:
  cpu: 100m
`

// fleet is the running simulation.
type fleet struct {
	t       *testing.T
	cfg     config
	dir     string
	binary  string
	self    string // the test binary, the restart helper
	srv     *kubeapitest.Server
	c       kubernetes.Interface
	metrics *metricsClient
	view    *view
	h       *harness
	reaper  *reaper
	kcfg    *kubeletv1beta1.KubeletConfiguration
	nodes   []*fleetNode
	slow    []string // the nodes whose kubelet restarts in slowRestartTime
	change  *machineChange
	// before and after are what a kubelet reports on every node's
	// machine before and after the change.
	before, after struct{ capacity, allocatable v1.ResourceList }

	exitsMu sync.Mutex
	exits   []exit

	res results
}

// TestFleet: N real hotplugd processes against one real API server. They
// start in waves and write their condition (False: the Nodes report their
// machines); the fleet idles while the API server's cost is measured; every
// machine's hugepages change at once and every Node shows the drift; the
// remedy restarts every simulated kubelet under the restart budget while
// budget holders and nodes in the middle of a restart are SIGKILLed and
// started again (the first: a node whose kubelet restart outlasts the
// budget's Lease). It fails when more than the budget's restarts overlap in
// time, when a Node is not current (condition False, the new machine's
// capacity and allocatable) within the bound, when a Lease stays held after
// the fleet is current, or when a hotplugd exits on its own. The results
// table is logged, and written to $HOTPLUGD_FLEET_REPORT when set.
func TestFleet(t *testing.T) {
	cfg, err := loadConfig()
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(kubeapitest.EnvBinDir)
	if bin == "" {
		t.Skipf(`SKIPPED: $%s is not set: it names the directory of the kube-apiserver and etcd the fleet runs (export %s="$(hack/kubebin.sh)")`,
			kubeapitest.EnvBinDir, kubeapitest.EnvBinDir)
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: not root: the fleet raises the machine's inotify limits, which every hotplugd needs two instances of")
	}
	began := time.Now()
	f := &fleet{t: t, cfg: cfg, dir: t.TempDir()}
	f.res.cfg = cfg
	f.setup(bin)
	f.register()
	f.baseline()
	f.startFleet()
	f.idle()
	f.changeAndRemedy()
	f.res.wall = time.Since(began)
	f.res.limits()
	report := f.res.markdown()
	for _, line := range strings.Split(report, "\n") {
		t.Log(line)
	}
	if cfg.report != "" {
		if err := os.WriteFile(cfg.report, []byte(report), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

// setup raises the machine's limits, builds hotplugd, starts the API
// server and the harness, and lays out every node.
func (f *fleet) setup(kubebin string) {
	t := f.t
	// Every hotplugd is a Go process of about GOMAXPROCS + 6 threads (7.5
	// measured at GOMAXPROCS 2), and every thread is a task; the API
	// server, etcd, the test and the restart helpers take a few hundred.
	perNode := runtime.NumCPU() + 6
	need := f.cfg.nodes*perNode + 500
	room, limit := taskRoom()
	f.res.taskRoom, f.res.taskLimit = room, limit
	if need > room {
		t.Fatalf("this machine cannot hold %d hotplugd processes: they need about %d tasks (%d threads each, and the servers'), and %s leaves room for %d: at most %d nodes here",
			f.cfg.nodes, need, perNode, limit, room, max(0, (room-500)/perNode))
	}
	// Two inotify instances per hotplugd (hugepage counts, kubelet
	// configuration), plus what else runs as root (make test runs other
	// packages beside this one); about ten watches each.
	f.res.inotifyWas, f.res.inotifyNow = raiseSysctl(t, "/proc/sys/fs/inotify/max_user_instances", 2*f.cfg.nodes+512)
	raiseSysctl(t, "/proc/sys/fs/inotify/max_user_watches", 20*f.cfg.nodes+65536)
	var err error
	if f.reaper, err = newReaper(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.reaper.reap() })
	if f.self, err = os.Executable(); err != nil {
		t.Fatal(err)
	}

	built := time.Now()
	binDir := filepath.Join(f.dir, "bin")
	if err := os.Mkdir(binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if f.binary, err = daemontest.Build(binDir); err != nil {
		t.Fatal(err)
	}
	f.res.build = time.Since(built)
	help, _ := exec.Command(f.binary, "run", "--help").CombinedOutput()
	for _, flag := range []string{"--restart-budget", "--restart-budget-namespace", "--restart-budget-lease", "--restart-budget-poll"} {
		if !strings.Contains(string(help), flag+" ") {
			t.Fatalf("hotplugd run has no %s flag: the fleet runs the restart budget (hotplugd run --help:\n%s)", flag, help)
		}
	}

	f.res.memBefore = memAvailable()
	if f.srv, err = kubeapitest.Start(kubeapitest.Options{BinDir: kubebin}); err != nil {
		t.Fatalf("starting kube-apiserver and etcd: %v", err)
	}
	t.Cleanup(f.srv.Stop)
	f.c = f.srv.Client()
	if f.metrics, err = newMetricsClient(f.srv); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	token, err := setupCluster(ctx, f.c)
	if err != nil {
		t.Fatal(err)
	}
	if err := waitSchemas(ctx, f.srv, token, f.metrics); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(f.dir, "kubeconfig")
	if err := f.srv.WriteKubeconfig(kubeconfig, token); err != nil {
		t.Fatal(err)
	}
	podLogs := filepath.Join(f.dir, "pod-logs")
	if err := os.Mkdir(podLogs, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeletConfig := filepath.Join(f.dir, "kubelet-config.yaml")
	if err := os.WriteFile(kubeletConfig, fmt.Appendf(nil, fleetKubeletConfig, podLogs), 0o644); err != nil {
		t.Fatal(err)
	}
	if f.kcfg, err = kubeletconfig.Load(kubeletConfig); err != nil {
		t.Fatal(err)
	}

	// The machines before and after the change, and what differs.
	template := filepath.Join(f.dir, "template")
	if f.change, err = newMachineChange(template, machineOf(pagesBefore), machineOf(pagesAfter)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		dir  string
		into *struct{ capacity, allocatable v1.ResourceList }
	}{{"before", &f.before}, {"after", &f.after}} {
		if m.into.capacity, m.into.allocatable, err = machineStatus(filepath.Join(template, m.dir), f.kcfg); err != nil {
			t.Fatal(err)
		}
	}
	if sameResources(withPods(f.after.capacity), f.before.capacity) {
		t.Fatal("the change does not change the machines' capacity")
	}
	t.Logf("every machine: %s; after the change: %s (files rewritten: %s)",
		describeStatus(f.before.capacity, f.before.allocatable), describeStatus(f.after.capacity, f.after.allocatable), strings.Join(f.change.paths(), ", "))

	// The nodes, their harness and their view.
	f.nodes = make([]*fleetNode, f.cfg.nodes)
	for i := range f.nodes {
		f.nodes[i] = &fleetNode{name: nodeName(i), dir: filepath.Join(f.dir, "nodes", nodeName(i))}
	}
	// Two slow kubelets, apart in the fleet: one's hotplugd is killed
	// during its restart, the other's is left alone.
	f.slow = slices.Compact([]string{nodeName(f.cfg.nodes / 3), nodeName(2 * f.cfg.nodes / 3)})
	f.res.slow = f.slow
	if f.h, err = startHarness(f.c, f.kcfg, f.nodes, f.slow); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.h.close)
	laidOut := time.Now()
	if err := layOut(f.nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range f.nodes {
		n.args = []string{"run", "--node-name", n.name, "--kubeconfig", kubeconfig, "--kubelet-config", kubeletConfig,
			"--kubelet-root-dir", filepath.Join(n.dir, "kubelet-root"), "--kubelet-version", kubeletVersion,
			"--sysfs-root", n.sys(), "--procfs-root", n.procfs(), "--metrics-addr", "", "--log-format", "json",
			"--state-dir", filepath.Join(n.dir, "state"), "--remedy", "restart-kubelet",
			"--kubelet-restart-command", restartCommand(f.self, f.h.url, n.name, nice != ""),
			"--restart-budget", itoa(f.cfg.budget), "--restart-budget-namespace", budgetNamespace,
			"--restart-budget-lease", budgetLease.String(), "--restart-budget-poll", budgetPoll.String()}
	}
	f.res.layout = time.Since(laidOut)
	// Stopped first (t.Cleanup runs last in, first out): every hotplugd,
	// then the view, the harness and the API server.
	viewCtx, stopView := context.WithCancel(context.Background())
	t.Cleanup(stopView)
	if f.view, err = startView(viewCtx, f.c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if bad := stopAll(f.nodes, 15*time.Second); len(bad) > 0 {
			t.Errorf("%d hotplugd did not exit 0 on SIGTERM: %s", len(bad), strings.Join(bad[:min(len(bad), 10)], "; "))
		}
	})
}

// layOut writes every node's machine and makes its directories, a few
// nodes at a time.
func layOut(nodes []*fleetNode) error {
	var g errgroup.Group
	g.SetLimit(4)
	for _, n := range nodes {
		g.Go(func() error {
			for _, d := range []string{"state", "kubelet-root"} {
				if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
					return fmt.Errorf("fleet: %w", err)
				}
			}
			return machineOf(pagesBefore).WriteDir(n.machine())
		})
	}
	return g.Wait()
}

func describeStatus(capacity, allocatable v1.ResourceList) string {
	return "capacity " + formatList(capacity) + ", allocatable " + formatList(allocatable)
}

func formatList(l v1.ResourceList) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(v1.ResourceName) bool) {
		for k := range l {
			if !yield(k) {
				return
			}
		}
	}) {
		q := l[k]
		parts = append(parts, string(k)+"="+q.String())
	}
	return strings.Join(parts, ",")
}

// register creates every Node as its kubelet would, in parallel.
func (f *fleet) register() {
	t := f.t
	s, err := f.metrics.scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f.res.rssEmpty = s.sum(mRSS, nil)
	began := time.Now()
	names := make(chan string)
	errs := make(chan error, f.cfg.nodes)
	var wg sync.WaitGroup
	for range registerWorkers {
		wg.Go(func() {
			for name := range names {
				errs <- registerNode(context.Background(), f.c, name, f.before.capacity, f.before.allocatable)
			}
		})
	}
	for _, n := range f.nodes {
		names <- n.name
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all := f.view.track(func(*v1.Node) bool { return true })
	defer f.view.untrack(all)
	if missing := f.view.waitNames(all, f.names(), time.Now().Add(time.Minute), nil); len(missing) > 0 {
		t.Fatalf("%d Nodes never seen by the harness's watch: %v", len(missing), missing[:min(len(missing), 10)])
	}
	f.res.register = time.Since(began)
}

func (f *fleet) names() []string {
	out := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		out[i] = n.name
	}
	return out
}

// baseline measures the API server with every Node registered and no
// hotplugd: its memory, its open watches, its CPU when nobody asks it
// anything, for the idle window to be compared with.
func (f *fleet) baseline() {
	t := f.t
	d := min(f.cfg.idle/2, time.Minute)
	a, err := f.metrics.scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(d) // a measurement window: nothing is waited for
	b, err := f.metrics.scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	w := window{a, b}
	f.res.baseline = w
	f.res.rssNodes = b.sum(mRSS, nil)
	f.res.watchesBefore = b.sum(mLongRunning, isWatch)
	f.res.apiCPUBaseline = w.delta(mCPU, nil) / w.seconds()
}

func isWatch(l map[string]string) bool { return l["verb"] == "WATCH" }

// unexpected records a hotplugd that exited on its own.
func (f *fleet) unexpected(e exit) {
	f.exitsMu.Lock()
	defer f.exitsMu.Unlock()
	f.exits = append(f.exits, e)
}

// checkExits fails the test for every hotplugd that exited on its own.
func (f *fleet) checkExits(phase string) {
	f.exitsMu.Lock()
	exits := slices.Clone(f.exits)
	f.exits = nil
	f.exitsMu.Unlock()
	for i, e := range exits {
		if i == 5 {
			f.t.Errorf("%s: and %d more hotplugd exited on their own", phase, len(exits)-i)
			break
		}
		n := f.node(e.node)
		f.t.Errorf("%s: the hotplugd of %s exited on its own at %s (%v); end of its log:\n%s", phase, e.node, e.at.Format(time.RFC3339Nano), e.err, n.logTail(3000))
	}
}

func (f *fleet) node(name string) *fleetNode {
	return f.h.nodes[name]
}

// startFleet starts every hotplugd, wave processes at a time, and waits
// until every Node carries hotplugd's condition, False.
func (f *fleet) startFleet() {
	t := f.t
	began := time.Now()
	cpu := markCPU()
	written := f.view.track(hasCondition)
	defer f.view.untrack(written)
	sem := make(chan struct{}, wave)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  []string
		slowest time.Duration
	)
	for _, n := range f.nodes {
		sem <- struct{}{}
		if err := n.start(f.binary, f.unexpected); err != nil {
			t.Fatal(err)
		}
		started := time.Now()
		wg.Go(func() {
			defer func() { <-sem }()
			missing := f.view.waitNames(written, []string{n.name}, started.Add(nodeStart), nil)
			mu.Lock()
			defer mu.Unlock()
			if len(missing) > 0 {
				failed = append(failed, n.name)
				return
			}
			slowest = max(slowest, f.view.seenTimes(written)[n.name].Sub(started))
		})
		if len(failed) > 0 {
			break
		}
	}
	wg.Wait()
	if len(failed) > 0 {
		n := f.node(failed[0])
		t.Fatalf("the hotplugd of %s wrote no condition within %v of its start (%d such); Node: %s; end of its log:\n%s",
			n.name, nodeStart, len(failed), describe(f.view.node(n.name)), n.logTail(4000))
	}
	current := f.view.track(conditionIs(v1.ConditionFalse))
	defer f.view.untrack(current)
	if missing := f.view.waitNames(current, f.names(), time.Now().Add(time.Minute), nil); len(missing) > 0 {
		n := f.node(missing[0])
		t.Fatalf("%d Nodes do not show %s False (their capacity is the machine's); %s: %s; end of its log:\n%s",
			len(missing), nodepatch.ConditionType, n.name, describe(f.view.node(n.name)), n.logTail(4000))
	}
	f.res.startup = time.Since(began)
	f.res.startupSlowest = slowest
	f.res.startupBusy = cpu.busySince()
	f.checkExits("start-up")
}

// pids are the running hotplugd processes.
func (f *fleet) pids() []int {
	var out []int
	for _, n := range f.nodes {
		if p := n.pid(); p != 0 {
			out = append(out, p)
		}
	}
	return out
}

// idle measures the fleet doing nothing for the idle window. The harness
// is silent meanwhile (its watch only receives events), and hotplugd's
// requests are counted by its own FlowSchemas.
func (f *fleet) idle() {
	t := f.t
	f.res.memFleet = memAvailable()
	cpu := markCPU()
	before := totalsOf(f.pids())
	a, err := f.metrics.scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(f.cfg.idle) // the measurement window
	b, err := f.metrics.scrape(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	after := totalsOf(f.pids())
	w := window{a, b}
	f.res.idle = w
	f.res.idleRequests = hotplugdRequests(w)
	f.res.idleRejected = hotplugdRejected(w)
	f.res.watchesFleet = b.sum(mLongRunning, isWatch)
	f.res.watchesByResource = b.by(mLongRunning, "resource", isWatch)
	f.res.baselineWatchesByResource = f.res.baseline.b.by(mLongRunning, "resource", isWatch)
	f.res.rssFleet = b.sum(mRSS, nil)
	f.res.apiCPUIdle = w.delta(mCPU, nil) / w.seconds()
	f.res.hotplugd = after
	f.res.hotplugdIdleCPU = after.cpu - before.cpu
	f.res.idleBusy = cpu.busySince()
	f.res.testFDs = ownFDs()
	f.res.tasks = machineTasks()
	f.res.load = max(f.res.load, loadAvg())
	f.checkExits("idle")
}

// kill is one SIGKILL of a node's hotplugd.
type kill struct {
	node string
	at   time.Time
	why  string // "restarting", "holder", both, or "restarting, slowly"
}

// changeAndRemedy changes every machine's hugepages at once, waits until
// every Node shows the drift, then until the remedy made every Node
// current under the budget, killing holders meanwhile; and checks the
// budget, the Nodes and the Leases.
func (f *fleet) changeAndRemedy() {
	t := f.t
	ctx := context.Background()
	stale := f.view.track(conditionIs(v1.ConditionTrue))
	defer f.view.untrack(stale)
	isCurrent := func(n *v1.Node) bool {
		c := nodepatch.FindCondition(n)
		return c != nil && c.Status == v1.ConditionFalse &&
			sameResources(n.Status.Capacity, f.after.capacity) && sameResources(n.Status.Allocatable, f.after.allocatable)
	}
	current := f.view.track(isCurrent)
	defer f.view.untrack(current)
	cpu := markCPU()
	a, err := f.metrics.scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Every machine at once: meminfo and the other files first, then the
	// hugepage counts, whose writes hotplugd sees.
	changed := time.Now()
	for _, n := range f.nodes {
		if err := apply(n.machine(), f.change.files); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range f.nodes {
		if err := apply(n.machine(), f.change.counts); err != nil {
			t.Fatal(err)
		}
	}
	f.res.changeWrite = time.Since(changed)

	killCtx, stopKilling := context.WithCancel(ctx)
	defer stopKilling()
	killed := make(chan []kill, 1)
	go func() { killed <- f.killer(killCtx, func() int { return f.view.count(current) }) }()
	reapCtx, stopReaping := context.WithCancel(ctx)
	defer stopReaping()
	go f.reaper.run(reapCtx, time.Second)

	// Every Node shows the drift.
	staleBound := time.Minute + time.Duration(f.cfg.nodes)*50*time.Millisecond
	if missing := f.view.waitNames(stale, f.names(), changed.Add(staleBound), nil); len(missing) > 0 {
		n := f.node(missing[0])
		t.Errorf("%d Nodes never showed %s True within %v of the change; %s: %s; end of its log:\n%s",
			len(missing), nodepatch.ConditionType, staleBound, n.name, describe(f.view.node(n.name)), n.logTail(4000))
	}
	b, err := f.metrics.scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.res.change = window{a, b}
	f.res.staleTimes = since(changed, f.view.seenTimes(stale))

	// Every Node current. Each slot of the budget serves a node per round:
	// its restart, the next waiting node's next try (one poll), and 2 s
	// for hotplugd's verification, its release and the taker's acquire on
	// a loaded machine; a slow restart holds its slot slowRestartTime; a
	// kill can cost a slot one Lease's duration (a dead holder's Lease
	// frees by expiry); and a minute for the settle time, detection and
	// start-up. A node killed after it wrote its restart down and before
	// its restart command ran costs itself more: with no kubelet process
	// to tell by, the next hotplugd verifies for --remedy-timeout a
	// restart that never came, calls it interrupted, and the rate limit
	// holds the next attempt back until --remedy-interval after the first.
	rounds := (f.cfg.nodes + f.cfg.budget - 1) / f.cfg.budget
	bound := settle + time.Duration(rounds)*(restartTime+budgetPoll+2*time.Second) + time.Duration(len(f.slow))*slowRestartTime +
		time.Duration(f.cfg.kills)*budgetLease + time.Minute
	if f.cfg.kills > 0 {
		bound += remedyTimeout + remedyInterval
	}
	f.res.currentBound = bound
	missing := f.view.waitNames(current, f.names(), changed.Add(bound), nil)
	stopKilling()
	f.res.kills = <-killed
	for _, k := range f.res.kills {
		t.Logf("killed the hotplugd of %s %s after the change (%s)", k.node, secs(k.at.Sub(changed)), k.why)
	}
	c, err := f.metrics.scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.res.remedy = window{a, c}
	f.res.currentTimes = since(changed, f.view.seenTimes(current))
	f.res.remedyBusy = cpu.busySince()
	f.res.load = max(f.res.load, loadAvg())
	if len(missing) > 0 {
		slices.Sort(missing)
		var msg strings.Builder
		for _, name := range missing[:min(len(missing), 5)] {
			fmt.Fprintf(&msg, "\n%s: %s", name, describe(f.view.node(name)))
		}
		n := f.node(missing[0])
		t.Errorf("%d of %d Nodes not current within %v of the change (the bound: %d rounds of the budget, %d kills):%s\nend of %s's log:\n%s",
			len(missing), f.cfg.nodes, bound, rounds, f.cfg.kills, msg.String(), n.name, n.logTail(6000))
	}

	// Every hold given back once the fleet is current.
	f.checkLeases(ctx)
	f.reaper.reap()

	// The budget: never more restarts at once than it allows.
	rs := f.h.records()
	f.res.restarts = rs
	f.res.overlap = maxOverlap(rs)
	if f.res.overlap.most > f.cfg.budget {
		t.Errorf("%d kubelet restarts overlapped, the budget is %d: %s", f.res.overlap.most, f.cfg.budget, f.res.overlap)
	}
	for _, r := range rs {
		if r.err != nil {
			t.Errorf("the restart of %s's kubelet at %s failed: %v", r.node, r.start.Format(time.RFC3339Nano), r.err)
		}
	}
	if run := f.h.running(); len(run) > 0 {
		t.Errorf("kubelet restarts still running after the fleet was current: %v", run)
	}
	if f.cfg.kills > 0 && len(f.res.kills) == 0 {
		t.Errorf("no hotplugd was killed (wanted %d kills): the fleet was current before any node was restarting or holding the budget", f.cfg.kills)
	}
	// Every Node still current now that the holds are given back.
	var notCurrent []string
	for _, n := range f.nodes {
		if node := f.view.node(n.name); node == nil || !isCurrent(node) {
			notCurrent = append(notCurrent, n.name+": "+describe(node))
		}
	}
	if len(notCurrent) > 0 && len(missing) == 0 {
		t.Errorf("%d Nodes not current at the end: %s", len(notCurrent), strings.Join(notCurrent[:min(len(notCurrent), 5)], "; "))
	}
	f.checkExits("change and remedy")
}

// since is each time as a duration since t0.
func since(t0 time.Time, ts map[string]time.Time) []time.Duration {
	out := make([]time.Duration, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.Sub(t0))
	}
	slices.Sort(out)
	return out
}

// checkLeases waits until no Lease of the budget is held (a holder that
// verified its restart gives its Lease back), within one Lease duration
// and a poll after the fleet is current.
func (f *fleet) checkLeases(ctx context.Context) {
	deadline := time.Now().Add(budgetLease + budgetPoll + 10*time.Second)
	for {
		held, n, err := f.holders(ctx)
		if err != nil {
			f.t.Error(err)
			return
		}
		f.res.leases = n
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for lease, holder := range held {
				fmt.Fprintf(&b, "\n%s held by %s; end of its log:\n%s", lease, holder, f.node(holder).logTail(3000))
				break
			}
			f.t.Errorf("Leases still held after the fleet was current: %v%s", held, b.String())
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// holders are the budget's Leases held now (not expired), by Lease name,
// and how many Leases there are.
func (f *fleet) holders(ctx context.Context) (map[string]string, int, error) {
	list, err := f.c.CoordinationV1().Leases(budgetNamespace).List(ctx, metav1.ListOptions{LabelSelector: budget.LabelBudget})
	if err != nil {
		return nil, 0, fmt.Errorf("listing the budget's Leases: %w", err)
	}
	held := map[string]string{}
	now := time.Now()
	for _, l := range list.Items {
		s := l.Spec
		if s.HolderIdentity == nil || *s.HolderIdentity == "" || s.RenewTime == nil || s.LeaseDurationSeconds == nil {
			continue
		}
		if now.Before(s.RenewTime.Add(time.Duration(*s.LeaseDurationSeconds) * time.Second)) {
			held[l.Name] = *s.HolderIdentity
		}
	}
	return held, len(list.Items), nil
}

// killer SIGKILLs a node's hotplugd, cfg.kills times in all, and starts
// it again restartDelay later. The first kill hits a slow node as soon as
// its kubelet restart runs (its hold then lives only if the next hotplugd
// renews it). The others hit, at random, a node whose kubelet restart is
// running or that holds a Lease of the budget, the i-th of n once i/(n+1)
// of the fleet is current (current counts them), so that they spread over
// the remedy however long it takes. It returns the kills done once they
// are all done or ctx ends, with every killed node started again.
func (f *fleet) killer(ctx context.Context, current func() int) []kill {
	rng := rand.New(rand.NewPCG(22, uint64(time.Now().UnixNano())))
	var (
		kills []kill
		wg    sync.WaitGroup
	)
	defer wg.Wait()
	slowKills := 0
	if len(f.slow) > 0 {
		slowKills = min(1, f.cfg.kills)
	}
	regularKills := f.cfg.kills - slowKills
	slowDone, regularDone := 0, 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for slowDone+regularDone < f.cfg.kills {
		select {
		case <-ctx.Done():
			return kills
		case <-tick.C:
		}
		var name, why string
		if slowDone < slowKills {
			for _, n := range f.h.running() {
				if slices.Contains(f.slow, n) && !f.node(n).isDown() {
					name, why = n, "restarting, slowly"
					slowDone++
					f.res.slowKill = fmt.Sprintf("%s, %s into its %v restart", n, secs(time.Since(f.h.since(n))), slowRestartTime)
					break
				}
			}
		}
		if name == "" && regularDone < regularKills && current() >= (regularDone+1)*f.cfg.nodes/(regularKills+1) {
			targets, err := f.targets(ctx)
			if err != nil {
				if ctx.Err() == nil {
					f.t.Error(err)
				}
				return kills
			}
			// Nodes not killed yet first, so that the kills spread.
			names := slices.Sorted(maps.Keys(targets))
			if fresh := slices.DeleteFunc(slices.Clone(names), func(n string) bool {
				return slices.ContainsFunc(kills, func(k kill) bool { return k.node == n })
			}); len(fresh) > 0 {
				names = fresh
			}
			if len(names) > 0 {
				name = names[rng.IntN(len(names))]
				why = targets[name]
				regularDone++
			}
		}
		if name == "" {
			continue
		}
		n := f.node(name)
		if err := n.kill(); err != nil {
			f.t.Error(err)
			return kills
		}
		kills = append(kills, kill{node: name, at: time.Now(), why: why})
		wg.Go(func() {
			time.Sleep(restartDelay) // the DaemonSet controller's
			if err := n.start(f.binary, f.unexpected); err != nil {
				f.t.Error(err)
			}
		})
	}
	return kills
}

// targets are the nodes a kill may hit now, with why: a kubelet restart
// running, a Lease held; nodes already down and the slow nodes (the first
// kill's) are left out.
func (f *fleet) targets(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	for _, n := range f.h.running() {
		out[n] = "restarting"
	}
	held, _, err := f.holders(ctx)
	if err != nil {
		return nil, err
	}
	for _, holder := range held {
		if why, ok := out[holder]; ok {
			out[holder] = why + ", holder"
		} else if f.node(holder) != nil {
			out[holder] = "holder"
		}
	}
	for n := range out {
		if f.node(n).isDown() || slices.Contains(f.slow, n) {
			delete(out, n)
		}
	}
	return out, nil
}
