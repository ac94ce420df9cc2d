// Package faultpoint marks the points where the crash-safety tests stop
// hotplugd (test/integration's crash tests: SIGKILL and SIGTERM at each
// phase of a kubelet restart). In a normal build Hit does nothing and costs
// nothing; a binary built with the tag faultinject pauses at the point named
// by $HOTPLUGD_FAULTPOINT, after creating the file $HOTPLUGD_FAULTPOINT_FILE
// (so the test knows it is there), for $HOTPLUGD_FAULTPOINT_HOLD (a Go
// duration; default: until killed), then goes on.
//
// It is a package of its own so that the hooks in pkg/remedy and
// pkg/statefile depend on nothing, and the test-only behavior is compiled
// in only where a test asks for it.
package faultpoint

// The points.
const (
	// RemedyStopped: the kubelet was stopped, no state file written yet.
	RemedyStopped = "remedy-stopped"
	// StateFileWrite: a state file's backup exists, the new file is not
	// yet renamed into place.
	StateFileWrite = "statefile-write"
	// RemedyStarted: the kubelet was started on the repaired files, not
	// verified yet.
	RemedyStarted = "remedy-started"
	// RemedyVerifying: the kubelet's healthz answered; the Node is being
	// checked.
	RemedyVerifying = "remedy-verifying"
)
