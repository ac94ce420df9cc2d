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
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/budget"
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

// NodeView is the Node as the control loop last saw it against the
// prediction (pkg/control publishes it after every decision), for the
// verification and for noticing a plan gone stale. The remedy never writes
// to the Node: what it did goes into the Journal, which the control loop
// reads for the condition, the Events and holding its writes while the
// kubelet restarts.
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
	// Interval is the rate limit (one attempt per Interval), for the
	// messages that say when the next attempt may come.
	Interval time.Duration
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
	// AllowReadinessReset lets a remedy restart a kubelet whose restart
	// sets every running container's ready status to false (1.34, or
	// ChangeContainerStatusOnKubeletRestart on).
	AllowReadinessReset bool
	DryRun              bool
	// GetNode reads the Node from the API server, past the watch's cache:
	// at the verification's end a Node that still shows the drift is read
	// once more, so that an API server away is not taken for a kubelet
	// that failed. MinMemoryDelta is the drift's (Config's). nil: the
	// watched Node decides.
	GetNode        func(ctx context.Context) (*v1.Node, error)
	MinMemoryDelta resource.Quantity
	// CgroupFS is the cgroup file system's mount point as hotplugd sees
	// it (/sys/fs/cgroup; /host/sys/fs/cgroup in the DaemonSet): the pods
	// that still run are the ones with a pod cgroup (pkg/podcgroups).
	CgroupFS string

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

	// Budget is the cluster-wide restart budget (pkg/budget): a restart
	// is asked for only while this node holds one of its Leases, renewed
	// until the verification ends; nil: none (the node decides alone).
	Budget *budget.Budget
	// BudgetPoll is how long a node that found the budget taken waits
	// before it tries again (default 10s), spread by up to half of it
	// either way so that waiting nodes do not ask in step.
	BudgetPoll time.Duration
	// BudgetRenew is how often a hold is renewed (a third of its
	// duration).
	BudgetRenew time.Duration

	Control Restarter
	Node    NodeView
	// Snapshot takes a full topology snapshot (for the dry-run repair).
	Snapshot func() (*topology.Snapshot, error)

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
	// Budget is set when nothing was tried because the cluster-wide
	// restart budget was taken or could not be asked.
	Budget *BudgetWait
}

// Remedier executes the remedy's plans (pkg/control decides them): it
// judges, asks the kubelet's supervisor for the restart, verifies, and
// settles a restart an earlier hotplugd left under way. It decides nothing
// about when: the control loop calls it.
type Remedier struct {
	o       Options
	log     *zap.Logger
	clock   clock.WithTicker
	journal *journal.Journal
	metrics struct {
		attempts *prometheus.CounterVec
		restarts prometheus.Counter
		budget   *prometheus.CounterVec
	}

	mu       sync.Mutex
	attempts []Attempt

	// settled is closed once a hold an earlier hotplugd of this node left
	// has been given back (ReleaseOwnBudget): takeBudget waits for it, so
	// that a start-up release never gives back a hold this hotplugd has
	// just taken for its own restart.
	settled     chan struct{}
	settledOnce sync.Once
}

// New checks the options and returns a Remedier.
func New(o Options) (*Remedier, error) {
	if o.Node == nil || o.Snapshot == nil || o.Kubelet == nil {
		return nil, errors.New("remedy: a node view, a kubelet source and a snapshot function are required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
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
	m := &Remedier{o: o, log: o.Log.Named("remedy"), clock: o.Clock, journal: o.Journal, settled: make(chan struct{})}
	if o.Budget == nil {
		close(m.settled)
	}
	m.metrics.attempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_remedies_total",
		Help: "Remedy attempts by outcome: remediated, failed, unverified (restarted); needs_person, refused, withheld (nothing done); interrupted, dry_run.",
	}, []string{"outcome"})
	// A series for every outcome from the start, at 0: increase() then
	// sees the first attempt of each.
	for _, out := range journal.Outcomes() {
		m.metrics.attempts.WithLabelValues(string(out))
	}
	m.metrics.restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hotplugd_kubelet_restarts_total",
		Help: "Kubelet restarts hotplugd asked the kubelet's supervisor for.",
	})
	m.metrics.budget = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_restart_budget_tries_total",
		Help: "Tries of the cluster-wide restart budget before a kubelet restart, by result: taken (a Lease held), exhausted (every Lease held by another node: waiting), error (the API server could not be asked: waiting).",
	}, []string{"result"})
	for _, r := range []string{"taken", "exhausted", "error"} {
		m.metrics.budget.WithLabelValues(r)
	}
	if m.o.BudgetPoll <= 0 {
		m.o.BudgetPoll = 10 * time.Second
	}
	if m.o.BudgetRenew <= 0 {
		m.o.BudgetRenew = 20 * time.Second
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{m.metrics.attempts, m.metrics.restarts, m.metrics.budget} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("remedy: %w", err)
			}
		}
	}
	return m, nil
}

// Attempts returns the attempts so far.
func (m *Remedier) Attempts() []Attempt {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Attempt(nil), m.attempts...)
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

// Restart carries out a plan of ActionRestart: judge, write the restart
// down, ask the kubelet's supervisor, verify; the attempt is recorded.
// tried is false when nothing was tried (the kubelet changed since the
// decision: decide again).
func (m *Remedier) Restart(ctx context.Context, plan Plan) (a Attempt, tried bool) {
	start := m.clock.Now()
	a = m.restart(ctx, plan, start)
	if a.Outcome == "" {
		return a, false
	}
	m.record(a, start)
	return a, true
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

// Check carries out a plan of ActionCheck: while the rate limit or the
// daily budget holds a restart back, it judges the restart as Restart
// would, touching nothing. A kubelet that would refuse, state files that
// need a person, or a restart hotplugd cannot judge end as that attempt
// would have (journaled, recorded: tried is true). Anything else (a restart
// would be tried, the machine could not be read, a dry run) leaves it to
// the restart at the wait's end: tried is false, and the caller remembers
// the key as checked.
func (m *Remedier) Check(ctx context.Context, plan Plan) (a Attempt, tried bool) {
	if m.o.DryRun {
		return a, false
	}
	start := m.clock.Now()
	j := m.judge(ctx, plan, start)
	if j.done && (j.a.Outcome == OutcomeRefused || j.a.Outcome == OutcomeNeedsPerson || j.a.Outcome == OutcomeWithheld) {
		m.record(j.a, start)
		return j.a, true
	}
	if !j.done {
		m.log.Info("held back: a restart would be tried; waiting", zap.String("key", plan.Key),
			zap.Time("not_before", plan.At), zap.String("state_files", oneLine(j.dry)))
	}
	return a, false
}

func (m *Remedier) next(from time.Time) string {
	return from.Add(m.o.Interval).UTC().Format(time.RFC3339)
}
