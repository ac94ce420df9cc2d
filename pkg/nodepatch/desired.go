package nodepatch

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// The condition hotplugd owns on its Node.
const ConditionType v1.NodeConditionType = "KubeletCapacityStale"

// Reasons of the condition and of Events.
const (
	// ReasonCapacityDrift: the kubelet reports what the machine had when
	// it started (condition True; Warning Event).
	ReasonCapacityDrift = "CapacityDrift"
	// ReasonCapacityCurrent: the kubelet reports this machine (False).
	ReasonCapacityCurrent = "CapacityCurrent"
	// ReasonRemediated: a kubelet restart made the Node current (Event).
	ReasonRemediated = "Remediated"
	// ReasonRemediationFailed: the restart did not make it current and
	// was rolled back (condition True; Warning Event).
	ReasonRemediationFailed = "RemediationFailed"
	// ReasonNeedsDrain: the state files cannot be rebuilt without
	// dropping pinned containers; a person must drain the node.
	ReasonNeedsDrain = "NeedsDrain"
	// ReasonKubeletWouldRefuse: the kubelet would refuse to start on this
	// machine with its configuration, so it was not restarted (condition
	// True; Warning Event in the kubelet's words).
	ReasonKubeletWouldRefuse = "KubeletWouldRefuse"
	// ReasonRestartWithheld: a restart would help, but hotplugd cannot
	// judge what it would start (a configuration, command line or binary
	// changed since the kubelet started, a unit masked or awaiting
	// daemon-reload, a state file it cannot judge, no hotplugd preflight in
	// the kubelet's start) or what it would do to running pods (readiness
	// reset): not restarted (condition True; Warning Event saying why and
	// what to do).
	ReasonRestartWithheld = "RestartWithheld"
)

// The annotations hotplugd owns on its Node; nothing else under the prefix
// is written, and nothing outside it. AnnotationRetry is a person's.
const (
	AnnotationPrefix = "hotplugd.io/"
	// AnnotationCapacity is the detected capacity, "cpu=2,hugepages-2Mi=0,memory=24684092Ki".
	AnnotationCapacity = AnnotationPrefix + "capacity"
	// AnnotationAllocatable is the predicted allocatable, when the
	// kubelet's configuration is known.
	AnnotationAllocatable = AnnotationPrefix + "allocatable"
	// AnnotationLastChange is when hotplugd last saw the detected
	// capacity change (RFC 3339).
	AnnotationLastChange = AnnotationPrefix + "last-change"
	// AnnotationRetry is set by a person, never by hotplugd: each new
	// value has the remedy try again what its earlier attempts concluded
	// (kubectl annotate node NODE hotplugd.io/retry="$(date +%s)"
	// --overwrite). The rate limit and the daily budget still hold.
	AnnotationRetry = AnnotationPrefix + "retry"
)

// Note is what the remedy adds to the condition while the drift lasts: its
// reason replaces CapacityDrift and its message is appended.
type Note struct {
	Reason, Message string
}

// desired is what hotplugd wants on the Node.
type desired struct {
	condition   v1.NodeCondition
	annotations map[string]string // a "" value removes the annotation
}

// staleMessage is the condition message for a drift, without a note; an
// Event is sent when it changes.
func staleMessage(d Drift) string {
	return "the kubelet reports what the machine had when it started (reported -> this machine): " + d.String()
}

const currentMessage = "the kubelet reports this machine's cpu, memory and hugepages"

// desiredFor computes what the Node should carry. Times already on the Node
// are kept unless what they date changed: lastTransitionTime when the
// status flips, last-change when the detected capacity changes,
// lastHeartbeatTime when the condition changes or heartbeat has passed
// since it was written (heartbeat 0: only on a change).
func desiredFor(node *v1.Node, p Prediction, drift Drift, note Note, now time.Time, heartbeat time.Duration) desired {
	cond := v1.NodeCondition{
		Type:   ConditionType,
		Status: v1.ConditionFalse,
		Reason: ReasonCapacityCurrent, Message: currentMessage,
	}
	if sig := drift.Significant(); len(sig) > 0 {
		cond.Status, cond.Reason, cond.Message = v1.ConditionTrue, ReasonCapacityDrift, staleMessage(sig)
		if note.Reason != "" {
			cond.Reason = note.Reason
		}
		if note.Message != "" {
			cond.Message += "; " + note.Message
		}
	}
	if p.Limit != "" {
		cond.Message += "; " + p.Limit
	}
	stamp := metav1.NewTime(now.Truncate(time.Second))
	cond.LastHeartbeatTime, cond.LastTransitionTime = stamp, stamp
	if old := FindCondition(node); old != nil {
		if old.Status == cond.Status {
			cond.LastTransitionTime = old.LastTransitionTime
		}
		if sameCondition(*old, cond) && (heartbeat <= 0 || now.Before(old.LastHeartbeatTime.Add(heartbeat))) {
			cond.LastHeartbeatTime = old.LastHeartbeatTime
		}
	}

	ann := map[string]string{
		AnnotationCapacity:    FormatResources(p.Capacity),
		AnnotationAllocatable: "",
		AnnotationLastChange:  now.UTC().Format(time.RFC3339),
	}
	if p.Allocatable != nil {
		ann[AnnotationAllocatable] = FormatResources(p.Allocatable)
	}
	if old := node.Annotations; old[AnnotationCapacity] == ann[AnnotationCapacity] && old[AnnotationLastChange] != "" {
		ann[AnnotationLastChange] = old[AnnotationLastChange]
	}
	return desired{condition: cond, annotations: ann}
}

// FindCondition is hotplugd's condition on node (nil: none, or no node).
func FindCondition(node *v1.Node) *v1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == ConditionType {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// sameCondition compares what hotplugd decides, not the times.
func sameCondition(a, b v1.NodeCondition) bool {
	return a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// patch returns the strategic-merge patch of nodes/status that brings node
// to d, nil when it already matches. A nodes/status patch keeps metadata
// changes (only spec is reset), so the annotations and the condition go in
// one request; only what differs is in it.
func patch(node *v1.Node, d desired) []byte {
	changed := map[string]*string{}
	for _, k := range slices.Sorted(maps.Keys(d.annotations)) {
		want := d.annotations[k]
		have, ok := node.Annotations[k]
		switch {
		case want == "" && ok:
			changed[k] = nil
		case want != "" && want != have:
			changed[k] = &want
		}
	}
	body := map[string]any{}
	if len(changed) > 0 {
		body["metadata"] = map[string]any{"annotations": changed}
	}
	if old := FindCondition(node); old == nil || !sameCondition(*old, d.condition) || !old.LastHeartbeatTime.Equal(&d.condition.LastHeartbeatTime) {
		body["status"] = map[string]any{"conditions": []v1.NodeCondition{d.condition}}
	}
	if len(body) == 0 {
		return nil
	}
	b, _ := json.Marshal(body)
	return b
}

// FormatResources is a resource list as "cpu=2,hugepages-2Mi=0,memory=24684092Ki",
// in the order hotplugd reports resources.
func FormatResources(l v1.ResourceList) string {
	names := make([]string, 0, len(l))
	for n := range l {
		names = append(names, string(n))
	}
	slices.SortFunc(names, topology.CompareResources)
	parts := make([]string, len(names))
	for i, n := range names {
		q := l[v1.ResourceName(n)]
		parts[i] = n + "=" + q.String()
	}
	return strings.Join(parts, ",")
}
