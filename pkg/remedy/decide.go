package remedy

import (
	"fmt"
	"slices"
	"time"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// Mode is what hotplugd does about a drift.
type Mode string

// The modes.
const (
	// ModeReport only reports (condition, annotations, Event).
	ModeReport Mode = "report"
	// ModeRestartKubelet also restarts the kubelet with repaired state files.
	ModeRestartKubelet Mode = "restart-kubelet"
)

// Action is what a Plan does.
type Action string

// The actions.
const (
	ActionNone    Action = "none"    // nothing to fix
	ActionReport  Action = "report"  // drift, but only reporting is allowed
	ActionWait    Action = "wait"    // drift, act later (At, or on the next event)
	ActionRestart Action = "restart" // restart the kubelet now
	// ActionCheck: drift, but the rate limit holds a restart back until
	// At. Judge now, without touching the kubelet, whether a restart could
	// help at all: a kubelet that would refuse to start, or state files
	// that need a person, are reported at once, not when the interval
	// ends; otherwise wait until At.
	ActionCheck Action = "check"
)

// Inputs are everything Decide looks at.
type Inputs struct {
	Mode Mode
	// Off says why the remedy is off on this node ("": it is not): the
	// Node's label LabelRemedy.
	Off string
	// Known is false until both the Node and the machine are known.
	Known bool
	// Drift is the Node's drift (noise included; only significant
	// differences count).
	Drift nodepatch.Drift
	Now   time.Time
	// LastActivity is the last event on the machine (or the daemon's
	// start). Arriving says what the kernel says is still arriving ("":
	// the change is complete, and the restart goes ahead once the burst
	// is quiet); while it is not empty the restart waits until the
	// machine has had no event for Settle.
	LastActivity time.Time
	Arriving     string
	Settle       time.Duration
	// Busy is true while a burst is being debounced or reconciled.
	Busy bool
	// LastAttempt is the last remedy's start (zero: none); Interval the
	// rate limit between attempts.
	LastAttempt time.Time
	Interval    time.Duration
	// UnexplainedDecrease: the Node's memory capacity is above the
	// machine's and no memory offline or remove uevent came since the
	// kubelet started: a balloon driver, not a hot-remove. A restart would
	// follow it up and down forever.
	UnexplainedDecrease bool
	// Restarts are the restarts asked for in the last 24 hours (the
	// journal's), MaxPerDay their bound (0: none).
	Restarts  []time.Time
	MaxPerDay int
	// InPlaceResize is true when the kubelet follows the machine's CPUs
	// and memory itself (kubeletversion.Release.ResizesInPlace: a release
	// with the InPlaceNodeResourceResize gate of KEP-3953, with the gate
	// on). No kubelet up to 1.37 has that gate, and a kubelet refuses gates
	// it does not know, so today it is always false: it turns on when a
	// release row in pkg/kubeletversion gains the gate and a node enables it.
	InPlaceResize bool
	// Remediable is false when the kubelet cannot be restarted safely
	// (not found, a release hotplugd does not know, its state files out of
	// reach); NotRemediable says why.
	Remediable    bool
	NotRemediable string
	// Key identifies the (prediction, kubelet configuration) a remedy
	// would be for; Previous is the journal's last attempt for it.
	Key      string
	Previous *journal.Entry
	// KubeletFresh is when a kubelet that has just started has had its
	// time to report its Node (its start plus the grace); zero: not fresh.
	KubeletFresh time.Time
	// Checked is the key an ActionCheck found a restart would be tried
	// for, in the wait after LastAttempt: a rate-limited wait checks each
	// key once.
	Checked string
	// Windows are the times a restart may start in (--remedy-window);
	// none: any time.
	Windows Windows
	// Budget is the last try of the cluster-wide restart budget that found
	// it taken (zero: none for this key).
	Budget BudgetWait
}

// BudgetWait is a try of the cluster-wide restart budget (pkg/budget)
// that found it taken or could not ask: the restart for Key waits until
// Until, then tries again.
type BudgetWait struct {
	Key   string
	Until time.Time
	// Why is what the try found, for the plan ("held by node-a, node-b").
	Why string
	// Note is the condition's word while the node waits: stable, so that
	// waiting writes the Node once.
	Note string
}

// Plan is a decision with its reason.
type Plan struct {
	Action Action
	Why    string
	// At is when to decide again, for ActionWait; zero: on the next
	// event or Node change.
	At    time.Time
	Drift nodepatch.Drift
	// Key is Inputs.Key, for the remedy's record.
	Key string
	// BudgetWait: the wait is for the cluster-wide restart budget.
	BudgetWait bool
}

// String reads "restart: capacity cpu 2 -> 1: the change is complete".
func (p Plan) String() string {
	if p.At.IsZero() {
		return fmt.Sprintf("%s: %s", p.Action, p.Why)
	}
	return fmt.Sprintf("%s until %s: %s", p.Action, p.At.UTC().Format(time.RFC3339Nano), p.Why)
}

// checkOnce turns a wait that holds a restart back into ActionCheck once
// per key: the wait is against restart loops, and a finding that no
// restart can help restarts nothing and is reported now.
func checkOnce(p Plan, in Inputs) Plan {
	if in.Checked != in.Key {
		p.Action = ActionCheck
		p.Why += "; checking now whether a restart could help at all"
	}
	return p
}

// Decide is the remedy policy.
func Decide(in Inputs) Plan {
	sig := in.Drift.Significant()
	switch {
	case !in.Known:
		return Plan{Action: ActionNone, Why: "the Node or the machine is not known yet"}
	case len(sig) == 0:
		return Plan{Action: ActionNone, Why: "the kubelet reports this machine"}
	}
	p := Plan{Drift: sig, Key: in.Key}
	switch {
	case in.Mode != ModeRestartKubelet:
		p.Action, p.Why = ActionReport, "--remedy="+string(in.Mode)+": reporting only"
	case in.Off != "":
		p.Action, p.Why = ActionReport, in.Off
	case !in.Remediable:
		p.Action, p.Why = ActionReport, "no restart: "+in.NotRemediable
	case in.Previous != nil && in.Previous.Outcome != OutcomeRemediated && in.Previous.Outcome != OutcomeInterrupted:
		// At most one attempt per (prediction, configuration): a failed,
		// refused, withheld, unverified or needs-a-person attempt stands
		// until one changes. An interrupted one concluded nothing.
		p.Action = ActionReport
		p.Why = fmt.Sprintf("the attempt of %s for this machine and kubelet configuration ended %s: not repeated until one of them changes",
			in.Previous.Start.UTC().Format(time.RFC3339), in.Previous.Outcome)
	case in.UnexplainedDecrease:
		p.Action = ActionReport
		p.Why = "memory capacity went down with no memory offline or remove uevent since the kubelet started (a balloon driver?): reporting only; a hot-remove is remedied"
	case in.InPlaceResize:
		p.Action, p.Why = ActionReport, "the kubelet runs with InPlaceNodeResourceResize and follows the machine itself: reporting only"
	case in.Now.Before(in.KubeletFresh):
		p.Action, p.At = ActionWait, in.KubeletFresh
		p.Why = "the kubelet has just started: giving it time to report its Node"
	case in.Busy:
		p.Action, p.Why = ActionWait, "a burst of events is still arriving"
	case in.Arriving != "" && in.Now.Before(in.LastActivity.Add(in.Settle)):
		p.Action, p.At = ActionWait, in.LastActivity.Add(in.Settle)
		p.Why = fmt.Sprintf("the change is still arriving (%s): waiting until the machine has had no event for %v", in.Arriving, in.Settle)
	case !in.LastAttempt.IsZero() && in.Now.Before(in.LastAttempt.Add(in.Interval)):
		p.Action, p.At = ActionWait, in.LastAttempt.Add(in.Interval)
		p.Why = fmt.Sprintf("rate limited: one attempt per %v, the last at %s", in.Interval, in.LastAttempt.UTC().Format(time.RFC3339))
		p = checkOnce(p, in)
	case in.MaxPerDay > 0 && len(in.Restarts) >= in.MaxPerDay:
		// The oldest restart in the window leaves it first.
		oldest := slices.MinFunc(in.Restarts, time.Time.Compare)
		p.Action, p.At = ActionWait, oldest.Add(24*time.Hour)
		p.Why = fmt.Sprintf("daily budget spent: %d kubelet restarts in the last 24 hours (at most %d)", len(in.Restarts), in.MaxPerDay)
		p = checkOnce(p, in)
	default:
		if open, next := in.Windows.Open(in.Now); !open {
			p.Action, p.At = ActionWait, next
			if next.IsZero() {
				p.At = in.Now.Add(24 * time.Hour)
			}
			p.Why = fmt.Sprintf("outside the remedy windows (%s): the restart waits for the next one", in.Windows)
			return checkOnce(p, in)
		}
		if in.Budget.Key == in.Key && in.Now.Before(in.Budget.Until) {
			p.Action, p.At, p.BudgetWait = ActionWait, in.Budget.Until, true
			p.Why = in.Budget.Why
			return p
		}
		p.Action, p.Why = ActionRestart, sig.String()+": the change is complete"
	}
	return p
}
