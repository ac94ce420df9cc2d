package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // --remedy-window's zones in an image with no zoneinfo

	"github.com/go-logr/zapr"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/hotplugd/hotplugd/pkg/budget"
	"github.com/hotplugd/hotplugd/pkg/control"
	"github.com/hotplugd/hotplugd/pkg/cpuonline"
	"github.com/hotplugd/hotplugd/pkg/daemon"
	"github.com/hotplugd/hotplugd/pkg/debounce"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeclient"
	"github.com/hotplugd/hotplugd/pkg/kubeletctl"
	"github.com/hotplugd/hotplugd/pkg/kubeletstart"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/logging"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/pause"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/removal"
	"github.com/hotplugd/hotplugd/pkg/sdnotify"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// The restart budget's Leases: restartBudgetName-0 ... in the namespace.
const (
	restartBudgetName      = "hotplugd-restart"
	defaultBudgetNamespace = "hotplugd-system"
)

// runOptions are the flags of `hotplugd run`.
type runOptions struct {
	Standalone  bool
	SysfsRoot   string
	ProcfsRoot  string
	QuietWindow time.Duration
	MaxDelay    time.Duration
	Resync      time.Duration
	MetricsAddr string
	Logging     logging.Options
	// OnlineNewCPUs: write 1 to a hot-added CPU's online file (pkg/cpuonline).
	OnlineNewCPUs bool

	// The cluster side.
	NodeName       string
	Kubeconfig     string
	KubeAPIQPS     float32
	KubeAPIBurst   int
	KubeletConfig  string
	KubeletRootDir string
	KubeletVersion string
	MinMemoryDelta string
	Heartbeat      time.Duration
	DryRun         bool

	// The remedy.
	Remedy                string
	Settle                time.Duration
	RemedyInterval        time.Duration
	RemedyTimeout         time.Duration
	MaxRestartsPerDay     int
	AllowReadinessReset   bool
	KubeletUnit           string
	KubeletRestartCommand string
	StateDir              string
	KubeletPoll           time.Duration
	KubeletGrace          time.Duration
	PruneOnRemoval        string
	PauseDaemonSet        string
	// The cluster-wide restart budget (pkg/budget) and the windows.
	RestartBudget          int
	RestartBudgetNamespace string
	RestartBudgetLease     time.Duration
	RestartBudgetPoll      time.Duration
	RestartBudgetTokenFile string
	RemedyWindows          []string

	minMemoryDelta resource.Quantity
	windows        remedy.Windows
	// atStop runs after the daemon stopped on a signal (set by cluster).
	atStop func(*zap.Logger)
}

// AddFlags registers the options on fs.
func (o *runOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Standalone, "standalone", false, "run without a cluster: watch the machine and log every change, touch no Node and no kubelet")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the topology from (e.g. /host/sys in a container)")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read meminfo and hugepage counts from, and to find the kubelet in (e.g. /host/proc in a container)")
	fs.DurationVar(&o.QuietWindow, "quiet-window", 500*time.Millisecond, "reconcile once no event has arrived for this long (a burst of events becomes one reconcile)")
	fs.DurationVar(&o.MaxDelay, "max-delay", 5*time.Second, "reconcile no later than this after the first event of a burst that never goes quiet")
	fs.DurationVar(&o.Resync, "resync", time.Minute, "period of the safety-net full re-read, for changes no event reports (0 disables)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "127.0.0.1:9792", "address for /metrics and /healthz (\"\" disables)")
	o.Logging.AddFlags(fs)
	fs.BoolVar(&o.OnlineNewCPUs, "online-new-cpus", false, "bring hot-added CPUs online (on their add uevent, write 1 to devices/system/cpu/cpuN/online under --sysfs-root), as distributions' udev rules do; default off: they stay offline until something else onlines them")

	fs.StringVar(&o.NodeName, "node-name", "", "this machine's Node (default $NODE_NAME, else the host name in lower case, as the kubelet names it)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig for the API server (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	fs.Float32Var(&o.KubeAPIQPS, "kube-api-qps", 5, "steady request rate to the API server (requests per second)")
	fs.IntVar(&o.KubeAPIBurst, "kube-api-burst", 10, "request burst to the API server")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "the kubelet's KubeletConfiguration file (default: found from the running kubelet's command line, with the flags that override it)")
	fs.StringVar(&o.KubeletRootDir, "kubelet-root-dir", "", "the kubelet's --root-dir, where its state files are (default: the running kubelet's, else /var/lib/kubelet)")
	fs.StringVar(&o.KubeletVersion, "kubelet-version", "", "the kubelet's version (vX.Y.Z), which decides the rules hotplugd predicts and repairs by (default: the running kubelet's binary's --version, else that binary's answer as hotplugd preflight cached it in --state-dir at the kubelet's start, else its Node's status.nodeInfo.kubeletVersion). A kubelet hotplugd does not know (not 1.34 to 1.37, a pre-release): capacity only, report only")
	fs.StringVar(&o.MinMemoryDelta, "min-memory-delta", "100Mi", "smallest memory difference that is drift; smaller ones (balloon drivers, kernel reservations) are logged only")
	fs.DurationVar(&o.Heartbeat, "heartbeat-interval", 5*time.Minute, "write the condition KubeletCapacityStale again this often when nothing changed, so that its lastHeartbeatTime shows hotplugd alive: a heartbeat older than twice this means no hotplugd runs on the node (12 small nodes/status patches per node per hour at 5m; 0: write only on a change, and a dead hotplugd's condition looks current for ever)")
	fs.BoolVar(&o.DryRun, "dry-run", false, "log what would be written to the Node and what the remedy would do; change nothing")

	fs.StringVar(&o.Remedy, "remedy", string(remedy.ModeReport), "what to do about a drift: report (condition, annotations, Event) or restart-kubelet (also repair the state files and restart the kubelet once the change has settled)")
	fs.DurationVar(&o.Settle, "settle", 3*time.Second, "the longest a restart waits for a change the kernel says is still arriving (hot-added memory blocks not online yet, a CPU device added or removed: hypervisors add vCPUs one at a time): until the machine has had no event for this long; a complete change restarts the kubelet once its burst is quiet (--quiet-window)")
	fs.DurationVar(&o.RemedyInterval, "remedy-interval", 10*time.Minute, "at most one kubelet restart per this interval, whatever its outcome")
	fs.IntVar(&o.MaxRestartsPerDay, "max-restarts-per-day", 3, "at most this many kubelet restarts in any 24 hours (0: no bound); a drift past it is reported only, until the oldest restart leaves the window")
	fs.BoolVar(&o.AllowReadinessReset, "allow-readiness-reset", false, "restart a kubelet whose restart sets every running container's ready status to false until its readiness probe passes again (kubelet 1.34; 1.35 and later with the gate ChangeContainerStatusOnKubeletRestart): pods leave their Services for a moment. Default: such a restart is withheld with an Event")
	fs.DurationVar(&o.RemedyTimeout, "remedy-timeout", time.Minute, "how long a restarted kubelet has to run as a new process, answer its healthz and show the new capacity before the remedy is called failed (the kubelet is left to its supervisor)")
	fs.StringVar(&o.KubeletUnit, "kubelet-unit", kubeletctl.DefaultUnit, "the kubelet's systemd unit, restarted over D-Bus (RestartUnit: systemd owns the restart, and the unit's ExecStartPre runs hotplugd preflight)")
	fs.StringVar(&o.KubeletRestartCommand, "kubelet-restart-command", "", "shell command that restarts the kubelet through its supervisor, for hosts without systemd (replaces --kubelet-unit); it runs detached, to its end, whatever becomes of hotplugd, and the kubelet's start must run `hotplugd preflight` first, as the systemd drop-in does")
	fs.StringVar(&o.StateDir, "state-dir", "/var/lib/hotplugd", "where hotplugd keeps its remedy journal (remedy.json: the restart under way, verified by the next hotplugd after a crash, and the attempts made, not repeated across restarts) and its lock (one hotplugd per node), and where it reads the kubelet binary's version as hotplugd preflight cached it at the kubelet's start ("+versionCacheName+", the drop-in's --version-cache)")
	fs.DurationVar(&o.KubeletGrace, "kubelet-grace", 20*time.Second, "how long a kubelet that has just started (restarted by anyone) has to report its Node before a difference counts as drift")
	fs.StringVar(&o.PruneOnRemoval, "prune-on-removal", "", "what installed this hotplugd, daemonset/NAMESPACE/NAME or systemd/UNIT: at SIGTERM, when that DaemonSet is gone or being deleted, or that unit is disabled or masked (an uninstall, not an update or a restart), hotplugd removes its condition and annotations from its Node before it exits, as hotplugd prune does. \"\": never (the uninstall runs hotplugd prune)")
	fs.StringVar(&o.PauseDaemonSet, "pause-daemonset", "", "NAMESPACE/NAME of a DaemonSet whose annotation "+pause.Annotation+" pauses the remedy on every node while it is set (one watch of that object; its value is the reason). \"\": no cluster-wide pause")
	fs.IntVar(&o.RestartBudget, "restart-budget", 1, "at most this many nodes of the cluster restart their kubelet at once (--remedy=restart-kubelet): a node restarts only while it holds one of the Leases "+restartBudgetName+"-0 to -(N-1) in --restart-budget-namespace, and waits (reporting, its condition saying so) while every one is held; 0: no cluster-wide budget, each node decides alone")
	fs.StringVar(&o.RestartBudgetNamespace, "restart-budget-namespace", "", "namespace of the restart budget's Leases (default $POD_NAMESPACE, else "+defaultBudgetNamespace+")")
	fs.DurationVar(&o.RestartBudgetLease, "restart-budget-lease", time.Minute, "how long a hold of the restart budget lasts without renewal (renewed every third of it while the restart and its verification run): a node that dies holding it frees it this long after its last renewal")
	fs.DurationVar(&o.RestartBudgetPoll, "restart-budget-poll", 10*time.Second, "how long a node that found the restart budget taken waits before it asks again (one LIST of the budget's Leases), spread by up to half of it either way")
	fs.StringVar(&o.RestartBudgetTokenFile, "restart-budget-token-file", "", "a bearer token for the restart budget's Leases, with --kubeconfig's server and CA (re-read as it changes): the systemd unit's, whose kubelet credentials may write no Lease outside kube-node-lease; a token of the service account hotplugd bound to this Node (kubectl -n hotplugd-system create token hotplugd --bound-object-kind Node --bound-object-name NODE). \"\": --kubeconfig's credentials (the DaemonSet's service account)")
	fs.StringArrayVar(&o.RemedyWindows, "remedy-window", nil, "a weekly window in which a kubelet restart may start, \"DAYS HH:MM-HH:MM [ZONE]\" (\"mon-fri 02:00-05:00 Europe/Berlin\", \"* 22:00-06:00\"; days sun..sat, ranges, lists or *; zone UTC when left out); repeat for several; none: any time. Outside them the drift is reported and the restart waits")
	fs.DurationVar(&o.KubeletPoll, "kubelet-poll", 5*time.Second, "how often hotplugd looks for a kubelet while it knows none, or checks that the one it knows still runs where the kernel cannot tell it of its exit (a pidfd; its configuration files are watched with inotify)")
}

// Validate checks the option values.
func (o *runOptions) Validate() error {
	var errs []error
	if o.SysfsRoot == "" || o.ProcfsRoot == "" {
		errs = append(errs, errors.New("--sysfs-root and --procfs-root must not be empty"))
	}
	if o.QuietWindow <= 0 {
		errs = append(errs, fmt.Errorf("--quiet-window must be positive, not %v", o.QuietWindow))
	}
	if o.MaxDelay < o.QuietWindow {
		errs = append(errs, fmt.Errorf("--max-delay (%v) must be at least --quiet-window (%v)", o.MaxDelay, o.QuietWindow))
	}
	if o.Resync < 0 {
		errs = append(errs, fmt.Errorf("--resync must be 0 (off) or positive, not %v", o.Resync))
	}
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.KubeletVersion != "" {
		if _, err := kubeletversion.Parse(o.KubeletVersion); err != nil {
			errs = append(errs, fmt.Errorf("--kubelet-version: %w", err))
		}
	}
	q, err := resource.ParseQuantity(o.MinMemoryDelta)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("--min-memory-delta %q: %v", o.MinMemoryDelta, err))
	case q.Sign() < 0:
		errs = append(errs, fmt.Errorf("--min-memory-delta must not be negative, not %s", o.MinMemoryDelta))
	default:
		o.minMemoryDelta = q
	}
	switch remedy.Mode(o.Remedy) {
	case remedy.ModeReport, remedy.ModeRestartKubelet:
	default:
		errs = append(errs, fmt.Errorf("--remedy must be %s or %s, not %q", remedy.ModeReport, remedy.ModeRestartKubelet, o.Remedy))
	}
	if o.KubeAPIQPS <= 0 || o.KubeAPIBurst <= 0 {
		errs = append(errs, errors.New("--kube-api-qps and --kube-api-burst must be positive"))
	}
	if o.KubeletGrace < 0 {
		errs = append(errs, fmt.Errorf("--kubelet-grace must not be negative, not %v", o.KubeletGrace))
	}
	if o.Heartbeat != 0 && o.Heartbeat < time.Second {
		errs = append(errs, fmt.Errorf("--heartbeat-interval must be 0 (off) or at least 1s, not %v (each beat is a Node write that every watcher of Nodes receives)", o.Heartbeat))
	}
	if o.KubeletPoll <= 0 {
		errs = append(errs, fmt.Errorf("--kubelet-poll must be positive, not %v", o.KubeletPoll))
	}
	if o.Settle < 0 || o.RemedyInterval < 0 || o.RemedyTimeout <= 0 {
		errs = append(errs, errors.New("--settle and --remedy-interval must not be negative, --remedy-timeout must be positive"))
	}
	if o.MaxRestartsPerDay < 0 {
		errs = append(errs, fmt.Errorf("--max-restarts-per-day must not be negative, not %d", o.MaxRestartsPerDay))
	}
	if o.Standalone && (o.Remedy != string(remedy.ModeReport) || o.NodeName != "" || o.Kubeconfig != "" || o.PruneOnRemoval != "") {
		errs = append(errs, errors.New("--standalone touches no cluster: it cannot take --remedy, --node-name, --kubeconfig or --prune-on-removal"))
	}
	if _, err := removal.Parse(o.PruneOnRemoval, nil, nil); err != nil {
		errs = append(errs, err)
	}
	if o.RestartBudget < 0 {
		errs = append(errs, fmt.Errorf("--restart-budget must be 0 (none) or positive, not %d", o.RestartBudget))
	}
	if o.RestartBudgetLease < 3*time.Second || o.RestartBudgetPoll <= 0 {
		errs = append(errs, fmt.Errorf("--restart-budget-lease must be at least 3s (not %v) and --restart-budget-poll positive (not %v)", o.RestartBudgetLease, o.RestartBudgetPoll))
	}
	o.windows = nil
	for _, spec := range o.RemedyWindows {
		w, err := remedy.ParseWindow(spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("--remedy-window: %w", err))
			continue
		}
		o.windows = append(o.windows, w)
	}
	if o.PauseDaemonSet != "" {
		if ns, name, ok := strings.Cut(o.PauseDaemonSet, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			errs = append(errs, fmt.Errorf("--pause-daemonset %q: want NAMESPACE/NAME", o.PauseDaemonSet))
		}
		if o.Standalone {
			errs = append(errs, errors.New("--standalone touches no cluster: it cannot take --pause-daemonset"))
		}
	}
	return errors.Join(errs...)
}

// nodeName is --node-name, else $NODE_NAME, else the host name in lower
// case (the kubelet's default).
func (o *runOptions) nodeName() (string, error) { return nodeName(o.NodeName) }

// nodeName is flag, else $NODE_NAME, else the host name in lower case.
func nodeName(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --node-name, no $NODE_NAME and no host name: %w", err)
	}
	return strings.ToLower(h), nil
}

func runRun(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	if code, done := parseFlags("run", `Usage: hotplugd run [--standalone] [flags]

Runs the daemon: listens to kernel uevents for CPUs, memory and NUMA nodes and
to writes of every hugepage count file, debounces bursts, re-reads the topology
and logs every change (to journald under systemd). SIGHUP forces a re-read;
SIGINT/SIGTERM stop it.

With a cluster (the default) it also watches its own Node and, while the
kubelet reports other cpu, memory or hugepages than the machine has, sets the
node condition KubeletCapacityStale, annotations hotplugd.io/* and an Event
CapacityDrift. With --remedy=restart-kubelet it then asks the kubelet's
supervisor (systemd, or --kubelet-restart-command) to restart it once the
change is complete (its burst quiet, nothing the kernel says is still
arriving, else at most --settle after the last event), where it can judge that the restart starts the kubelet
that runs now with hotplugd preflight repairing its state files in its start,
and verifies that the Node shows the new capacity. --standalone touches no
cluster.

Flags:
%s`, &o, args, stderr); done {
		return code
	}
	idleRuntime(os.Getenv)
	log, err := logging.New(o.Logging, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd run: %v\n", err)
		return 1
	}
	defer log.Sync()
	log = log.With(zap.String("version", version))

	cfg := daemon.Config{
		Version:   version,
		SysfsRoot: o.SysfsRoot, ProcfsRoot: o.ProcfsRoot,
		QuietWindow: o.QuietWindow, MaxDelay: o.MaxDelay, Resync: o.Resync,
		MetricsAddr: o.MetricsAddr,
		Log:         log,
		Notifier:    sdnotify.New(log.Named("sdnotify")),
	}
	var wire func(*daemon.Daemon) error
	if !o.Standalone {
		var cleanup func()
		wire, cleanup, err = o.cluster(&cfg, log)
		defer cleanup()
		if err != nil {
			log.Error("cannot start", zap.Error(err))
			return 1
		}
	}
	d, err := daemon.New(cfg)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}
	if wire != nil {
		if err := wire(d); err != nil {
			log.Error("cannot start", zap.Error(err))
			return 1
		}
	}
	if o.OnlineNewCPUs {
		on, err := cpuonline.New(cpuonline.Options{SysfsRoot: o.SysfsRoot, Log: log.Named("cpuonline"), Registerer: d.Metrics().Registry})
		if err != nil {
			log.Error("cannot start", zap.Error(err))
			return 1
		}
		d.AddUeventHook(on.Event)
		d.AddTask(on.Run)
		log.Info("onlining hot-added CPUs", zap.String("sysfs_root", o.SysfsRoot))
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: re-reading the topology")
				d.Trigger(debounce.TriggerSignal)
			}
		}
	}()

	log.Info("hotplugd started", zap.Bool("standalone", o.Standalone), zap.Duration("quiet_window", o.QuietWindow),
		zap.Duration("max_delay", o.MaxDelay), zap.Duration("resync", o.Resync))
	if err := d.Run(ctx); err != nil {
		log.Error("stopped", zap.Error(err))
		return 1
	}
	if o.atStop != nil && ctx.Err() != nil {
		o.atStop(log)
	}
	log.Info("hotplugd stopped")
	return 0
}

// cluster sets up the control loop (the Node's watch and writer), the
// kubelet watch and the remedy, and adds their tasks and the reconcile hook
// to the daemon once it exists
// (the returned function). cleanup releases what it opened.
func (o *runOptions) cluster(cfg *daemon.Config, log *zap.Logger) (wire func(*daemon.Daemon) error, cleanup func(), err error) {
	cleanup = func() {}
	node, err := o.nodeName()
	if err != nil {
		return nil, cleanup, err
	}
	// client-go logs through klog (watch errors, event sending): into the
	// same structured log, not as plain lines on stderr.
	klog.SetLogger(zapr.NewLogger(log.Named("client-go")))
	metrics := daemon.NewMetrics()
	cfg.Metrics = metrics
	client, restCfg, err := nodepatch.NewClient(nodepatch.ClientOptions{
		Kubeconfig: o.Kubeconfig, QPS: o.KubeAPIQPS, Burst: o.KubeAPIBurst, Version: version, Registerer: metrics.Registry,
	})
	if err != nil {
		return nil, cleanup, err
	}
	release, err := journal.Lock(o.StateDir)
	if err != nil {
		return nil, cleanup, err
	}
	cleanup = release
	record, err := journal.Open(o.StateDir)
	if err != nil {
		return nil, cleanup, err
	}
	detector, err := removal.Parse(o.PruneOnRemoval, client, func(ctx context.Context, unit string) (string, error) {
		return kubeletctl.UnitFileState(ctx, "", unit)
	})
	if err != nil {
		return nil, cleanup, err
	}
	if detector != nil {
		o.atStop = func(log *zap.Logger) { pruneAtRemoval(detector, client, node, o.DryRun, log) }
	}
	nodes := nodepatch.NewWatch(client, node, log)
	writer, err := nodepatch.NewWriter(nodepatch.WriterOptions{
		Client: client, NodeName: node, DryRun: o.DryRun, Log: log, Registerer: metrics.Registry, Heartbeat: o.Heartbeat,
	})
	if err != nil {
		return nil, cleanup, err
	}
	watch := kubeletwatch.New(kubeletwatch.Options{
		ProcRoot: o.ProcfsRoot, Args: o.kubeletArgs(), RootDir: o.KubeletRootDir, Version: o.KubeletVersion,
		VersionCache: filepath.Join(o.StateDir, versionCacheName),
		NodeVersion: func(ctx context.Context) (string, error) {
			n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return "", fmt.Errorf("reading Node %s: %w", node, err)
			}
			return n.Status.NodeInfo.KubeletVersion, nil
		},
		Poll: o.KubeletPoll, Log: log,
	})
	mode := remedy.Mode(o.Remedy)
	var restarter remedy.Restarter
	var unit func(context.Context, *kubeletwatch.Facts, bool) remedy.UnitVerdict
	if u := record.Underway(); mode == remedy.ModeRestartKubelet || (u != nil && u.Phase.Legacy()) {
		// A record an earlier hotplugd left in the middle of its own stop
		// and start is settled even in report mode: the kubelet must run.
		if restarter, err = o.control(log); err != nil {
			if mode == remedy.ModeRestartKubelet {
				return nil, cleanup, err
			}
			log.Error("an earlier hotplugd left a kubelet restart under way and the kubelet's supervisor cannot be reached: make sure the kubelet runs", zap.Error(err))
		}
		if sd, ok := restarter.(*kubeletctl.Systemd); ok {
			unit = unitVerdict(sd)
		}
	}
	if c, ok := restarter.(io.Closer); ok {
		cleanup = func() {
			if err := c.Close(); err != nil {
				log.Debug("closing the kubelet control", zap.Error(err))
			}
			release()
		}
	}
	log.Info("acting on the node", zap.String("node", node), zap.String("remedy", string(mode)),
		zap.Bool("dry_run", o.DryRun), zap.String("journal", record.Path()))

	var restartBudget *budget.Budget
	if mode == remedy.ModeRestartKubelet && o.RestartBudget > 0 {
		ns := cmp.Or(o.RestartBudgetNamespace, os.Getenv("POD_NAMESPACE"), defaultBudgetNamespace)
		budgetClient := client
		if o.RestartBudgetTokenFile != "" {
			cfg, err := nodepatch.WithTokenFile(restCfg, o.RestartBudgetTokenFile)
			if err == nil {
				budgetClient, err = kubeclient.NewForConfig(cfg)
			}
			if err != nil {
				return nil, cleanup, fmt.Errorf("--restart-budget-token-file: %w", err)
			}
		}
		restartBudget, err = budget.New(budget.Options{
			Client: budgetClient, Namespace: ns, Name: restartBudgetName, Slots: o.RestartBudget,
			Holder: node, Duration: o.RestartBudgetLease,
		})
		if err != nil {
			return nil, cleanup, err
		}
		log.Info("kubelet restarts share the cluster's restart budget", zap.Int("at_once", o.RestartBudget),
			zap.String("leases", ns+"/"+restartBudgetName+"-*"))
	}

	return func(d *daemon.Daemon) error {
		obs := control.NewObservations()
		rem, err := remedy.New(remedy.Options{
			Budget: restartBudget, BudgetPoll: o.RestartBudgetPoll, BudgetRenew: o.RestartBudgetLease / 3,
			Interval: o.RemedyInterval, Timeout: o.RemedyTimeout, DryRun: o.DryRun, AllowReadinessReset: o.AllowReadinessReset,
			Kubelet: watch, Journal: record, WouldRefuse: wouldRefuse, Unit: unit,
			Control: restarter, Node: obs, Snapshot: d.FS().Snapshot, MinMemoryDelta: o.minMemoryDelta,
			CgroupFS: filepath.Join(o.SysfsRoot, "fs", "cgroup"),
			GetNode: func(ctx context.Context) (*v1.Node, error) {
				return client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			},
			Log: log, Registerer: metrics.Registry,
		})
		if err != nil {
			return err
		}
		if record.Underway() == nil {
			// A hold an earlier hotplugd of this node took and left
			// (killed before it wrote its restart down) goes back; one
			// with a restart under way goes back once it is settled.
			d.AddTask(func(ctx context.Context) error {
				rem.ReleaseOwnBudget(ctx)
				return nil
			})
		}
		var paused control.PauseSource
		if ns, name, ok := strings.Cut(o.PauseDaemonSet, "/"); ok {
			pw := pause.NewWatch(client, ns, name, log)
			d.AddTask(pw.Run)
			paused = pw
		}
		loop, err := control.New(control.Options{
			Config: control.Config{
				Mode: mode, Settle: o.Settle, Interval: o.RemedyInterval, MaxPerDay: o.MaxRestartsPerDay,
				Grace: o.KubeletGrace, MinMemoryDelta: o.minMemoryDelta, Heartbeat: o.Heartbeat,
				Windows: o.windows,
			},
			Kubelet: watch, Node: nodes, Writer: writer, Remedy: rem, Journal: record, Observations: obs,
			Busy: d.Busy, Idle: d.Idle, Log: log, Pause: paused,
		})
		if err != nil {
			return err
		}
		if err := metrics.Registry.Register(control.BudgetWaitingGauge(loop.WaitingForBudget)); err != nil {
			return err
		}
		// A memory capacity decrease is a hot-remove only after a memory
		// block went offline or away; otherwise (a balloon) it is reported.
		// A hot-added block not online yet, or a CPU device added, is a
		// change still arriving: the restart waits for it (Arrivals).
		d.AddUeventHook(func(e uevent.Event) {
			now := time.Now()
			if e.Subsystem == "memory" && (e.Action == uevent.ActionOffline || e.Action == uevent.ActionRemove) {
				loop.MemoryDown(now)
			}
			loop.Uevent(e, now)
		})
		// The kubelet is discovered before the first snapshot's decision.
		watch.Refresh(context.Background())
		d.AddHook(func(res daemon.Result) {
			if res.Snapshot == nil {
				return
			}
			var activity time.Time
			if res.EventDriven() {
				activity = res.Batch.Last
			}
			loop.Snapshot(res.Snapshot, activity)
		})
		d.AddTask(watch.Run)
		d.AddTask(nodes.Run)
		d.AddTask(writer.Run)
		d.AddTask(loop.Run)
		d.AddTask(func(ctx context.Context) error {
			return serveStatus(ctx, filepath.Join(o.StateDir, statusSocketName), loop, log)
		})
		return nil
	}, cleanup, nil
}

// pruneAtRemoval removes hotplugd's condition and annotations from its
// Node when d says hotplugd is being removed; it says what it did, or why
// not. The DaemonSet's grace period (30 s) bounds it; it takes 10 s at most.
func pruneAtRemoval(d removal.Detector, client kubeclient.Interface, node string, dryRun bool, log *zap.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	removing, why, err := d.Removing(ctx)
	switch {
	case err != nil:
		log.Warn("cannot tell whether hotplugd is being removed: its condition and annotations stay on the Node (an uninstall removes them with hotplugd prune)",
			zap.Stringer("installed_by", d), zap.Error(err))
		return
	case !removing:
		log.Info("not a removal: the condition and annotations stay on the Node for the next hotplugd", zap.String("why", why))
		return
	}
	owned, err := nodepatch.Prune(ctx, client, node, dryRun)
	if err != nil {
		log.Error("hotplugd is being removed, but its condition and annotations could not be removed from the Node: run hotplugd prune",
			zap.String("why", why), zap.Error(err))
		return
	}
	log.Info("hotplugd is being removed: "+describeOwned(owned, dryRun)+" on the Node", zap.String("why", why), zap.String("node", node))
}

// kubeletArgs are the kubelet arguments --kubelet-config stands for; nil:
// discover the running kubelet.
func (o *runOptions) kubeletArgs() []string {
	if o.KubeletConfig == "" {
		return nil
	}
	return []string{"--config", o.KubeletConfig}
}

// wouldRefuse is the kubelet's start-up verdict on this machine
// (pkg/kubeletstart): an error in the kubelet's words when it would refuse
// to start, nil when it would start or hotplugd cannot judge.
func wouldRefuse(f *kubeletwatch.Facts, snap *topology.Snapshot) error {
	err := kubeletstart.Check(kubeletstart.Input{
		Config: f.Kubelet.Config, AllocatableIgnoresEviction: f.Kubelet.AllocatableIgnoresEviction,
		Release: f.Release, Snapshot: snap,
	})
	if errors.Is(err, kubeletstart.ErrRefused) {
		return err
	}
	return nil
}

// control is how the kubelet is restarted: the restart command when given,
// else its systemd unit.
func (o *runOptions) control(log *zap.Logger) (remedy.Restarter, error) {
	if o.KubeletRestartCommand != "" {
		return kubeletctl.NewCommand(kubeletctl.CommandOptions{Restart: o.KubeletRestartCommand, Log: log})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return kubeletctl.NewSystemd(ctx, kubeletctl.SystemdOptions{Unit: o.KubeletUnit, Log: log})
}
