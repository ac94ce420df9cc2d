// Package kubeletstate holds what pkg/cpumgr and pkg/memmgr say alike about
// a kubelet resource manager's state file: the sentinel errors their
// verdicts wrap, so that a caller (pkg/preflight) tells them apart with one
// errors.Is whichever file it is, the shape of a repair plan, and how a
// plan names a pod for people. Each package re-exports the sentinels under
// the same names.
package kubeletstate

import (
	"errors"
	"time"
)

// The verdicts, the same for both state files.
var (
	// ErrCorrupt: the kubelet's checkpoint loader refuses the file (not
	// JSON, a field of the wrong type, a checksum that does not verify).
	ErrCorrupt = errors.New("the kubelet's checkpoint loader refuses the file")
	// ErrUnsupportedFormat: a layout hotplugd recognises but does not
	// rewrite, or one no kubelet it knows writes: the kubelet judges it.
	ErrUnsupportedFormat = errors.New("a state file layout hotplugd does not rewrite")
	// ErrInvalidState: a state the kubelet refuses at start.
	ErrInvalidState = errors.New("the kubelet would refuse the state")
	// ErrPolicyChanged: the file was written under another policy than the
	// configured one.
	ErrPolicyChanged = errors.New("the manager's policy changed")
	// ErrConfig: the kubelet refuses the manager's configuration on this
	// machine, whatever the file holds.
	ErrConfig = errors.New("the kubelet refuses the manager's configuration")
	// ErrCannotPredict: a configuration the kubelet may start with, but
	// whose outcome hotplugd does not predict: the file is not judged.
	ErrCannotPredict = errors.New("hotplugd cannot predict what the kubelet makes of this configuration")
	// ErrNeedsDrain: a rebuild would drop assignments the operator has not
	// allowed to drop: their pods must be drained first.
	ErrNeedsDrain = errors.New("assignments cannot be kept: drain their pods first")
)

// Plan is the shape of a repair plan of either file (*cpumgr.Plan,
// *memmgr.Plan): a plain value to print (a dry run), to assert in tests,
// and to carry out.
type Plan interface {
	// String describes the plan for people, its pods by UID: it is
	// Describe(nil).
	String() string
	// Describe is String with the pods names knows named.
	Describe(names PodNames) string
	// Drains are the assignments the plan cannot keep, in its order: to
	// drain first while it is Blocked, or to drop when the operator
	// allowed that.
	Drains() []Drain
	// NeedsRewrite says the file must be rewritten for the kubelet to
	// start with it.
	NeedsRewrite() bool
	// Blocked says the rewrite would drop assignments the operator has not
	// allowed to drop (ErrNeedsDrain).
	Blocked() bool
	// Apply writes the new file after a timestamped backup of the old one
	// and returns the backup's path; a plan that needs no rewrite writes
	// nothing, a blocked one fails with ErrNeedsDrain.
	Apply(now time.Time) (backup string, err error)
}

// PodNames names pods for people: "<namespace>/<name>" by pod UID (the
// state files hold only UIDs; pkg/podnames finds the names). A nil
// PodNames names none.
type PodNames map[string]string

// Pod is how a plan refers to the pod uid: "pod <namespace>/<name> (uid
// <uid>)" when n names it, else "pod <uid>".
func (n PodNames) Pod(uid string) string {
	if name := n[uid]; name != "" {
		return "pod " + name + " (uid " + uid + ")"
	}
	return "pod " + uid
}

// Drain is an assignment a plan cannot keep, in the plan's words.
type Drain struct {
	// PodUID is its pod's.
	PodUID string
	// What is the assignment without its pod: "container db 4-5",
	// "(pod-level): 1Gi of memory on NUMA [0]".
	What string
	// Reason says why it cannot be kept.
	Reason string
}

// Describe is the drain as the plan prints it, its pod named by names:
// "pod default/db-0 (uid ...) container db 4-5: CPUs 4-5 are offline".
func (d Drain) Describe(names PodNames) string {
	s := names.Pod(d.PodUID) + " " + d.What
	if d.Reason != "" {
		s += ": " + d.Reason
	}
	return s
}
