package remedy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Controller stops and starts the kubelet (pkg/kubeletctl).
type Controller interface {
	Stop(ctx context.Context) error
	Start(ctx context.Context) error
	String() string
}

// NodeView is what the remedy needs of the node reporter
// (*nodepatch.Reporter).
type NodeView interface {
	State() nodepatch.State
	Changed() <-chan struct{}
	SetNote(nodepatch.Note)
	Event(eventType, reason, message string)
	// Hold stops writing to the Node while the kubelet restarts.
	Hold(bool)
}

// Options configure a Remedier.
type Options struct {
	Mode Mode
	// Settle is how long the machine must be quiet before acting.
	Settle time.Duration
	// Interval is the rate limit: one attempt per Interval.
	Interval time.Duration
	// Timeout bounds waiting for the kubelet's healthz and then for the
	// Node to show the predicted capacity.
	Timeout time.Duration
	// OpTimeout bounds stopping or starting the kubelet (default 2m).
	OpTimeout time.Duration
	DryRun    bool

	// RootDir and Config are the kubelet's, for the state files.
	RootDir string
	Config  *kubeletv1beta1.KubeletConfiguration
	// HealthzURL is the kubelet's healthz; "" skips that wait.
	HealthzURL string
	// AllocatableIgnoresEviction is the kubelet's
	// --experimental-allocatable-ignore-eviction (the state-file checks
	// follow it).
	AllocatableIgnoresEviction bool
	// Release is the kubelet's release row; required for ModeRestartKubelet
	// (the state files are repaired by its rules).
	Release *kubeletversion.Release
	// InPlaceResize: the kubelet follows the machine itself; report only.
	InPlaceResize bool

	Control Controller
	Node    NodeView
	// Snapshot takes a full topology snapshot (for the state files).
	Snapshot func() (*topology.Snapshot, error)
	// Busy reports whether a burst is being debounced or reconciled.
	Busy func() bool

	Log        *zap.Logger
	Clock      clock.WithTicker
	HTTP       *http.Client
	Registerer prometheus.Registerer
}

// Outcome is how an attempt ended.
type Outcome string

// The outcomes.
const (
	OutcomeRemediated  Outcome = "remediated"
	OutcomeFailed      Outcome = "failed"       // rolled back
	OutcomeNeedsPerson Outcome = "needs_person" // nothing done
	OutcomeDryRun      Outcome = "dry_run"
)

// Attempt is the record of one remedy.
type Attempt struct {
	Start    time.Time
	Duration time.Duration
	Outcome  Outcome
	Err      error
	// Report is the state-file repair's report.
	Report preflight.Report
}

// Remedier executes plans. Create it with New, tell it about machine events
// with Activity, run it with Run.
type Remedier struct {
	o       Options
	log     *zap.Logger
	clock   clock.WithTicker
	wake    chan struct{}
	metrics struct {
		attempts *prometheus.CounterVec
		restarts prometheus.Counter
	}

	mu           sync.Mutex
	lastActivity time.Time
	lastAttempt  time.Time
	attempts     []Attempt
}

// New checks the options and returns a Remedier.
func New(o Options) (*Remedier, error) {
	if o.Node == nil || o.Snapshot == nil {
		return nil, errors.New("remedy: a node view and a snapshot function are required")
	}
	if o.Mode == ModeRestartKubelet && o.Release == nil {
		return nil, errors.New("remedy: --remedy=restart-kubelet needs the kubelet's release (programmer error: report only when it is unknown)")
	}
	if o.Mode == ModeRestartKubelet && o.Control == nil {
		return nil, errors.New("remedy: --remedy=restart-kubelet needs a way to stop and start the kubelet")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Busy == nil {
		o.Busy = func() bool { return false }
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 2 * time.Second}
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 2 * time.Minute
	}
	m := &Remedier{o: o, log: o.Log.Named("remedy"), clock: o.Clock, wake: make(chan struct{}, 1)}
	m.metrics.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_remedies_total",
		Help: "Remedy attempts by outcome: remediated, failed (rolled back), needs_person (nothing done), dry_run.",
	}, []string{"outcome"})
	m.metrics.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hotplugd_kubelet_restarts_total",
		Help: "Kubelet starts hotplugd asked for (rollbacks included).",
	})
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{m.metrics.attempts, m.metrics.restarts} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("remedy: %w", err)
			}
		}
	}
	return m, nil
}

// Activity records an event on the machine at t (the last trigger of a
// batch): the settle time starts again.
func (m *Remedier) Activity(t time.Time) {
	m.mu.Lock()
	if t.After(m.lastActivity) {
		m.lastActivity = t
	}
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Attempts returns the attempts so far.
func (m *Remedier) Attempts() []Attempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Attempt(nil), m.attempts...)
}

// Run decides and acts until ctx is done.
func (m *Remedier) Run(ctx context.Context) error {
	m.Activity(m.clock.Now()) // the daemon's start counts as activity
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	last := ""
	for {
		changed := m.o.Node.Changed()
		plan := m.decide()
		if s := string(plan.Action) + plan.Why; s != last {
			last = s
			if plan.Action == ActionNone {
				m.log.Debug("remedy plan", zap.Stringer("plan", plan))
			} else {
				m.log.Info("remedy plan", zap.Stringer("plan", plan))
			}
		}
		if plan.Action == ActionRestart {
			m.execute(ctx, plan)
			last = ""
			continue
		}
		var timerC <-chan time.Time
		if !plan.At.IsZero() {
			d := plan.At.Sub(m.clock.Now())
			if timer == nil {
				timer = m.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			timerC = timer.C()
		}
		// Busy has no event of its own: look again shortly.
		var busyC <-chan time.Time
		if plan.Action == ActionWait && plan.At.IsZero() {
			busyC = m.clock.After(100 * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-m.wake:
		case <-timerC:
		case <-busyC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (m *Remedier) decide() Plan {
	st := m.o.Node.State()
	m.mu.Lock()
	in := Inputs{
		Mode: m.o.Mode, Known: st.Known(), Drift: st.Drift, Now: m.clock.Now(),
		LastActivity: m.lastActivity, Settle: m.o.Settle, Busy: m.o.Busy(),
		LastAttempt: m.lastAttempt, Interval: m.o.Interval, InPlaceResize: m.o.InPlaceResize,
	}
	m.mu.Unlock()
	return Decide(in)
}

// execute runs one remedy and records it.
func (m *Remedier) execute(ctx context.Context, plan Plan) {
	start := m.clock.Now()
	m.mu.Lock()
	m.lastAttempt = start
	m.mu.Unlock()
	a := m.restart(ctx, plan)
	a.Start, a.Duration = start, m.clock.Since(start)
	m.metrics.attempts.WithLabelValues(string(a.Outcome)).Inc()
	m.mu.Lock()
	m.attempts = append(m.attempts, a)
	m.mu.Unlock()
	fields := []zap.Field{zap.String("outcome", string(a.Outcome)), zap.Duration("took", a.Duration)}
	if a.Err != nil {
		m.log.Error("remedy failed", append(fields, zap.Error(a.Err))...)
	} else {
		m.log.Info("remedy done", fields...)
	}
}

// restart is the remedy itself.
func (m *Remedier) restart(ctx context.Context, plan Plan) Attempt {
	next := m.clock.Now().Add(m.o.Interval).UTC().Format(time.RFC3339)
	snap, err := m.o.Snapshot()
	if err != nil {
		return m.fail(Attempt{}, fmt.Errorf("remedy: reading the topology: %w", err), next, false)
	}
	pf := preflight.Options{RootDir: m.o.RootDir, Config: m.o.Config, Release: m.o.Release,
		AllocatableIgnoresEviction: m.o.AllocatableIgnoresEviction, Now: m.clock.Now()}

	// Plan the repair first: when it needs a person, the kubelet is left
	// running as it is.
	pf.DryRun = true
	dry := preflight.Run(snap, pf)
	if m.o.DryRun || dry.NeedsPerson() {
		return m.planOnly(plan, dry, next)
	}

	m.log.Info("restarting the kubelet", zap.String("via", m.o.Control.String()), zap.Stringer("drift", plan.Drift),
		zap.String("state_files", oneLine(dry)))
	// The restarting kubelet's intermediate reports are not drifts.
	m.o.Node.Hold(true)
	defer m.o.Node.Hold(false)
	if err := m.op(ctx, "stopping", m.o.Control.Stop); err != nil {
		// It may be half-stopped: make sure it runs.
		m.op(ctx, "starting", m.start)
		return m.fail(Attempt{}, err, next, false)
	}
	pf.DryRun, pf.Now = false, m.clock.Now()
	report := preflight.Run(snap, pf)
	a := Attempt{Report: report}
	if report.NeedsPerson() {
		// Changed while the kubelet was stopping (it writes its state
		// files when it admits pods): start it as it was.
		m.rollback(ctx, report, pf.Now)
		return m.needsPerson(a, next)
	}
	if err := m.op(ctx, "starting", m.start); err != nil {
		m.rollback(ctx, report, pf.Now)
		return m.fail(a, err, next, true)
	}
	if err := m.verify(ctx); err != nil {
		m.rollback(ctx, report, pf.Now)
		return m.fail(a, err, next, true)
	}
	a.Outcome = OutcomeRemediated
	msg := fmt.Sprintf("restarted the kubelet (%s); it now reports %s", m.o.Control, plan.Drift.Predicted())
	if s := repaired(report); s != "" {
		msg += "; " + s
	}
	m.o.Node.SetNote(nodepatch.Note{})
	m.o.Node.Event(v1.EventTypeNormal, nodepatch.ReasonRemediated, msg)
	return a
}

func (m *Remedier) start(ctx context.Context) error {
	m.metrics.restarts.Inc()
	return m.o.Control.Start(ctx)
}

// op runs a kubelet stop or start with its own timeout.
func (m *Remedier) op(ctx context.Context, what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.OpTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return fmt.Errorf("remedy: %s the kubelet (%s): %w", what, m.o.Control, err)
	}
	return nil
}

// verify waits for the kubelet's healthz, then for the Node to show the
// prediction.
func (m *Remedier) verify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	if m.o.HealthzURL != "" {
		if err := m.waitHealthz(ctx); err != nil {
			return err
		}
	}
	for {
		changed := m.o.Node.Changed()
		st := m.o.Node.State()
		if st.Known() && !st.Drift.Stale() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("remedy: the Node still reports %s after the kubelet restart (waited %v)",
				st.Drift.Significant(), m.o.Timeout)
		case <-changed:
		}
	}
}

func (m *Remedier) waitHealthz(ctx context.Context) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.o.HealthzURL, nil)
		resp, err := m.o.HTTP.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("remedy: the kubelet's healthz %s did not answer ok within %v: %v", m.o.HealthzURL, m.o.Timeout, last)
		case <-m.clock.After(100 * time.Millisecond):
		}
	}
}

// rollback puts the old state files back and starts the kubelet as it was.
// The restore's own backup (of the repaired file) is stamped after the
// repair, so the two never share a name.
func (m *Remedier) rollback(ctx context.Context, report preflight.Report, repairedAt time.Time) {
	at := m.clock.Now()
	if !at.After(repairedAt) {
		at = repairedAt.Add(time.Nanosecond)
	}
	m.log.Warn("rolling back: restoring the state files and restarting the kubelet as it was")
	m.op(ctx, "stopping", m.o.Control.Stop)
	for _, r := range report.Results {
		if r.Verdict != preflight.Repaired || r.Backup == "" {
			continue
		}
		data, err := statefile.Read(r.Backup)
		if err == nil {
			_, err = statefile.Write(r.Path, data, at)
		}
		if err != nil {
			m.log.Error("restoring a state file failed; restore it by hand", zap.String("file", r.Path),
				zap.String("backup", r.Backup), zap.Error(err))
			continue
		}
		m.log.Info("state file restored", zap.String("file", r.Path), zap.String("from", r.Backup))
	}
	if err := m.op(ctx, "starting", m.start); err != nil {
		m.log.Error("starting the kubelet after the rollback failed", zap.Error(err))
	}
}

func (m *Remedier) fail(a Attempt, err error, next string, rolledBack bool) Attempt {
	a.Outcome, a.Err = OutcomeFailed, err
	msg := err.Error()
	if rolledBack {
		msg += "; rolled back (state files restored, kubelet restarted as it was)"
	}
	msg += "; next attempt not before " + next
	m.o.Node.SetNote(nodepatch.Note{Reason: nodepatch.ReasonRemediationFailed, Message: msg})
	m.o.Node.Event(v1.EventTypeWarning, nodepatch.ReasonRemediationFailed, msg)
	return a
}

func (m *Remedier) needsPerson(a Attempt, next string) Attempt {
	a.Outcome = OutcomeNeedsPerson
	var why, todo []string
	for _, r := range a.Report.Results {
		if r.Verdict == preflight.NeedsPerson {
			why = append(why, r.File+": "+r.Why)
			todo = append(todo, r.Todo)
		}
	}
	a.Err = errors.New(strings.Join(why, "; "))
	msg := fmt.Sprintf("the kubelet was not restarted: %s; what to do: %s; next check not before %s",
		strings.Join(why, "; "), strings.Join(todo, "; "), next)
	m.o.Node.SetNote(nodepatch.Note{Reason: nodepatch.ReasonNeedsDrain, Message: msg})
	m.o.Node.Event(v1.EventTypeWarning, nodepatch.ReasonNeedsDrain, msg)
	return a
}

// planOnly handles a dry run, and a repair that needs a person, before
// anything is touched.
func (m *Remedier) planOnly(plan Plan, dry preflight.Report, next string) Attempt {
	a := Attempt{Report: dry}
	if dry.NeedsPerson() {
		return m.needsPerson(a, next)
	}
	a.Outcome = OutcomeDryRun
	m.log.Info("dry run: would restart the kubelet", zap.String("via", m.o.Control.String()),
		zap.Stringer("drift", plan.Drift), zap.String("state_files", oneLine(dry)))
	return a
}

func repaired(r preflight.Report) string {
	var parts []string
	for _, res := range r.Results {
		if res.Verdict == preflight.Repaired {
			parts = append(parts, fmt.Sprintf("repaired %s (backup %s)", res.File, res.Backup))
		}
	}
	return strings.Join(parts, ", ")
}

func oneLine(r preflight.Report) string {
	parts := make([]string, len(r.Results))
	for i, res := range r.Results {
		parts[i] = res.File + " " + string(res.Verdict)
	}
	return strings.Join(parts, ", ")
}
