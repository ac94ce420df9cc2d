package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/debounce"
	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// Config is what the daemon needs; cmd/hotplugd fills it from flags.
type Config struct {
	// Version is hotplugd's, published as hotplugd_build_info ("": not).
	Version string
	// SysfsRoot and ProcfsRoot are where the topology is read.
	SysfsRoot, ProcfsRoot string
	// QuietWindow and MaxDelay configure the debouncer.
	QuietWindow, MaxDelay time.Duration
	// Resync is the period of the safety-net full re-read; 0 disables it.
	Resync time.Duration
	// MetricsAddr is where /metrics and /healthz listen; "" disables.
	MetricsAddr string

	Log      *zap.Logger
	Notifier Notifier         // nil: no sd_notify
	Clock    clock.WithTicker // nil: the real clock

	// Uevents and HugePages replace the real sources in tests.
	Uevents   UeventSource
	HugePages HugePageSource
	// OnReconcile, when set, is called after every reconcile, after the
	// hooks, from the reconcile goroutine: it must not block (tests and
	// benchmarks).
	OnReconcile func(Result)
	// Metrics, when set, are the metrics to count on (so that other
	// packages' metrics share the registry); nil: new ones.
	Metrics *Metrics
}

// Notifier is the service manager (sd_notify).
type Notifier interface {
	Ready(status string) error
	Status(status string) error
	Stopping() error
	RunWatchdog(ctx context.Context, healthy func() bool) error
}

// UeventSource delivers kernel uevents (pkg/uevent).
type UeventSource interface {
	Run(ctx context.Context, h uevent.Handler) error
	Close() error
}

// HugePageSource delivers hugepage file writes (pkg/hugepagewatch).
type HugePageSource interface {
	Run(ctx context.Context, h hugepagewatch.Handler) error
	Rescan() ([]string, error)
	Close() error
}

// Result is what one reconcile found.
type Result struct {
	Batch    debounce.Batch
	Snapshot *topology.Snapshot
	// Changes are the differences from the previous snapshot; every
	// resource of the first snapshot is a change from nothing.
	Changes []topology.Change
	// Initial is true for the first snapshot.
	Initial bool
	// Latency is from the batch's first trigger to the diff.
	Latency time.Duration
	// Timing is when the reconcile's stages ended.
	Timing Timing
	Err    error
}

// Timing is when each stage of a reconcile ended, on the daemon's clock:
// with the batch's Last and Due it splits the detection latency into the
// quiet window, the lateness of the debounce timer and the scheduler
// (Start - Due), the read of sysfs and procfs, the diff and the report. The
// debug log entry "reconcile timing" carries it.
type Timing struct {
	// Start is when the reconcile began.
	Start time.Time
	// Read is when the snapshot had been read (hugepage files rescanned
	// and the topology read).
	Read time.Time
	// Diffed is when it had been diffed with the last one.
	Diffed time.Time
	// Reported is when its changes had been logged and published.
	Reported time.Time
}

// EventDriven reports whether the batch was opened by something that
// happened on the machine (not the start or the periodic resync).
func (r Result) EventDriven() bool { return eventDriven(r.Batch) }

// Daemon is the running event loop.
type Daemon struct {
	cfg       Config
	log       *zap.Logger
	fs        topology.FS
	clock     clock.WithTicker
	metrics   *Metrics
	debouncer *debounce.Debouncer

	uevents   UeventSource
	hugepages HugePageSource

	mu      sync.Mutex // guards last and lastErr
	last    *topology.Snapshot
	lastErr error

	// busySince is when the running reconcile started, in unix nanos; 0
	// when none runs. It is the watchdog's (responsive); Busy is the
	// debouncer's, which also covers a batch not yet handed over.
	busySince atomic.Int64

	hooks []func(Result)
	tasks []func(context.Context) error

	ueventHooks []func(uevent.Event)
}

// AddHook has f called after every reconcile, from the reconcile
// goroutine (it must not block). The control loop (pkg/control) is fed
// this way. Call it before Run.
func (d *Daemon) AddHook(f func(Result)) { d.hooks = append(d.hooks, f) }

// AddUeventHook has f called with every relevant uevent (see
// uevent.Event.Relevant), from the uevent reader's goroutine, before the
// event triggers a reconcile. f must not block: while it runs no uevent is
// read, and the kernel drops the ones that do not fit in the socket's
// buffer. Call it before Run.
func (d *Daemon) AddUeventHook(f func(uevent.Event)) { d.ueventHooks = append(d.ueventHooks, f) }

// AddTask runs f alongside the loop, under the same cancellation, once the
// first snapshot was taken and the hooks have seen it (the control loop,
// the watches it reads and its Node writer; pkg/cpuonline). An error from
// it stops the daemon. Call it before Run.
func (d *Daemon) AddTask(f func(ctx context.Context) error) { d.tasks = append(d.tasks, f) }

// New opens the event sources (they buffer from now on, so nothing that
// happens before Run is lost) and returns the daemon.
func New(cfg Config) (*Daemon, error) {
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Notifier == nil {
		cfg.Notifier = noNotifier{}
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics()
	}
	if cfg.Version != "" {
		if err := cfg.Metrics.RegisterBuildInfo(cfg.Version); err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
	}
	d := &Daemon{
		cfg:       cfg,
		log:       cfg.Log.Named("daemon"),
		fs:        topology.NewFS(cfg.SysfsRoot, cfg.ProcfsRoot),
		clock:     cfg.Clock,
		metrics:   cfg.Metrics,
		debouncer: debounce.New(cfg.Clock, cfg.QuietWindow, cfg.MaxDelay),
		uevents:   cfg.Uevents,
		hugepages: cfg.HugePages,
	}
	if d.uevents == nil {
		l, err := uevent.Listen(uevent.Config{Logger: cfg.Log.Named("uevent")})
		if err != nil {
			return nil, fmt.Errorf("daemon: %w", err)
		}
		d.log.Info("listening to kernel uevents", zap.Int("receive_buffer", l.ReceiveBuffer()))
		d.uevents = l
	}
	if d.hugepages == nil {
		w, err := hugepagewatch.New(d.fs.SysPath(), d.fs.ProcPath(), cfg.Log.Named("hugepagewatch"))
		if err != nil {
			d.uevents.Close()
			return nil, fmt.Errorf("daemon: %w", err)
		}
		d.log.Info("watching hugepage files", zap.Int("files", len(w.Files())))
		d.hugepages = w
	}
	return d, nil
}

// Metrics returns the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// Busy reports whether a burst of events is still arriving or being
// reconciled: true from a trigger until the reconcile of its batch, hooks
// included, has returned, and during the first snapshot. The remedy never
// acts then.
func (d *Daemon) Busy() bool { return d.debouncer.Pending() }

// Idle returns a channel that is closed once the daemon is idle (Busy
// false): at once when it is idle now, else when Busy turns from true to
// false, that is once the last reconcile and its hooks have returned with
// no trigger waiting. A consumer that must wait for the end of a burst
// selects on it instead of polling Busy:
//
//	idle := d.Idle() // before Busy: a transition in between closes it
//	if d.Busy() {
//		select {
//		case <-idle: // Busy turned false: decide again
//		case <-ctx.Done():
//		}
//	}
//
// Each time the daemon turns busy it starts a new channel: take Idle again
// for every wait. A channel taken while idle is already closed, so select
// on it only after Busy read true. Once Run has returned, a burst that was
// pending stays pending and its channel is never closed.
func (d *Daemon) Idle() <-chan struct{} { return d.debouncer.Idle() }

// FS is the topology reader, for a full snapshot.
func (d *Daemon) FS() topology.FS { return d.fs }

// Trigger asks for a reconcile (e.g. on SIGHUP).
func (d *Daemon) Trigger(t debounce.Trigger) { d.debouncer.Trigger(t) }

// Last returns the last snapshot, nil before the first.
func (d *Daemon) Last() *topology.Snapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// Run runs the loop until ctx is done or a source fails. It takes the first
// snapshot before it tells the service manager it is ready. Whatever it
// returns with, it has cancelled and waited for every goroutine it started,
// and then closed the sources.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.uevents.Close()
	defer d.hugepages.Close()
	ctx, cancel := context.WithCancel(ctx)
	g, ctx := errgroup.WithContext(ctx)
	// Deferred after the Closes, so run first: the sources are closed only
	// once their Run has returned.
	defer func() {
		cancel()
		g.Wait()
	}()

	g.Go(func() error { return d.uevents.Run(ctx, ueventHandler{d}) })
	g.Go(func() error { return d.hugepages.Run(ctx, hugePageHandler{d}) })

	if d.cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", d.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("daemon: metrics: %w (choose another --metrics-addr, or \"\" to disable)", err)
		}
		d.log.Info("serving metrics and health", zap.String("addr", ln.Addr().String()))
		g.Go(func() error { return d.serve(ctx, ln) })
	}

	// The first snapshot is taken at once, not debounced: until it exists
	// the daemon is not ready. It is a batch of the debouncer all the same,
	// so that Busy covers it.
	var res Result
	d.debouncer.Fire(debounce.TriggerStart, func(b debounce.Batch) { res = d.reconcile(b) })
	if res.Err != nil {
		return fmt.Errorf("daemon: first snapshot: %w", res.Err)
	}
	if err := d.cfg.Notifier.Ready(statusLine(res.Snapshot)); err != nil {
		d.log.Warn("sd_notify READY failed", zap.Error(err))
	}

	g.Go(func() error {
		return d.debouncer.Run(ctx, func(b debounce.Batch) { d.reconcile(b) })
	})
	if d.cfg.Resync > 0 {
		g.Go(func() error { return d.resync(ctx) })
	}
	for _, task := range d.tasks {
		g.Go(func() error { return task(ctx) })
	}
	g.Go(func() error { return d.cfg.Notifier.RunWatchdog(ctx, d.responsive) })

	err := g.Wait()
	if err := d.cfg.Notifier.Stopping(); err != nil {
		d.log.Debug("sd_notify STOPPING failed", zap.Error(err))
	}
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// resync triggers the safety-net full re-read every Resync.
func (d *Daemon) resync(ctx context.Context) error {
	t := d.clock.NewTicker(d.cfg.Resync)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			d.debouncer.Trigger(debounce.TriggerResync)
		}
	}
}

func (d *Daemon) rescanHugePages() {
	added, err := d.hugepages.Rescan()
	if err != nil {
		d.log.Warn("rescanning hugepage files failed", zap.Error(err))
	}
	if len(added) > 0 {
		d.log.Info("watching new hugepage files", zap.Strings("files", added))
	}
}

// reconcile takes a snapshot, diffs it with the last one and reports the
// differences.
func (d *Daemon) reconcile(b debounce.Batch) Result {
	start := d.clock.Now()
	d.busySince.Store(start.UnixNano())
	defer d.busySince.Store(0)

	res := Result{Batch: b, Timing: Timing{Start: start}}
	d.metrics.Reconciles.WithLabelValues(string(b.Cause)).Inc()
	// NUMA nodes come and go with memory hotplug, and the kernel creates a
	// new node's hugepage files after its uevent: look for new files on
	// every reconcile (a directory walk, ~0.1 ms), not per event.
	d.rescanHugePages()
	snap, err := d.fs.CapacitySnapshot()
	res.Timing.Read = d.clock.Now()
	if err != nil {
		res.Err = err
		d.metrics.ReconcileErrors.Inc()
		d.log.Error("reading the topology failed; the next trigger or resync retries",
			zap.Error(err), zap.String("trigger", string(b.Cause)))
		d.mu.Lock()
		d.lastErr = err
		d.mu.Unlock()
		d.done(res)
		return res
	}
	d.mu.Lock()
	old := d.last
	d.last, d.lastErr = snap, nil
	d.mu.Unlock()

	res.Snapshot = snap
	res.Initial = old == nil
	res.Changes = topology.Diff(old, snap)
	end := d.clock.Now()
	res.Timing.Diffed = end
	res.Latency = end.Sub(b.First)
	d.metrics.ReconcileDuration.Observe(end.Sub(start).Seconds())
	d.metrics.LastReconcile.Set(float64(end.UnixNano()) / 1e9)
	capacity := snap.Capacity()
	d.metrics.setCapacity(capacity)

	switch {
	case res.Initial:
		d.log.Info("topology", capacityFields(capacity)...)
	case len(res.Changes) > 0:
		d.metrics.TopologyChanges.Inc()
		if eventDriven(b) {
			d.metrics.DetectionLatency.Observe(res.Latency.Seconds())
		}
		for _, c := range res.Changes {
			fields := []zap.Field{
				zap.String("resource", c.Resource),
				zap.String("old", c.Old),
				zap.String("new", c.New),
				zap.String("trigger", string(b.Cause)),
				zap.Int("events", b.Count),
				zap.Duration("latency", res.Latency),
			}
			if c.Node >= 0 {
				fields = append(fields, zap.Int("numa_node", c.Node))
			}
			d.log.Info("topology changed: "+c.String(), fields...)
		}
		if err := d.cfg.Notifier.Status(statusLine(snap)); err != nil {
			d.log.Debug("sd_notify STATUS failed", zap.Error(err))
		}
	default:
		d.log.Debug("no change", zap.String("trigger", string(b.Cause)), zap.Int("events", b.Count),
			zap.Duration("took", end.Sub(start)))
	}
	res.Timing.Reported = d.clock.Now()
	d.logTiming(res)
	d.done(res)
	return res
}

// logTiming logs a reconcile's stages at debug level, after its changes so
// that it does not delay them. Durations are from the previous stage; the
// trigger times are absolute, to compare with when the change happened.
func (d *Daemon) logTiming(res Result) {
	ce := d.log.Check(zapcore.DebugLevel, "reconcile timing")
	if ce == nil {
		return
	}
	t, b := res.Timing, res.Batch
	ce.Write(
		zap.String("trigger", string(b.Cause)),
		zap.Int("events", b.Count),
		zap.Time("first_trigger", b.First),
		zap.Time("last_trigger", b.Last),
		zap.Time("due", b.Due),
		zap.Duration("late", t.Start.Sub(b.Due)),
		zap.Duration("read", t.Read.Sub(t.Start)),
		zap.Duration("diff", t.Diffed.Sub(t.Read)),
		zap.Duration("report", t.Reported.Sub(t.Diffed)),
		zap.Time("reported", t.Reported),
	)
}

func (d *Daemon) done(res Result) {
	for _, h := range d.hooks {
		h(res)
	}
	if d.cfg.OnReconcile != nil {
		d.cfg.OnReconcile(res)
	}
}

// eventDriven reports whether a batch was opened by something that happened
// (not the start or the periodic resync), the case detection latency is
// about.
func eventDriven(b debounce.Batch) bool {
	return b.Cause != debounce.TriggerStart && b.Cause != debounce.TriggerResync
}

// responsive is the watchdog's health: no reconcile has been running for
// longer than a minute (a hung sysfs read, a deadlock).
func (d *Daemon) responsive() bool {
	since := d.busySince.Load()
	return since == 0 || d.clock.Since(time.Unix(0, since)) < time.Minute
}

// serve answers /metrics and /healthz until ctx is done.
func (d *Daemon) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: d.handler(), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("daemon: metrics: %w", err)
	case <-ctx.Done():
	}
	// Returns once the server and its connections are done (or cut off),
	// so that nothing of it outlives Run.
	shutdown, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		srv.Close()
	}
	<-served
	return nil
}

// handler serves /metrics and /healthz. The metrics are never compressed,
// whatever the scraper accepts: the page is about 13 KB, read over the
// node's own network, and promhttp's gzip writer, built for every scrape,
// keeps about 1 MiB more of the daemon resident (issue 23: BenchmarkIdle's
// rss-after-scrape).
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.metrics.Registry, promhttp.HandlerOpts{DisableCompression: true}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		last, err := d.last, d.lastErr
		d.mu.Unlock()
		switch {
		case !d.responsive():
			http.Error(w, "reconcile stuck", http.StatusInternalServerError)
		case err != nil:
			http.Error(w, "last reconcile failed: "+err.Error(), http.StatusInternalServerError)
		case last == nil:
			http.Error(w, "no snapshot yet", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	return mux
}

// statusLine is the sd_notify STATUS: the capacity a kubelet would report.
func statusLine(s *topology.Snapshot) string {
	c := s.Capacity()
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, string(n))
	}
	slices.Sort(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		q := c[v1.ResourceName(n)]
		parts = append(parts, n+"="+q.String())
	}
	return "capacity " + strings.Join(parts, " ")
}

func capacityFields(c v1.ResourceList) []zap.Field {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, string(n))
	}
	slices.Sort(names)
	fields := make([]zap.Field, 0, len(names))
	for _, n := range names {
		q := c[v1.ResourceName(n)]
		fields = append(fields, zap.String(n, q.String()))
	}
	return fields
}

// ueventHandler feeds uevents into the debouncer.
type ueventHandler struct{ d *Daemon }

func (h ueventHandler) Event(e uevent.Event) {
	h.d.metrics.Uevents.WithLabelValues(e.Subsystem, string(e.Action)).Inc()
	for _, f := range h.d.ueventHooks {
		f(e)
	}
	h.d.debouncer.Trigger(debounce.TriggerUevent)
}

func (h ueventHandler) Overflow(err error) {
	h.d.metrics.UeventOverflows.Inc()
	h.d.log.Warn("uevents lost; re-reading everything", zap.Error(err))
	h.d.debouncer.Trigger(debounce.TriggerOverflow)
}

// hugePageHandler feeds hugepage file writes into the debouncer.
type hugePageHandler struct{ d *Daemon }

func (h hugePageHandler) Changed(path string) {
	h.d.metrics.HugePageEvents.Inc()
	h.d.debouncer.Trigger(debounce.TriggerHugePages)
}

func (h hugePageHandler) Overflow(err error) {
	h.d.metrics.HugePageOverflows.Inc()
	h.d.log.Warn("hugepage watch lost events; re-reading everything", zap.Error(err))
	h.d.debouncer.Trigger(debounce.TriggerOverflow)
}

type noNotifier struct{}

func (noNotifier) Ready(string) error  { return nil }
func (noNotifier) Status(string) error { return nil }
func (noNotifier) Stopping() error     { return nil }
func (noNotifier) RunWatchdog(ctx context.Context, _ func() bool) error {
	return nil
}
