package control

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Config is the operator's part of the inputs (flags).
type Config struct {
	Mode remedy.Mode
	// Settle is the longest a restart waits for a change the kernel says
	// is still arriving (Arrivals): until the machine has had no event for
	// this long. A complete change restarts once its burst is quiet.
	Settle time.Duration
	// Interval is the rate limit: one attempt per Interval.
	Interval time.Duration
	// MaxPerDay bounds the restarts asked for in any 24 hours (0: none).
	MaxPerDay int
	// Grace is how long a kubelet that has just started has to report its
	// Node before a drift counts (neither written nor remedied before).
	Grace time.Duration
	// MinMemoryDelta is the smallest memory difference that is drift.
	MinMemoryDelta resource.Quantity
	// Heartbeat is how often the condition's lastHeartbeatTime is written
	// again when nothing changed (0: only on a change).
	Heartbeat time.Duration
	// Windows are when a restart may start (none: any time).
	Windows remedy.Windows
}

// Inputs are everything Decide looks at: values only.
type Inputs struct {
	Config
	Now time.Time
	// Snapshot is the daemon's last snapshot (nil before the first).
	Snapshot *topology.Snapshot
	// Kubelet is the kubelet as last discovered (nil: none).
	Kubelet *kubeletwatch.Facts
	// Node is the newest Node known (nil: not registered, or not seen).
	Node *v1.Node
	// Journal is the remedy's record.
	Journal journal.View
	// Busy: a burst of events is being debounced or reconciled.
	Busy bool
	// LastActivity is the last event on the machine (or the loop's start);
	// LastMemoryDown the last memory offline or remove uevent.
	LastActivity, LastMemoryDown time.Time
	// Arriving says what the kernel's uevents say is still arriving
	// (Arrivals.Pending; "": the change is complete).
	Arriving string
	// Done is what the loop has executed so far.
	Done Done
	// Paused says why remedies are paused cluster-wide ("": they are not).
	Paused string
}

// Done is the loop's record of what it executed: the part of the inputs
// that the plan's execution feeds back.
type Done struct {
	// Evented is the drift message last sent as an Event; EventedKnown is
	// false until the first Node was judged (then the condition on the
	// Node says whether its drift was sent by an earlier hotplugd).
	Evented      string
	EventedKnown bool
	// JournalSent is the last journal entry sent as an Event.
	JournalSent int64
	// RetryAt: a Node write failed; none before it.
	RetryAt time.Time
	// Remedying: the remedy executor is busy (a restart, a check, or
	// settling a restart an earlier hotplugd left under way).
	Remedying bool
	// LastTry is the start of the last remedy tried, journaled or not.
	LastTry time.Time
	// Checked is the key a check found a restart would be tried for, in
	// the wait after the attempt that started at CheckedAfter.
	Checked      string
	CheckedAfter time.Time
	// Budget is the last try of the cluster-wide restart budget that found
	// it taken (cleared by a try that got it, or by anything tried).
	Budget remedy.BudgetWait
}

// Plan is one decision: what the Node should carry, what to send, what
// the remedy does, when to decide again.
type Plan struct {
	// Prediction is what a kubelet started now would report (nil before
	// the first snapshot); PredictErr says why allocatable is missing from
	// it (the kubelet would refuse this machine with its configuration).
	Prediction *nodepatch.Prediction
	PredictErr string
	// NodeKnown: a Node was judged; Node is the Node's half.
	NodeKnown bool
	// NodeReported: the Node's report was made, not held (its Events and
	// Evented are the drift's), though its patch may wait for a retry:
	// the loop records Evented and the staleness.
	NodeReported bool
	Node         nodepatch.Report
	// Events are sent in order: the remedy journal's new entries, then the
	// drift's.
	Events []nodepatch.Event
	// JournalSent is Done.JournalSent once Events are sent.
	JournalSent int64
	// Remedy is the remedy's half.
	Remedy remedy.Plan
	// Wake is when to decide again with no new input (zero: on the next
	// input).
	Wake time.Time
	// Retry is a new retry token from the Node (nodepatch.AnnotationRetry) to take
	// into the journal before anything else of the plan; the loop then
	// decides again.
	Retry string
}

// String prints the plan, one line per part.
func (p Plan) String() string {
	var b strings.Builder
	if p.Prediction != nil {
		fmt.Fprintf(&b, "prediction: capacity %s", nodepatch.FormatResources(p.Prediction.Capacity))
		if p.Prediction.Allocatable != nil {
			fmt.Fprintf(&b, "; allocatable %s", nodepatch.FormatResources(p.Prediction.Allocatable))
		}
		fmt.Fprintf(&b, " (key %s)\n", p.Prediction.Key)
	}
	switch {
	case !p.NodeKnown:
		b.WriteString("node: not seen yet\n")
	case p.Node.Held != "":
		fmt.Fprintf(&b, "node: %s; writes held: %s\n", driftText(p.Node.Drift), p.Node.Held)
	case p.Node.Patch != nil:
		fmt.Fprintf(&b, "node: %s; patch %s\n", driftText(p.Node.Drift), p.Node.Patch)
	default:
		fmt.Fprintf(&b, "node: %s; nothing to write\n", driftText(p.Node.Drift))
	}
	for _, e := range p.Events {
		fmt.Fprintf(&b, "event: %s %s: %s\n", e.Type, e.Reason, e.Message)
	}
	fmt.Fprintf(&b, "remedy: %s\n", p.Remedy)
	if !p.Wake.IsZero() {
		fmt.Fprintf(&b, "wake: %s\n", p.Wake.UTC().Format(time.RFC3339Nano))
	}
	if p.Retry != "" {
		fmt.Fprintf(&b, "retry: %s\n", p.Retry)
	}
	return b.String()
}

func driftText(d nodepatch.Drift) string {
	if s := d.Significant(); len(s) > 0 {
		return "drift " + s.String()
	}
	return "current"
}

// day is the daily budget's window.
const day = 24 * time.Hour

// Decide is the whole policy: a pure function of its inputs.
func Decide(in Inputs) Plan {
	p := Plan{JournalSent: in.Done.JournalSent}
	for _, e := range in.Journal.Since(in.Done.JournalSent) {
		p.JournalSent = e.Seq
		if e.Reason == "" {
			continue
		}
		t := v1.EventTypeNormal
		if e.Warning {
			t = v1.EventTypeWarning
		}
		p.Events = append(p.Events, nodepatch.Event{Type: t, Reason: e.Reason, Message: e.Message})
	}
	if in.Node != nil {
		if tok := in.Node.Annotations[nodepatch.AnnotationRetry]; tok != "" && (in.Journal.Retry == nil || in.Journal.Retry.Token != tok) {
			p.Retry = tok
		}
	}
	if in.Snapshot == nil {
		p.Remedy = remedy.Plan{Action: remedy.ActionNone, Why: "the machine is not known yet"}
		return p
	}
	pred, err := Predict(in.Snapshot, in.Kubelet)
	if err != nil {
		p.PredictErr = err.Error()
	}
	p.Prediction = &pred

	// The one grace: a kubelet that has just started reports the machine
	// and its configuration a moment after it is seen.
	var fresh time.Time
	if f := in.Kubelet; f != nil && !f.Started.IsZero() && in.Now.Before(f.Started.Add(in.Grace)) {
		fresh = f.Started.Add(in.Grace)
	}
	var drift nodepatch.Drift
	var nodeEvents int
	if in.Node != nil {
		drift = decideNode(&p, in, pred, fresh, nodepatch.Note{})
		nodeEvents = len(p.Node.Events)
	}

	p.Remedy = decideRemedy(in, pred, drift, fresh)
	// A node that found the cluster's restart budget taken says so in its
	// condition while it waits, and while it tries again (Until passed:
	// a restart; the try running: a remedy under way), and through any
	// other wait on the way (a resync's reconcile is a burst), so that the
	// wait writes the Node once; a restart written down holds the writes.
	waiting := in.Done.Budget.Key == pred.Key && in.Done.Budget.Note != "" &&
		(p.Remedy.Action == remedy.ActionRestart || p.Remedy.Action == remedy.ActionWait)
	if in.Node != nil && waiting {
		// The node waits for the cluster's restart budget: the condition
		// says so (the journal's word on this prediction, if any, wins).
		p.Events = p.Events[:len(p.Events)-nodeEvents]
		p.Wake = time.Time{}
		decideNode(&p, in, pred, fresh, nodepatch.Note{Message: in.Done.Budget.Note})
	}
	p.Wake = earliest(p.Wake, p.Remedy.At)
	return p
}

// decideNode is the Node's half of the plan, with note as the remedy's
// word when the journal has none for the prediction; it returns the drift.
func decideNode(p *Plan, in Inputs, pred nodepatch.Prediction, fresh time.Time, note nodepatch.Note) nodepatch.Drift {
	ri := nodepatch.ReportInputs{
		Node: in.Node, Prediction: pred, MinMemoryDelta: in.MinMemoryDelta, Now: in.Now,
		Evented: in.Done.Evented, EventedKnown: in.Done.EventedKnown, Heartbeat: in.Heartbeat,
		Note: note,
	}
	if e, ok := in.Journal.Last(pred.Key); ok && e.Outcome != journal.OutcomeRemediated && e.Reason != "" {
		ri.Note = nodepatch.Note{Reason: e.Reason, Message: e.Message}
	}
	if in.Journal.Underway != nil {
		ri.HoldAll = "a kubelet restart is under way (its intermediate reports are not drifts)"
	}
	if !fresh.IsZero() {
		ri.HoldStale = "the kubelet has just started: giving it time to report its Node"
	}
	p.NodeKnown = true
	p.Node = nodepatch.Reported(ri)
	p.NodeReported = p.Node.Held == ""
	if p.Node.Held != "" && !fresh.IsZero() && in.Journal.Underway == nil {
		p.Wake = fresh
	}
	if p.Node.Held == "" && p.Node.NextHeartbeat.After(in.Now) {
		p.Wake = earliest(p.Wake, p.Node.NextHeartbeat)
	}
	if p.Node.Patch != nil && in.Now.Before(in.Done.RetryAt) {
		p.Node.Patch = nil
		p.Node.Held = "retrying a failed write at " + in.Done.RetryAt.UTC().Format(time.RFC3339Nano)
		p.Wake = earliest(p.Wake, in.Done.RetryAt)
	}
	p.Events = append(p.Events, p.Node.Events...)
	return p.Node.Drift
}

// decideRemedy is the remedy's half (remedy.Decide) over the loop's
// inputs.
func decideRemedy(in Inputs, pred nodepatch.Prediction, drift nodepatch.Drift, fresh time.Time) remedy.Plan {
	if in.Journal.Underway != nil || in.Done.Remedying {
		return remedy.Plan{Action: remedy.ActionWait, Why: "a remedy is under way", Drift: drift.Significant(), Key: pred.Key}
	}
	f := in.Kubelet
	lastAttempt := lastAttempt(in)
	ri := remedy.Inputs{
		Mode: in.Mode, Off: cmp.Or(remedyOff(in.Node), in.Paused), Known: in.Node != nil, Drift: drift, Now: in.Now,
		Settle: in.Settle, Busy: in.Busy, Interval: in.Interval,
		LastAttempt: lastAttempt, MaxPerDay: in.MaxPerDay, LastActivity: in.LastActivity, Arriving: in.Arriving,
		KubeletFresh: fresh, Key: pred.Key, Windows: in.Windows, Budget: in.Done.Budget,
	}
	if in.MaxPerDay > 0 {
		ri.Restarts = in.Journal.RestartsSince(in.Now.Add(-day))
	}
	if f.Remediable() {
		ri.Remediable = true
		ri.InPlaceResize = f.Release.ResizesInPlace(f.Kubelet.Config.FeatureGates)
	} else {
		ri.NotRemediable = "the kubelet's state files or rules are not known"
		if l := f.Limit(); l != "" {
			ri.NotRemediable = l
		}
	}
	if e, ok := in.Journal.Last(pred.Key); ok {
		ri.Previous = &e
	}
	ri.UnexplainedDecrease = memoryDecrease(drift.Significant()) &&
		(in.LastMemoryDown.IsZero() || (f != nil && in.LastMemoryDown.Before(f.Started)))
	if in.Done.CheckedAfter.Equal(lastAttempt) {
		ri.Checked = in.Done.Checked
	}
	return remedy.Decide(ri)
}

// LabelRemedy is the Node label that turns the remedy off on one node:
// any value but "on" (kubectl label node NODE hotplugd.io/remedy=off); the
// drift is still reported. It is read from the Node hotplugd already
// watches, and hotplugd never writes it.
const LabelRemedy = "hotplugd.io/remedy"

// remedyOff says why the remedy is off on node ("": it is not).
func remedyOff(node *v1.Node) string {
	if node == nil {
		return ""
	}
	v, ok := node.Labels[LabelRemedy]
	if !ok || v == "on" {
		return ""
	}
	return fmt.Sprintf("the remedy is off on this Node (label %s=%s): reporting only", LabelRemedy, v)
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

// earliest is the earlier of two wake times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero() || a.Before(b):
		return a
	}
	return b
}

// Predict is what a kubelet started now on the machine of s would report;
// allocatable only when the kubelet's configuration is known and the
// kubelet would accept this machine with it (else the error says why, and
// capacity alone is compared). Its Key is the remedy's key.
func Predict(s *topology.Snapshot, f *kubeletwatch.Facts) (nodepatch.Prediction, error) {
	p := nodepatch.Prediction{Capacity: s.Capacity(), Limit: f.Limit()}
	var err error
	if cfg := f.Config(); cfg != nil {
		allocatable := s.Allocatable
		if f.Kubelet.AllocatableIgnoresEviction {
			allocatable = s.AllocatableIgnoringEviction
		}
		var alloc v1.ResourceList
		if alloc, err = allocatable(cfg); err == nil {
			p.Allocatable = alloc
		}
	}
	p.Key = remedy.Key(p, f)
	return p, err
}
