package remedy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/internal/faultpoint"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/statefile"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Controller stops and starts the kubelet (pkg/kubeletctl). Both must be
// idempotent (stopping a stopped kubelet, starting a running one: no
// change), as systemd's are: a remedy interrupted by a crash is finished by
// the next hotplugd, which cannot know whether the last call took effect.
type Controller interface {
	Stop(ctx context.Context) error
	Start(ctx context.Context) error
	String() string
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
// again (before every remedy).
type KubeletSource interface {
	Current() *kubeletwatch.Facts
	Refresh(ctx context.Context) *kubeletwatch.Facts
	// Changed is closed at the next change of the facts.
	Changed() <-chan struct{}
}

// Options configure a Remedier.
type Options struct {
	Mode Mode
	// Settle is how long the machine must be quiet before acting.
	Settle time.Duration
	// Interval is the rate limit: one attempt per Interval, counted from
	// the journal, so across hotplugd's restarts.
	Interval time.Duration
	// Timeout bounds waiting for the kubelet's healthz and then for the
	// Node to show the predicted capacity.
	Timeout time.Duration
	// OpTimeout bounds stopping or starting the kubelet (default 2m).
	OpTimeout time.Duration
	// KubeletGrace is how long a kubelet that has just started has to
	// report its Node before a drift counts (0: none).
	KubeletGrace time.Duration
	DryRun       bool

	// Kubelet is the kubelet as discovered: its configuration, release,
	// state directory and healthz.
	Kubelet KubeletSource
	// WouldRefuse says why the kubelet would refuse to start on snap with
	// its configuration (pkg/kubeletstart), nil when it would start; nil
	// func: not checked.
	WouldRefuse func(f *kubeletwatch.Facts, snap *topology.Snapshot) error
	// Journal is the record of remedies under way and tried; nil: one in
	// memory (nothing survives a restart).
	Journal *journal.Journal

	Control Controller
	Node    NodeView
	// Snapshot takes a full topology snapshot (for the state files).
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
	journal *journal.Journal
	metrics struct {
		attempts *prometheus.CounterVec
		restarts prometheus.Counter
	}

	mu           sync.Mutex
	lastActivity time.Time
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
	if o.Journal == nil {
		o.Journal, _ = journal.Open("")
	}
	m := &Remedier{o: o, log: o.Log.Named("remedy"), clock: o.Clock, wake: make(chan struct{}, 1), journal: o.Journal}
	m.metrics.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_remedies_total",
		Help: "Remedy attempts by outcome: remediated, failed (rolled back), needs_person and refused (nothing done), interrupted, dry_run.",
	}, []string{"outcome"})
	m.metrics.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hotplugd_kubelet_restarts_total",
		Help: "Kubelet starts hotplugd asked for (rollbacks and recoveries included).",
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

// Run first finishes a remedy a previous hotplugd left under way (the
// kubelet always ends up running), then decides and acts until ctx is
// done. A remedy that has stopped the kubelet is carried to its end (the
// kubelet started) even when ctx is cancelled meanwhile.
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
	in := Inputs{
		Mode: m.o.Mode, Known: st.Known(), Drift: st.Drift, Now: m.clock.Now(),
		Settle: m.o.Settle, Busy: m.o.Busy(), Interval: m.o.Interval,
		LastAttempt: m.lastAttempt(),
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
	if m.checkedAfter.Equal(in.LastAttempt) {
		in.Checked = m.checked
	}
	m.mu.Unlock()
	return Decide(in)
}

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
	if a.Outcome != "" {
		m.mu.Lock()
		m.lastTry = start
		m.mu.Unlock()
	}
	if a.Outcome == "" {
		return // nothing was tried
	}
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
	e := journal.Entry{Key: a.Key, Start: start, Outcome: a.Outcome, Reason: a.Reason, Message: a.Message, Warning: a.Warning}
	if a.Err != nil {
		e.Why = a.Err.Error()
	}
	if err := m.journal.Finish(e); err != nil {
		m.log.Error("writing the remedy journal failed", zap.Error(err))
	}
	return a
}

// check is ActionCheck: while the rate limit holds a restart back, it
// judges the restart as restart would before its stop, touching nothing.
// A kubelet that would refuse, or state files that need a person, end as
// that attempt would have (journaled, reported, not repeated for the
// key). Anything else (a restart would be tried, the machine or the
// kubelet could not be judged, a dry run) leaves it to the restart at the
// interval's end: the key is remembered as checked, and the remedy waits.
func (m *Remedier) check(ctx context.Context, plan Plan) {
	after := m.lastAttempt()
	if !m.o.DryRun {
		start := m.clock.Now()
		j := m.judge(ctx, plan, start)
		if j.done && (j.a.Outcome == OutcomeRefused || j.a.Outcome == OutcomeNeedsPerson) {
			m.mu.Lock()
			m.lastTry = start
			m.mu.Unlock()
			m.record(j.a, start)
			return
		}
		if !j.done {
			m.log.Info("rate limited: a restart would be tried; waiting for the interval", zap.String("key", plan.Key),
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

// judgement is what judge found before any stop.
type judgement struct {
	a     Attempt
	done  bool // a has the remedy's end (or no outcome: decide again)
	facts *kubeletwatch.Facts
	snap  *topology.Snapshot
	pf    preflight.Options // the dry run's
	dry   preflight.Report
}

// judge runs the steps of a remedy that come before the kubelet's stop
// and change nothing: the kubelet as it is now, the machine, the kubelet's
// own refusals, the repair planned in a dry run. done: a refused or
// needs-a-person attempt (journaled), a failed read of the machine (not
// journaled), or no outcome (the kubelet changed: decide again). With
// --dry-run it stops after the planned repair, not done: nothing is
// journaled for a person.
func (m *Remedier) judge(ctx context.Context, plan Plan, start time.Time) judgement {
	next := m.next(start)
	facts := m.o.Kubelet.Refresh(ctx)
	j := judgement{a: Attempt{Key: plan.Key}, facts: facts, done: true}
	if !facts.Remediable() {
		m.log.Info("the kubelet changed before the restart; deciding again", zap.String("limits", facts.Limit()))
		return j // no outcome: the next decision sees the new facts
	}
	if st := m.o.Node.State(); st.Prediction != nil {
		if k := Key(*st.Prediction, facts); k != plan.Key {
			m.log.Info("the kubelet changed since the decision; deciding again", zap.String("key", k))
			return j // no outcome
		}
	}
	var err error
	if j.snap, err = m.o.Snapshot(); err != nil {
		j.a.Outcome, j.a.Err = OutcomeFailed, fmt.Errorf("remedy: reading the topology: %w", err)
		return j // not journaled: nothing was done, the next reconcile retries
	}
	if m.o.WouldRefuse != nil {
		if err := m.o.WouldRefuse(facts, j.snap); err != nil {
			j.a = m.finish(m.refused(j.a, err, next), start)
			return j
		}
	}
	// Plan the repair first: when it needs a person, the kubelet is left
	// running as it is.
	j.pf = preflightOptions(facts, m.clock.Now())
	j.pf.DryRun = true
	j.dry = preflight.Run(j.snap, j.pf)
	j.a.Report = j.dry
	if m.o.DryRun {
		j.done = false
		return j
	}
	if j.dry.NeedsPerson() {
		j.a = m.finish(m.needsPerson(j.a, next), start)
		return j
	}
	j.done = false
	return j
}

// restart is the remedy itself. Every step from the stop on runs to the
// kubelet's start, whatever happens to ctx.
func (m *Remedier) restart(ctx context.Context, plan Plan, start time.Time) Attempt {
	next := m.next(start)
	j := m.judge(ctx, plan, start)
	if j.done {
		return j.a
	}
	a, facts, snap, dry, pf := j.a, j.facts, j.snap, j.dry, j.pf
	if m.o.DryRun {
		return m.planOnly(plan, a)
	}
	pf.DryRun = false
	files := plannedBackups(dry, pf.Now)
	rec, err := recordKubelet(facts)
	if err == nil {
		err = m.journal.Begin(journal.Underway{Key: plan.Key, Phase: journal.PhaseStopping, Start: start, Drift: plan.Drift.String(), Files: files, Kubelet: rec})
	}
	if err != nil {
		// Without the record a crash could leave the kubelet stopped for
		// good: no stop.
		a.Outcome, a.Err = OutcomeFailed, fmt.Errorf("remedy: not restarting the kubelet: %w", err)
		return a
	}
	m.log.Info("restarting the kubelet", zap.String("via", m.o.Control.String()), zap.Stringer("drift", plan.Drift),
		zap.String("state_files", oneLine(dry)), zap.String("journal", m.journal.Path()))
	a = m.carryOut(ctx, a, facts, snap, pf, plan.Drift.Predicted(), next)
	if a.Outcome == OutcomeInterrupted {
		return a // the journal keeps it under way: the next hotplugd verifies
	}
	return m.finish(a, start)
}

// carryOut stops the kubelet, repairs its state files, starts it and
// verifies; on failure it rolls back. From the stop to the start nothing
// depends on ctx: an interrupted hotplugd still leaves the kubelet running.
func (m *Remedier) carryOut(ctx context.Context, a Attempt, facts *kubeletwatch.Facts, snap *topology.Snapshot,
	pf preflight.Options, predicted string, next string) Attempt {
	// The restarting kubelet's intermediate reports are not drifts: the
	// reporter holds its writes while the journal has a restart under way.
	if err := m.op("stopping", m.o.Control.Stop); err != nil {
		// It may be half-stopped, or still running: the files are left as
		// they are, and it is started (a no-op when it runs).
		if serr := m.op("starting", m.start); serr != nil {
			err = fmt.Errorf("%w; starting it again failed too: %w", err, serr)
		}
		return m.fail(a, err, next, false)
	}
	m.enter(journal.PhaseRepairing, nil)
	faultpoint.Hit(faultpoint.RemedyStopped)
	report := preflight.Run(snap, pf)
	a.Report = report
	m.enter(journal.PhaseStarting, mergeBackups(m.journal.Underway(), report))
	if report.NeedsPerson() {
		// Changed while the kubelet was stopping (it writes its state
		// files when it admits pods): start it as it was.
		m.rollback(facts)
		return m.needsPerson(a, next)
	}
	if err := m.op("starting", m.start); err != nil {
		m.rollback(facts)
		return m.fail(a, err, next, true)
	}
	m.enter(journal.PhaseVerifying, nil)
	faultpoint.Hit(faultpoint.RemedyStarted)
	if ctx.Err() != nil {
		a.Outcome, a.Err = OutcomeInterrupted, errors.New("remedy: hotplugd is stopping: the kubelet was started; the next hotplugd verifies it")
		return a
	}
	if err := m.verify(ctx, facts); err != nil {
		if ctx.Err() != nil {
			a.Outcome, a.Err = OutcomeInterrupted, fmt.Errorf("remedy: hotplugd is stopping during the verification (the kubelet runs; the next hotplugd verifies it): %w", err)
			return a
		}
		if errors.Is(err, errNodeUnknown) {
			return m.fail(a, fmt.Errorf("%w: the kubelet runs on the repaired state files and was left running", err), next, false)
		}
		m.rollback(facts)
		return m.fail(a, err, next, true)
	}
	a.Outcome, a.Reason = OutcomeRemediated, nodepatch.ReasonRemediated
	a.Message = fmt.Sprintf("restarted the kubelet (%s); it now reports %s", m.o.Control, predicted)
	if s := repaired(report); s != "" {
		a.Message += "; " + s
	}
	return a
}

// recover finishes a remedy a previous hotplugd left under way: the
// kubelet may be stopped, its files half-repaired. Before the start it is
// carried out again from the stop (stop and start are idempotent, the
// repair of an already repaired file changes nothing); after the start it is
// verified; a rollback is done again.
func (m *Remedier) recover(ctx context.Context, u journal.Underway) {
	start := m.clock.Now()
	m.log.Warn("a kubelet restart was under way when hotplugd stopped: finishing it first",
		zap.String("phase", string(u.Phase)), zap.Time("since", u.Start), zap.String("key", u.Key), zap.String("drift", u.Drift))
	a := Attempt{Key: u.Key}
	next := m.next(start)
	if m.o.Control == nil {
		// No way to stop or start the kubelet here: say so on the Node
		// (and let the reporter write again), a person makes sure it runs.
		err := fmt.Errorf("remedy: a kubelet restart (phase %s) was under way when hotplugd stopped, and this hotplugd cannot control the kubelet: make sure it runs (systemctl start kubelet)", u.Phase)
		m.log.Error("cannot finish the kubelet restart under way", zap.Error(err), zap.String("journal", m.journal.Path()))
		a.Outcome, a.Err = OutcomeFailed, err
		a.Reason, a.Message, a.Warning = nodepatch.ReasonRemediationFailed, err.Error(), true
		m.record(m.finish(a, u.Start), start)
		return
	}
	// The kubelet as it is now, else as it was when the restart began: a
	// kubelet the killed hotplugd stopped is not there to be discovered.
	facts := m.o.Kubelet.Refresh(ctx)
	if !facts.Remediable() {
		if f, err := factsFrom(u.Kubelet); err == nil {
			facts = f
		} else {
			m.log.Warn("the journal does not say which kubelet the restart was for", zap.Error(err))
		}
	}
	switch u.Phase {
	case journal.PhaseVerifying:
		err := m.op("starting", m.start) // a no-op when it runs
		if err == nil {
			err = m.verify(ctx, facts)
		}
		switch {
		case err == nil:
			a.Outcome, a.Reason = OutcomeRemediated, nodepatch.ReasonRemediated
			a.Message = "the kubelet restart a previous hotplugd began is verified: the Node shows the machine"
		case ctx.Err() != nil:
			return // still under way
		case errors.Is(err, errNodeUnknown):
			a = m.fail(a, fmt.Errorf("%w: the kubelet runs on the repaired state files and was left running", err), next, false)
		default:
			m.rollback(facts)
			a = m.fail(a, err, next, true)
		}
	case journal.PhaseRollingBack:
		m.rollback(facts)
		a = m.fail(a, errors.New("remedy: a previous hotplugd was rolling back a kubelet restart; rolled back"), next, true)
	default:
		snap, err := m.o.Snapshot()
		if err != nil || !facts.Remediable() {
			// Cannot repair now: put back what the kubelet accepts, start it.
			m.rollback(facts)
			if err == nil {
				err = errors.New(facts.Limit())
			}
			a = m.fail(a, fmt.Errorf("remedy: finishing an interrupted kubelet restart: %w", err), next, true)
			break
		}
		pf := preflightOptions(facts, m.clock.Now())
		a = m.carryOut(ctx, a, facts, snap, pf, "the machine", next)
		if a.Outcome == OutcomeInterrupted {
			m.record(a, start)
			return
		}
	}
	m.record(m.finish(a, u.Start), start)
}

// recordKubelet is what the journal keeps of the kubelet a restart is for.
func recordKubelet(f *kubeletwatch.Facts) (*journal.Kubelet, error) {
	cfg, err := json.Marshal(f.Kubelet.Config)
	if err != nil {
		return nil, fmt.Errorf("remedy: the kubelet's configuration for the journal: %w", err)
	}
	return &journal.Kubelet{Config: cfg, RootDir: f.Kubelet.RootDir, StateDir: f.StateDir, HealthzURL: f.Kubelet.HealthzURL,
		AllocatableIgnoresEviction: f.Kubelet.AllocatableIgnoresEviction, Version: f.Version.String()}, nil
}

// factsFrom rebuilds the facts a restart began with from the journal.
func factsFrom(k *journal.Kubelet) (*kubeletwatch.Facts, error) {
	if k == nil {
		return nil, errors.New("no kubelet recorded")
	}
	v, err := kubeletversion.Parse(k.Version)
	if err != nil {
		return nil, err
	}
	rel, err := kubeletversion.Lookup(v)
	if err != nil {
		return nil, err
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(k.Config, cfg); err != nil {
		return nil, fmt.Errorf("the recorded configuration: %w", err)
	}
	return &kubeletwatch.Facts{
		Kubelet: &kubeletconfig.Kubelet{Config: cfg, RootDir: k.RootDir, HealthzURL: k.HealthzURL,
			AllocatableIgnoresEviction: k.AllocatableIgnoresEviction},
		Version: v, VersionFrom: "the remedy journal", Release: rel, StateDir: k.StateDir,
	}, nil
}

// preflightOptions are the state-file options for the kubelet of f.
func preflightOptions(f *kubeletwatch.Facts, now time.Time) preflight.Options {
	return preflight.Options{RootDir: f.StateDir, PodLogsDir: f.Kubelet.PodLogsDir(), Config: f.Kubelet.Config, Release: f.Release, Version: f.Version,
		AllocatableIgnoresEviction: f.Kubelet.AllocatableIgnoresEviction, Now: now}
}

// plannedBackups are the backups a repair stamped now will make, named
// before the write so that an interrupted write can be undone.
func plannedBackups(dry preflight.Report, now time.Time) []journal.FileBackup {
	var out []journal.FileBackup
	for _, r := range dry.Results {
		if r.Verdict == preflight.WouldRepair {
			out = append(out, journal.FileBackup{Path: r.Path, Backup: statefile.BackupPath(r.Path, now)})
		}
	}
	return out
}

// mergeBackups adds the backups a repair made to those already recorded:
// the first backup of a file holds its contents before the remedy.
func mergeBackups(u *journal.Underway, r preflight.Report) []journal.FileBackup {
	var files []journal.FileBackup
	if u != nil {
		files = append(files, u.Files...)
	}
	for _, res := range r.Results {
		if res.Verdict == preflight.Repaired && res.Backup != "" &&
			!slices.ContainsFunc(files, func(f journal.FileBackup) bool { return f.Backup == res.Backup }) {
			files = append(files, journal.FileBackup{Path: res.Path, Backup: res.Backup})
		}
	}
	return files
}

// enter writes the next phase down; a journal that cannot be written is
// logged (the remedy is past its stop: it goes on to the start).
func (m *Remedier) enter(p journal.Phase, files []journal.FileBackup) {
	if err := m.journal.Enter(p, files); err != nil {
		m.log.Error("writing the remedy journal failed", zap.String("phase", string(p)), zap.Error(err))
	}
}

func (m *Remedier) next(from time.Time) string {
	return from.Add(m.o.Interval).UTC().Format(time.RFC3339)
}

func (m *Remedier) start(ctx context.Context) error {
	m.metrics.restarts.Inc()
	return m.o.Control.Start(ctx)
}

// op runs a kubelet stop or start with its own timeout, detached from the
// daemon's cancellation: a stop must always be followed by a start.
func (m *Remedier) op(what string, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), m.o.OpTimeout)
	defer cancel()
	if err := f(ctx); err != nil {
		return fmt.Errorf("remedy: %s the kubelet (%s): %w", what, m.o.Control, err)
	}
	return nil
}

// verify waits for the kubelet's healthz, then for the Node to show the
// prediction.
func (m *Remedier) verify(ctx context.Context, f *kubeletwatch.Facts) error {
	ctx, cancel := context.WithTimeout(ctx, m.o.Timeout)
	defer cancel()
	if f != nil && f.Kubelet != nil && f.Kubelet.HealthzURL != "" {
		if err := m.waitHealthz(ctx, f.Kubelet.HealthzURL); err != nil {
			return err
		}
	}
	faultpoint.Hit(faultpoint.RemedyVerifying)
	for {
		changed := m.o.Node.Changed()
		st := m.o.Node.State()
		if st.Known() && !st.Drift.Stale() {
			return nil
		}
		select {
		case <-ctx.Done():
			if !st.Known() {
				return fmt.Errorf("remedy: %w within %v (the API server may be away)", errNodeUnknown, m.o.Timeout)
			}
			return fmt.Errorf("remedy: the Node still reports %s after the kubelet restart (waited %v)",
				st.Drift.Significant(), m.o.Timeout)
		case <-changed:
		}
	}
}

// errNodeUnknown: the verification could not read the Node at all. The
// kubelet then runs on repaired files hotplugd cannot judge: it is left
// running, never rolled back on that ground.
var errNodeUnknown = errors.New("the Node could not be read to verify the kubelet's restart")

func (m *Remedier) waitHealthz(ctx context.Context, url string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, fmt.Errorf("remedy: the kubelet's healthz URL %q: %w", url, err)
		}
		resp, err := m.o.HTTP.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s", resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil && ctx.Err() != nil {
		return fmt.Errorf("remedy: the kubelet's healthz %s did not answer ok within %v: %v", url, m.o.Timeout, last)
	}
	return err
}

// rollback stops the kubelet, puts the state files back as they were
// before the remedy (the journal's first backup of each) and starts it.
// Files are restored only once the stop succeeded: a kubelet that may still
// run writes its own state files. Nothing here depends on the daemon's
// cancellation.
func (m *Remedier) rollback(facts *kubeletwatch.Facts) {
	m.enter(journal.PhaseRollingBack, nil)
	m.log.Warn("rolling back: restoring the state files and restarting the kubelet as it was")
	if err := m.op("stopping", m.o.Control.Stop); err != nil {
		m.log.Error("stopping the kubelet for the rollback failed: its state files are left as they are (restore the backups by hand if it does not start)", zap.Error(err))
	} else {
		at := m.clock.Now()
		var files []journal.FileBackup
		if u := m.journal.Underway(); u != nil {
			files = u.Files
		}
		done := map[string]bool{}
		for _, f := range files {
			if done[f.Path] {
				continue
			}
			data, err := statefile.Read(f.Backup)
			if errors.Is(err, fs.ErrNotExist) {
				continue // the write never happened
			}
			done[f.Path] = true
			if err == nil {
				if why := m.refusedOnThisMachine(facts, f.Path, data); why != "" {
					m.log.Warn("not restoring a state file the kubelet would refuse on this machine; keeping the repaired one",
						zap.String("file", f.Path), zap.String("backup", f.Backup), zap.String("why", why))
					continue
				}
			}
			if err == nil {
				if !at.After(m.backupTime(f)) {
					at = m.backupTime(f).Add(time.Nanosecond)
				}
				_, err = statefile.Write(f.Path, data, at)
			}
			if err != nil {
				m.log.Error("restoring a state file failed; restore it by hand", zap.String("file", f.Path),
					zap.String("backup", f.Backup), zap.Error(err))
				continue
			}
			m.log.Info("state file restored", zap.String("file", f.Path), zap.String("from", f.Backup))
		}
	}
	if err := m.op("starting", m.start); err != nil {
		m.log.Error("starting the kubelet after the rollback failed", zap.Error(err))
	}
}

// refusedOnThisMachine says why the kubelet would refuse data as the state
// file at path on the machine as it is now ("" when it would accept it, or
// when that cannot be judged: then the backup is restored, as before the
// remedy). A rollback never puts back a file that keeps the kubelet down.
func (m *Remedier) refusedOnThisMachine(f *kubeletwatch.Facts, path string, data []byte) string {
	if !f.Remediable() {
		return ""
	}
	snap, err := m.o.Snapshot()
	if err != nil {
		return ""
	}
	// Beside the state file, in the directory hotplugd writes anyway: the
	// DaemonSet's root file system (and so /tmp) is read-only.
	dir, err := os.MkdirTemp(filepath.Dir(path), ".hotplugd-rollback-")
	if err != nil {
		return ""
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(path)), data, 0o600); err != nil {
		return ""
	}
	pf := preflightOptions(f, m.clock.Now())
	pf.RootDir, pf.DryRun = dir, true
	for _, r := range preflight.Run(snap, pf).Results {
		if r.File == filepath.Base(path) && r.Verdict != preflight.Valid && r.Verdict != preflight.Absent && r.Verdict != preflight.Unknown {
			if r.Why != "" {
				return r.Why
			}
			return "the kubelet would refuse it on this machine (" + string(r.Verdict) + ")"
		}
	}
	return ""
}

// backupTime is the time a backup's name was stamped with (zero when it
// cannot be read): the restore's own backup must come after it.
func (m *Remedier) backupTime(f journal.FileBackup) time.Time {
	s := strings.TrimPrefix(f.Backup, f.Path+".hotplugd-backup-")
	t, err := time.Parse("20060102T150405.000000000Z", s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func (m *Remedier) fail(a Attempt, err error, next string, rolledBack bool) Attempt {
	a.Outcome, a.Err = OutcomeFailed, err
	msg := err.Error()
	if rolledBack {
		msg += "; rolled back (state files restored, kubelet restarted as it was)"
	}
	msg += "; not tried again for this machine and kubelet configuration (a change of either, or removing " + m.journalName() + ", allows one more attempt, not before " + next + ")"
	a.Reason, a.Message, a.Warning = nodepatch.ReasonRemediationFailed, msg, true
	return a
}

func (m *Remedier) journalName() string {
	if p := m.journal.Path(); p != "" {
		return p
	}
	return "the remedy journal"
}

// refused: the kubelet would not start; it is left running as it is.
func (m *Remedier) refused(a Attempt, err error, next string) Attempt {
	a.Outcome, a.Err = OutcomeRefused, err
	a.Reason, a.Warning = nodepatch.ReasonKubeletWouldRefuse, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: it would refuse to start on this machine: %v; what to do: fix the kubelet's configuration (a restart by anyone would fail the same way); reporting only until the machine or the kubelet's configuration changes (not before %s)", err, next)
	return a
}

// needsPerson: a state file needs a person; the kubelet is left running as
// it is. What to do names the pods to drain first (namespace/name where
// the kubelet's pod log directory has them, else the UID).
func (m *Remedier) needsPerson(a Attempt, next string) Attempt {
	a.Outcome = OutcomeNeedsPerson
	var why, todo, pods []string
	seen := map[string]bool{}
	for _, r := range a.Report.Results {
		if r.Verdict == preflight.NeedsPerson {
			why = append(why, r.File+": "+r.Why)
			todo = append(todo, r.Todo)
			for _, p := range r.Drain {
				if !seen[p.UID] {
					seen[p.UID] = true
					pods = append(pods, p.String())
				}
			}
		}
	}
	if len(pods) > 0 {
		todo = append([]string{"drain pods " + strings.Join(pods, ", ")}, todo...)
	}
	a.Err = errors.New(strings.Join(why, "; "))
	a.Reason, a.Warning = nodepatch.ReasonNeedsDrain, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: %s; what to do: %s; next check when the machine or the kubelet's configuration changes, not before %s",
		strings.Join(why, "; "), strings.Join(todo, "; "), next)
	return a
}

// planOnly handles a dry run before anything is touched.
func (m *Remedier) planOnly(plan Plan, a Attempt) Attempt {
	if a.Report.NeedsPerson() {
		a.Outcome = OutcomeNeedsPerson
		m.log.Info("dry run: would not restart the kubelet: a state file needs a person", zap.String("state_files", oneLine(a.Report)))
		return a
	}
	a.Outcome = OutcomeDryRun
	m.log.Info("dry run: would restart the kubelet", zap.String("via", m.o.Control.String()),
		zap.Stringer("drift", plan.Drift), zap.String("state_files", oneLine(a.Report)))
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
