// Package kubeletstate holds what pkg/cpumgr and pkg/memmgr say alike about
// a kubelet resource manager's state file: the sentinel errors their
// verdicts wrap, so that a caller (pkg/preflight) tells them apart with one
// errors.Is whichever file it is, and the shape of a repair plan. Each
// package re-exports the sentinels under the same names.
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
	// String describes the plan for people.
	String() string
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
