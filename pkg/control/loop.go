package control

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// KubeletSource is the kubelet as discovered (*kubeletwatch.Watcher).
type KubeletSource interface {
	Current() *kubeletwatch.Facts
	// Changed is closed at the next change of the facts.
	Changed() <-chan struct{}
}

// NodeSource is hotplugd's Node as watched (*nodepatch.Watch).
type NodeSource interface {
	// Node is the Node as last seen (nil: none) and whether the first
	// list arrived.
	Node() (*v1.Node, bool)
	Changed() <-chan struct{}
}

// NodeWriter executes the Node's half of a plan (*nodepatch.Writer).
type NodeWriter interface {
	Patch(ctx context.Context, data []byte, cond v1.NodeCondition) (*v1.Node, error)
	Event(e nodepatch.Event)
	SetStale(stale bool)
	// SetHeartbeat publishes the heartbeat of the condition on the Node.
	SetHeartbeat(t time.Time)
}

// PauseSource is the cluster-wide pause (*pause.Watch): why remedies are
// paused ("": they are not), and a channel closed at its next change.
type PauseSource interface {
	Paused() string
	Changed() <-chan struct{}
}

// Executor executes the remedy's half of a plan (*remedy.Remedier).
type Executor interface {
	Restart(ctx context.Context, plan remedy.Plan) (remedy.Attempt, bool)
	Check(ctx context.Context, plan remedy.Plan) (remedy.Attempt, bool)
	Recover(ctx context.Context, u journal.Underway)
}

// Options configure a Loop.
type Options struct {
	Config
	Kubelet KubeletSource
	Node    NodeSource
	Writer  NodeWriter
	Remedy  Executor
	Journal *journal.Journal
	// Observations is where the loop publishes the Node against the
	// prediction after every decision (the executor's view).
	Observations *Observations
	// Busy reports whether a burst is being debounced or reconciled, and
	// Idle returns a channel closed once it is not (daemon.Daemon's); nil:
	// never busy.
	Busy func() bool
	Idle func() <-chan struct{}
	// Pause is the cluster-wide pause of remedies (pkg/pause); nil: none.
	Pause PauseSource
	// Backoff paces retries of failed Node writes; nil: the defaults.
	Backoff *nodepatch.Backoff
	Log     *zap.Logger
	Clock   clock.WithTicker
}

// Loop is the control loop. Feed it with Snapshot and MemoryDown, run it
// with Run.
type Loop struct {
	o   Options
	log *zap.Logger

	// The mailbox: inputs that arrive from other goroutines (the daemon's
	// hooks), taken by the loop at its next turn.
	mu             sync.Mutex
	snapshot       *topology.Snapshot
	lastActivity   time.Time
	lastMemoryDown time.Time
	arrivals       Arrivals
	poke           chan struct{}

	// The last decision, for hotplugd status: its Status is made when
	// asked, not at every turn of the loop (decided false before the
	// first).
	statusMu sync.Mutex
	lastIn   Inputs
	lastPlan Plan
	decided  bool
}

// Status is the Status of the loop's last decision; false before the
// first. Safe for concurrent use.
func (l *Loop) Status() (Status, bool) {
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	if !l.decided {
		return Status{}, false
	}
	return NewStatus(l.lastIn, l.lastPlan), true
}

// WaitingForBudget reports whether the last decision waits for the
// cluster-wide restart budget (hotplugd_restart_budget_waiting). Safe for
// concurrent use.
func (l *Loop) WaitingForBudget() bool {
	l.statusMu.Lock()
	defer l.statusMu.Unlock()
	return l.decided && l.lastPlan.Remedy.BudgetWait
}

// New returns a Loop.
func New(o Options) (*Loop, error) {
	if o.Kubelet == nil || o.Node == nil || o.Writer == nil || o.Remedy == nil || o.Journal == nil {
		return nil, errors.New("control: the kubelet and Node sources, the writer, the remedy executor and the journal are required")
	}
	if o.Observations == nil {
		o.Observations = NewObservations()
	}
	if o.Busy == nil {
		o.Busy = func() bool { return false }
	}
	if o.Backoff == nil {
		o.Backoff = nodepatch.NewBackoff(0, 0, 0)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Loop{o: o, log: o.Log.Named("control"), poke: make(chan struct{}, 1)}, nil
}

// Snapshot hands the loop the daemon's latest snapshot; activity is the
// last trigger of its batch when something happened on the machine (zero
// for the start or a resync): the settle time starts again. It never
// blocks.
func (l *Loop) Snapshot(s *topology.Snapshot, activity time.Time) {
	l.post(func() {
		l.snapshot = s
		later(&l.lastActivity, activity)
	})
}

// MemoryDown records a memory block's offline or remove uevent at t: a
// memory capacity decrease after it is a hot-remove, one without it is
// reported only. It never blocks.
func (l *Loop) MemoryDown(t time.Time) { l.post(func() { later(&l.lastMemoryDown, t) }) }

// Uevent records a kernel uevent received at t for what it says about a
// change still arriving (Arrivals). It never blocks, and it does not wake
// the loop: the event's burst ends in a snapshot, which does.
func (l *Loop) Uevent(e uevent.Event, t time.Time) {
	l.mu.Lock()
	l.arrivals.Observe(e, t)
	l.mu.Unlock()
}

// Activity records an event on the machine at t with no new snapshot.
func (l *Loop) Activity(t time.Time) { l.post(func() { later(&l.lastActivity, t) }) }

// post changes the mailbox with f and wakes the loop.
func (l *Loop) post(f func()) {
	l.mu.Lock()
	f()
	l.mu.Unlock()
	l.wake()
}

// later sets *dst to t when t is later.
func later(dst *time.Time, t time.Time) {
	if t.After(*dst) {
		*dst = t
	}
}

func (l *Loop) wake() {
	select {
	case l.poke <- struct{}{}:
	default:
	}
}

// result is what the remedy executor reports back.
type result struct {
	start   time.Time
	tried   bool
	checked string    // a check found a restart would be tried for this key
	after   time.Time // the last attempt's start when the check began
	budget  *remedy.BudgetWait
}

// Run decides and executes until ctx is done. It first has the executor
// settle a restart an earlier hotplugd left under way. It returns once the
// executor's work has returned too.
func (l *Loop) Run(ctx context.Context) error {
	o := l.o
	var done Done
	// Entries made before this start were sent by an earlier hotplugd.
	done.JournalSent = o.Journal.Seq()
	results := make(chan result, 1)
	if u := o.Journal.Underway(); u != nil {
		done.Remedying = true
		go func() {
			o.Remedy.Recover(ctx, *u)
			results <- result{}
		}()
	}
	defer func() {
		if done.Remedying {
			<-results
		}
	}()
	l.Activity(o.Clock.Now()) // the start counts as activity

	var patched *v1.Node
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	logged, noise := "", ""
	for {
		if ctx.Err() != nil {
			return nil
		}
		// Taken before the inputs are read: a change in between closes
		// them.
		kubeletC, nodeC, journalC := o.Kubelet.Changed(), o.Node.Changed(), o.Journal.Changed()
		var pauseC <-chan struct{}
		paused := ""
		if o.Pause != nil {
			pauseC = o.Pause.Changed()
			paused = o.Pause.Paused()
		}
		var idle <-chan struct{}
		if o.Idle != nil {
			idle = o.Idle()
		}
		watched, synced := o.Node.Node()
		now := o.Clock.Now()
		l.mu.Lock()
		in := Inputs{
			Config: o.Config, Now: now, Snapshot: l.snapshot, Kubelet: o.Kubelet.Current(),
			Node: nodepatch.Newest(watched, synced, patched), Journal: o.Journal.View(), Busy: o.Busy(),
			LastActivity: l.lastActivity, LastMemoryDown: l.lastMemoryDown, Arriving: l.arrivals.Pending(now, o.Settle),
			Done: done, Paused: paused,
		}
		l.mu.Unlock()
		plan := Decide(in)
		l.statusMu.Lock()
		l.lastIn, l.lastPlan, l.decided = in, plan, true
		l.statusMu.Unlock()
		if plan.Retry != "" {
			// A person asked for a retry: taken once, then decided anew.
			if err := o.Journal.SetRetry(plan.Retry, in.Now); err != nil {
				l.log.Error("taking the retry asked on the Node: it holds until hotplugd restarts", zap.Error(err))
			}
			l.log.Info("retry asked on the Node: earlier attempts no longer stand in the way", zap.String("annotation", nodepatch.AnnotationRetry), zap.String("token", plan.Retry))
			continue
		}
		o.Observations.set(nodepatch.State{Node: in.Node, Prediction: plan.Prediction, Drift: plan.Node.Drift})
		if s := string(plan.Remedy.Action) + plan.Remedy.Why + plan.PredictErr; s != logged {
			logged = s
			l.logPlan(plan)
		}

		if n := plan.Node.Drift.Noise().String(); n != noise {
			if noise = n; n != "" {
				l.log.Info("memory differs by less than --min-memory-delta; not drift", zap.String("difference", n),
					zap.String("min_memory_delta", o.MinMemoryDelta.String()))
			}
		}

		// Execute: Events, then the Node's patch, then the remedy.
		for _, e := range plan.Events {
			o.Writer.Event(e)
		}
		done.JournalSent = plan.JournalSent
		if plan.NodeReported {
			done.Evented, done.EventedKnown = plan.Node.Evented, true
			o.Writer.SetStale(plan.Node.Drift.Stale())
		}
		if c := nodepatch.FindCondition(in.Node); c != nil {
			o.Writer.SetHeartbeat(c.LastHeartbeatTime.Time)
		}
		if plan.Node.Patch != nil {
			n, err := o.Writer.Patch(ctx, plan.Node.Patch, plan.Node.Condition)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil:
				wait := o.Backoff.Failed(err)
				done.RetryAt = in.Now.Add(wait)
				l.logWriteFailure(err, wait)
				continue
			case n != nil:
				o.Backoff.Succeeded()
				done.RetryAt = time.Time{}
				patched = n
				continue // decide again against the Node as written
			}
		}
		if a := plan.Remedy.Action; (a == remedy.ActionRestart || a == remedy.ActionCheck) && !done.Remedying {
			done.Remedying = true
			go func(p remedy.Plan, after time.Time) {
				r := result{start: o.Clock.Now(), after: after}
				if p.Action == remedy.ActionRestart {
					var a remedy.Attempt
					a, r.tried = o.Remedy.Restart(ctx, p)
					r.budget = a.Budget
				} else if _, r.tried = o.Remedy.Check(ctx, p); !r.tried {
					r.checked = p.Key
				}
				results <- r
			}(plan.Remedy, lastAttempt(in))
			continue
		}

		var timerC <-chan time.Time
		if !plan.Wake.IsZero() {
			d := plan.Wake.Sub(o.Clock.Now())
			if d <= 0 {
				continue // due already: decide again
			}
			if timer == nil {
				timer = o.Clock.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			timerC = timer.C()
		}
		var idleC <-chan struct{}
		if in.Busy {
			idleC = idle
		}
		select {
		case <-ctx.Done():
			return nil
		case <-l.poke:
		case <-kubeletC:
		case <-nodeC:
		case <-journalC:
		case <-pauseC:
		case <-timerC:
		case <-idleC:
		case r := <-results:
			done.Remedying = false
			switch {
			case r.tried:
				done.LastTry = r.start
				done.Budget = remedy.BudgetWait{}
			case r.checked != "":
				done.Checked, done.CheckedAfter = r.checked, r.after
			case r.budget != nil:
				done.Budget = *r.budget
			}
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// lastAttempt is the start of the last attempt the inputs know of: what
// the rate limit counts from.
func lastAttempt(in Inputs) time.Time {
	t := in.Journal.LastStart()
	if in.Done.LastTry.After(t) {
		t = in.Done.LastTry
	}
	return t
}

func (l *Loop) logPlan(p Plan) {
	fields := []zap.Field{zap.Stringer("plan", p.Remedy)}
	if p.PredictErr != "" {
		l.log.Warn("the kubelet would refuse this machine with its configuration; comparing capacity only", zap.String("error", p.PredictErr))
	}
	if p.Remedy.Action == remedy.ActionNone {
		l.log.Debug("remedy plan", fields...)
	} else {
		l.log.Info("remedy plan", fields...)
	}
}

func (l *Loop) logWriteFailure(err error, wait time.Duration) {
	n := l.o.Backoff.Failures
	fields := []zap.Field{zap.Error(err), zap.Int("attempt", n), zap.Duration("retry_in", wait)}
	switch {
	case nodepatch.RefusedForGood(err) && (n == 1 || wait >= time.Minute):
		l.log.Warn("the API server refuses to write the node: check hotplugd's RBAC, its Node and admission policies; retrying less and less often", fields...)
	case n == 1 || n%10 == 0:
		l.log.Warn("writing the node failed; retrying", fields...)
	default:
		l.log.Debug("writing the node failed; retrying", fields...)
	}
}

// Observations is the Node against the prediction as the loop last
// decided on it: what the remedy executor reads (remedy.NodeView).
type Observations struct {
	mu sync.Mutex
	st nodepatch.State
	ch chan struct{}
}

// NewObservations returns an empty Observations.
func NewObservations() *Observations { return &Observations{ch: make(chan struct{})} }

// State is the last published state.
func (o *Observations) State() nodepatch.State {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.st
}

// Changed returns a channel closed at the next publication.
func (o *Observations) Changed() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.ch
}

func (o *Observations) set(st nodepatch.State) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.st = st
	close(o.ch)
	o.ch = make(chan struct{})
}

// BudgetWaitingGauge is hotplugd_restart_budget_waiting, from waiting
// (Loop.WaitingForBudget), read at each scrape.
func BudgetWaitingGauge(waiting func() bool) prometheus.GaugeFunc {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "hotplugd_restart_budget_waiting",
		Help: "1 while a kubelet restart waits for the cluster-wide restart budget (every Lease held by another node, or the budget could not be asked), else 0.",
	}, func() float64 {
		if waiting() {
			return 1
		}
		return 0
	})
}
