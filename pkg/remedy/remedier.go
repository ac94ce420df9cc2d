package remedy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Restarter asks the kubelet's supervisor for a restart
// (pkg/kubeletctl): systemd's RestartUnit, or one restart command. Once
// asked, the supervisor owns the restart: the kubelet's stop, the repair in
// its start and the start itself happen whatever becomes of hotplugd.
type Restarter interface {
	Restart(ctx context.Context) error
	String() string
}

// Starter is implemented by a Restarter that can also start the kubelet
// (systemd's StartUnit, a no-op on a running unit). It is used only for a
// journal record an earlier hotplugd left in the middle of its own stop
// and start, which may mean a stopped kubelet.
type Starter interface {
	Start(ctx context.Context) error
}

// NodeView is what the remedy reads of the node reporter
// (*nodepatch.Reporter): the Node as last seen against the prediction. The
// remedy never writes to the Node: what it did goes into the Journal, which
// the reporter reads for the condition, the Events and holding its writes
// while the kubelet restarts.
type NodeView interface {
	State() nodepatch.State
	Changed() <-chan struct{}
}

// KubeletSource is where the remedy learns about the kubelet
// (*kubeletwatch.Watcher): Current is the last view, Refresh discovers it
// again (before every remedy, and to see the new process after one).
type KubeletSource interface {
	Current() *kubeletwatch.Facts
	Refresh(ctx context.Context) *kubeletwatch.Facts
	// Changed is closed at the next change of the facts.
	Changed() <-chan struct{}
}

// UnitVerdict is what the kubelet's supervisor says of the restart it
// would carry out (pkg/kubeletctl's unit inspection, wired by the
// command): Why is "" when it starts the kubelet that runs now, with
// hotplugd preflight in its start where needsRepair.
type UnitVerdict struct {
	Why, Todo string
}

// Options configure a Remedier.
type Options struct {
	Mode Mode
	// Settle is how long the machine must be quiet before acting.
	Settle time.Duration
	// Interval is the rate limit: one attempt per Interval, counted from
	// the journal, so across hotplugd's restarts.
	Interval time.Duration
	// MaxPerDay bounds the restarts asked for in any 24 hours (0: no
	// bound), counted from the journal.
	MaxPerDay int
	// Timeout bounds waiting for the new kubelet process, its healthz and
	// then for the Node to show the predicted capacity.
	Timeout time.Duration
	// OpTimeout bounds waiting for the supervisor's restart (default 2m;
	// the restart goes on in the supervisor past it).
	OpTimeout time.Duration
	// UnderwayBound: a restart under way in the journal older than this
	// when hotplugd starts is not verified (default 15m): recorded as
	// interrupted, nothing is done.
	UnderwayBound time.Duration
	// KubeletGrace is how long a kubelet that has just started has to
	// report its Node before a drift counts (0: none).
	KubeletGrace time.Duration
	// AllowReadinessReset lets a remedy restart a kubelet whose restart
	// sets every running container's ready status to false (1.34, or
	// ChangeContainerStatusOnKubeletRestart on).
	AllowReadinessReset bool
	DryRun              bool

	// Kubelet is the kubelet as discovered: its configuration, release,
	// state directory, process and healthz.
	Kubelet KubeletSource
	// WouldRefuse says why the kubelet would refuse to start on snap with
	// its configuration (pkg/kubeletstart), nil when it would start; nil
	// func: not checked.
	WouldRefuse func(f *kubeletwatch.Facts, snap *topology.Snapshot) error
	// Unit judges the supervisor's side of a restart (the unit is not
	// masked or awaiting a daemon-reload, would start the running command
	// line, runs hotplugd preflight in the kubelet's start when
	// needsRepair); nil: nothing to judge there (a restart command, which
	// runs preflight by the operator's word).
	Unit func(ctx context.Context, f *kubeletwatch.Facts, needsRepair bool) UnitVerdict
	// Journal is the record of remedies under way and tried; nil: one in
	// memory (nothing survives a restart).
	Journal *journal.Journal

	Control Restarter
	Node    NodeView
	// Snapshot takes a full topology snapshot (for the dry-run repair).
	Snapshot func() (*topology.Snapshot, error)
	// Busy reports whether a burst is being debounced or reconciled, and
	// Idle returns a channel closed once it is not (daemon.Daemon's);
	// without Idle, Busy is polled every 100 ms.
	Busy func() bool
	Idle func() <-chan struct{}

	Log        *zap.Logger
	Clock      clock.WithTicker
	HTTP       *http.Client
	Registerer prometheus.Registerer
}

// Outcome is how an attempt ended (journal.Outcome).
type Outcome = journal.Outcome

// The outcomes.
const (
	OutcomeRemediated  = journal.OutcomeRemediated
	OutcomeFailed      = journal.OutcomeFailed
	OutcomeNeedsPerson = journal.OutcomeNeedsPerson
	OutcomeDryRun      = journal.OutcomeDryRun
	OutcomeRefused     = journal.OutcomeRefused
	OutcomeInterrupted = journal.OutcomeInterrupted
	OutcomeWithheld    = journal.OutcomeWithheld
	OutcomeUnverified  = journal.OutcomeUnverified
)

// Attempt is the record of one remedy.
type Attempt struct {
	Start    time.Time
	Duration time.Duration
	Outcome  Outcome
	Err      error
	// Key is the (prediction, kubelet configuration) it was for.
	Key string
	// Reason, Message and Warning are what the Node says about it (the
	// journal entry's).
	Reason, Message string
	Warning         bool
	// Restarted: the supervisor was asked to restart the kubelet.
	Restarted bool
	// Report is the dry-run repair's report (what preflight in the
	// kubelet's start will do).
	Report preflight.Report
}

// Remedier executes plans. Create it with New, tell it about machine events
// with Activity, run it with Run.
type Remedier struct {
	o       Options
	log     *zap.Logger
	clock   clock.WithTicker
	wake    chan struct{}
	journal *journal.Journal
	metrics struct {
		attempts *prometheus.CounterVec
		restarts prometheus.Counter
	}

	mu           sync.Mutex
	lastActivity time.Time
	// lastMemoryDown is the last memory offline or remove uevent.
	lastMemoryDown time.Time
	// lastTry is the last execute's start, journaled or not (a topology
	// read that failed is not journaled, and is rate-limited too).
	lastTry time.Time
	// checked is the key the last ActionCheck found restartable, in the
	// wait after the attempt that started at checkedAfter: a later attempt
	// makes it stale (the state files may have changed meanwhile).
	checked      string
	checkedAfter time.Time
	attempts     []Attempt
}

// New checks the options and returns a Remedier.
func New(o Options) (*Remedier, error) {
	if o.Node == nil || o.Snapshot == nil || o.Kubelet == nil {
		return nil, errors.New("remedy: a node view, a kubelet source and a snapshot function are required")
	}
	if o.Mode == ModeRestartKubelet && o.Control == nil {
		return nil, errors.New("remedy: --remedy=restart-kubelet needs a way to restart the kubelet")
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
	if o.UnderwayBound <= 0 {
		o.UnderwayBound = 15 * time.Minute
	}
	if o.Journal == nil {
		o.Journal, _ = journal.Open("")
	}
	m := &Remedier{o: o, log: o.Log.Named("remedy"), clock: o.Clock, wake: make(chan struct{}, 1), journal: o.Journal}
	m.metrics.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_remedies_total",
		Help: "Remedy attempts by outcome: remediated, failed, unverified (restarted); needs_person, refused, withheld (nothing done); interrupted, dry_run.",
	}, []string{"outcome"})
	m.metrics.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hotplugd_kubelet_restarts_total",
		Help: "Kubelet restarts hotplugd asked the kubelet's supervisor for.",
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

// MemoryDown records a memory block's offline or remove uevent at t: a
// memory capacity decrease after it is a hot-remove, one without it is
// reported only (UnexplainedDecrease).
func (m *Remedier) MemoryDown(t time.Time) {
	m.mu.Lock()
	if t.After(m.lastMemoryDown) {
		m.lastMemoryDown = t
	}
	m.mu.Unlock()
}

// Attempts returns the attempts so far.
func (m *Remedier) Attempts() []Attempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Attempt(nil), m.attempts...)
}

// Run first settles a remedy a previous hotplugd left under way (verifies
// it; it never stops or restarts the kubelet for it), then decides and acts
// until ctx is done.
func (m *Remedier) Run(ctx context.Context) error {
	if u := m.journal.Underway(); u != nil {
		m.recover(ctx, *u)
	}
	m.Activity(m.clock.Now()) // the daemon's start counts as activity
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	last := ""
	for {
		if ctx.Err() != nil {
			return nil
		}
		// Taken before deciding: a change in between closes them.
		changed, kubeletC := m.o.Node.Changed(), m.o.Kubelet.Changed()
		var idle <-chan struct{}
		if m.o.Idle != nil {
			idle = m.o.Idle() // before Busy is read: a transition in between closes it
		}
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
		if plan.Action == ActionCheck {
			m.check(ctx, plan)
			last = ""
			continue
		}
		var timerC <-chan time.Time
		if !plan.At.IsZero() {
			d := plan.At.Sub(m.clock.Now())
			if d <= 0 {
				// The time came between deciding and now: decide
				// again rather than arm a timer that is already due
				// (a fake clock would fire it only on its next step).
				continue
			}
			if timer == nil {
				timer = m.clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			timerC = timer.C()
		}
		// Busy: decide again once the daemon is idle.
		var busyC <-chan time.Time
		var idleC <-chan struct{}
		if plan.Action == ActionWait && plan.At.IsZero() {
			if idle != nil {
				idleC = idle
			} else {
				busyC = m.clock.After(100 * time.Millisecond)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-kubeletC:
		case <-m.wake:
		case <-timerC:
		case <-busyC:
		case <-idleC:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

func (m *Remedier) decide() Plan {
	st := m.o.Node.State()
	facts := m.o.Kubelet.Current()
	now := m.clock.Now()
	in := Inputs{
		Mode: m.o.Mode, Known: st.Known(), Drift: st.Drift, Now: now,
		Settle: m.o.Settle, Busy: m.o.Busy(), Interval: m.o.Interval,
		LastAttempt: m.lastAttempt(), MaxPerDay: m.o.MaxPerDay,
	}
	if m.o.MaxPerDay > 0 {
		in.Restarts = m.journal.RestartsSince(now.Add(-day))
	}
	if facts != nil && !facts.Started.IsZero() {
		in.KubeletFresh = facts.Started.Add(m.o.KubeletGrace)
	}
	if facts.Remediable() {
		in.Remediable = true
		in.InPlaceResize = facts.Release.ResizesInPlace(facts.Kubelet.Config.FeatureGates)
	} else {
		in.NotRemediable = "the kubelet's state files or rules are not known"
		if l := facts.Limit(); l != "" {
			in.NotRemediable = l
		}
	}
	if st.Prediction != nil {
		// The predictor's key, which the reporter's note uses too.
		if in.Key = st.Prediction.Key; in.Key == "" {
			in.Key = Key(*st.Prediction, facts)
		}
		if e, ok := m.journal.Last(in.Key); ok {
			in.Previous = &e
		}
	}
	m.mu.Lock()
	in.LastActivity = m.lastActivity
	in.UnexplainedDecrease = memoryDecrease(st.Drift.Significant()) &&
		(m.lastMemoryDown.IsZero() || (facts != nil && m.lastMemoryDown.Before(facts.Started)))
	if m.checkedAfter.Equal(in.LastAttempt) {
		in.Checked = m.checked
	}
	m.mu.Unlock()
	return Decide(in)
}

// memoryDecrease says whether d predicts less memory capacity than the
// Node reports.
func memoryDecrease(d nodepatch.Drift) bool {
	for _, x := range d {
		if x.Field == nodepatch.FieldCapacity && x.Resource == v1.ResourceMemory && x.Predicted.Cmp(x.Reported) < 0 {
			return true
		}
	}
	return false
}

// day is the daily budget's window.
const day = 24 * time.Hour

// Key identifies what a remedy is for: the prediction (what the restarted
// kubelet would report) and the kubelet's configuration.
func Key(p nodepatch.Prediction, f *kubeletwatch.Facts) string {
	h := sha256.New()
	fmt.Fprintf(h, "kubelet %s\n", f.Fingerprint())
	for _, l := range []struct {
		name string
		list v1.ResourceList
	}{{"capacity", p.Capacity}, {"allocatable", p.Allocatable}} {
		names := make([]string, 0, len(l.list))
		for n := range l.list {
			names = append(names, string(n))
		}
		slices.Sort(names)
		for _, n := range names {
			q := l.list[v1.ResourceName(n)]
			fmt.Fprintf(h, "%s %s %s\n", l.name, n, q.String())
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// execute runs one remedy and records it.
func (m *Remedier) execute(ctx context.Context, plan Plan) {
	start := m.clock.Now()
	a := m.restart(ctx, plan, start)
	if a.Outcome == "" {
		return // nothing was tried
	}
	m.mu.Lock()
	m.lastTry = start
	m.mu.Unlock()
	m.record(a, start)
}

func (m *Remedier) record(a Attempt, start time.Time) {
	a.Start, a.Duration = start, m.clock.Since(start)
	m.metrics.attempts.WithLabelValues(string(a.Outcome)).Inc()
	m.mu.Lock()
	m.attempts = append(m.attempts, a)
	m.mu.Unlock()
	fields := []zap.Field{zap.String("outcome", string(a.Outcome)), zap.Duration("took", a.Duration), zap.String("key", a.Key)}
	if a.Err != nil {
		m.log.Error("remedy failed", append(fields, zap.Error(a.Err))...)
	} else {
		m.log.Info("remedy done", fields...)
	}
}

// finish writes the outcome to the journal (the remedy under way, if any,
// is cleared).
func (m *Remedier) finish(a Attempt, start time.Time) Attempt {
	if a.Outcome == OutcomeDryRun {
		return a
	}
	e := journal.Entry{Key: a.Key, Start: start, Outcome: a.Outcome, Reason: a.Reason, Message: a.Message, Warning: a.Warning, Restarted: a.Restarted}
	if a.Err != nil {
		e.Why = a.Err.Error()
	}
	if err := m.journal.Finish(e); err != nil {
		m.log.Error("writing the remedy journal failed", zap.Error(err))
	}
	return a
}

// check is ActionCheck: while the rate limit or the daily budget holds a
// restart back, it judges the restart as restart would, touching nothing.
// A kubelet that would refuse, state files that need a person, or a
// restart hotplugd cannot judge end as that attempt would have
// (journaled, reported, not repeated for the key). Anything else (a
// restart would be tried, the machine could not be read, a dry run) leaves
// it to the restart at the wait's end: the key is remembered as checked.
func (m *Remedier) check(ctx context.Context, plan Plan) {
	after := m.lastAttempt()
	if !m.o.DryRun {
		start := m.clock.Now()
		j := m.judge(ctx, plan, start)
		if j.done && (j.a.Outcome == OutcomeRefused || j.a.Outcome == OutcomeNeedsPerson || j.a.Outcome == OutcomeWithheld) {
			m.mu.Lock()
			m.lastTry = start
			m.mu.Unlock()
			m.record(j.a, start)
			return
		}
		if !j.done {
			m.log.Info("held back: a restart would be tried; waiting", zap.String("key", plan.Key),
				zap.Time("not_before", plan.At), zap.String("state_files", oneLine(j.dry)))
		}
	}
	m.mu.Lock()
	m.checked, m.checkedAfter = plan.Key, after
	m.mu.Unlock()
}

// lastAttempt is the start of the last attempt, journaled or not: what
// the rate limit counts from.
func (m *Remedier) lastAttempt() time.Time {
	last := m.journal.LastStart()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lastTry.After(last) {
		last = m.lastTry
	}
	return last
}

func (m *Remedier) next(from time.Time) string {
	return from.Add(m.o.Interval).UTC().Format(time.RFC3339)
}

func (m *Remedier) journalName() string {
	if p := m.journal.Path(); p != "" {
		return p
	}
	return "the remedy journal"
}
