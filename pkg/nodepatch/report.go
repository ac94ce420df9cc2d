package nodepatch

import (
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// State is the Node as last seen against the prediction: what the control
// loop publishes after every decision, and what the remedy's verification
// reads.
type State struct {
	// Node is the latest Node seen, nil until the kubelet registered it.
	Node *v1.Node
	// Prediction is nil until the daemon's first snapshot.
	Prediction *Prediction
	// Drift is how the Node differs from the prediction (noise included).
	Drift Drift
}

// Known reports whether both sides are known, so Drift means something.
func (s State) Known() bool { return s.Node != nil && s.Prediction != nil }

// Event is one Event to send on the Node.
type Event struct {
	Type, Reason, Message string
}

// ReportInputs are what the Node's half of a plan depends on.
type ReportInputs struct {
	Node       *v1.Node
	Prediction Prediction
	// MinMemoryDelta is the smallest memory difference that is drift.
	MinMemoryDelta resource.Quantity
	// Note is the remedy's word on the current prediction (its last
	// attempt, unless it worked), appended to the condition.
	Note Note
	Now  time.Time
	// Heartbeat is how often the condition's lastHeartbeatTime is written
	// again when nothing else changed (0: only on a change), so that a
	// reader can tell a live hotplugd's "False" from a dead one's.
	Heartbeat time.Duration
	// Evented is the drift message last sent as an Event, and EventedKnown
	// whether it was set yet: until it is, the condition found on the Node
	// says whether this drift was reported before the daemon restarted.
	Evented      string
	EventedKnown bool
	// Hold says why nothing is written now ("" when writes go ahead): a
	// kubelet restart under way, or a kubelet that has just started and
	// has not yet reported what it sees (only a stale drift is held then).
	HoldAll, HoldStale string
}

// Report is the Node's half of a plan: the drift, and what to write.
type Report struct {
	Drift Drift
	// Patch is the nodes/status patch to send; nil: the Node carries what
	// hotplugd wants, or writes are held.
	Patch []byte
	// Condition is the condition Patch writes (or the Node carries).
	Condition v1.NodeCondition
	// Events are the drift Events to send.
	Events []Event
	// Evented is ReportInputs.Evented after Events are sent.
	Evented string
	// Held says why writes are held ("" when not).
	Held string
	// NextHeartbeat is when the condition's heartbeat is next due (zero
	// without a Heartbeat).
	NextHeartbeat time.Time
}

// Reported computes what the Node should carry and which Events to send.
// It is pure: the same inputs give the same report.
func Reported(in ReportInputs) Report {
	drift := Compare(in.Prediction, in.Node.Status, in.MinMemoryDelta)
	want := desiredFor(in.Node, in.Prediction, drift, in.Note, in.Now, in.Heartbeat)
	r := Report{Drift: drift, Condition: want.condition, Evented: in.Evented}
	if in.Heartbeat > 0 {
		r.NextHeartbeat = want.condition.LastHeartbeatTime.Add(in.Heartbeat)
	}
	switch {
	case in.HoldAll != "":
		r.Held = in.HoldAll
		return r
	case in.HoldStale != "" && drift.Stale():
		r.Held = in.HoldStale
		return r
	}
	msg := ""
	if sig := drift.Significant(); len(sig) > 0 {
		msg = staleMessage(sig)
	}
	evented := in.Evented
	if !in.EventedKnown {
		// At start the condition already on the Node tells whether this
		// drift was reported before the daemon restarted.
		evented = ""
		if c := FindCondition(in.Node); c != nil && c.Status == v1.ConditionTrue && msg != "" && strings.HasPrefix(c.Message, msg) {
			evented = msg
		}
	}
	if msg != "" && msg != evented {
		r.Events = append(r.Events, Event{Type: v1.EventTypeWarning, Reason: ReasonCapacityDrift, Message: msg})
	}
	r.Evented = msg
	r.Patch = patch(in.Node, want)
	return r
}

// Newest is the newest Node known: the watch's, or the answer to hotplugd's
// last patch when the watch has not caught up (after an API server outage
// the watch may take a while to come back, the patch answer does not). A
// Node deleted since the patch is nil.
func Newest(watched *v1.Node, synced bool, patched *v1.Node) *v1.Node {
	if watched == nil || (patched != nil && newer(patched, watched)) {
		if patched != nil && watched == nil && synced {
			return nil // deleted since
		}
		return patched
	}
	return watched
}

func newer(a, b *v1.Node) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}
