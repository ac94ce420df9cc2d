// Package faultpoint marks the points where the crash-safety tests stop
// hotplugd (test/integration's crash tests: SIGKILL and SIGTERM at each
// moment of a kubelet restart, and in preflight's write). In a normal build Hit does nothing and costs
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
	// RemedyRestarting: the journal says a restart is being asked for;
	// the kubelet's supervisor has not been asked yet.
	RemedyRestarting = "remedy-restarting"
	// StateFileWrite: a state file's backup exists, the new file is not
	// yet renamed into place (hotplugd preflight, in the kubelet's start).
	StateFileWrite = "statefile-write"
	// RemedyRestarted: the supervisor's restart is done (the new kubelet
	// started); the journal still says "restarting".
	RemedyRestarted = "remedy-restarted"
	// RemedyVerifying: the kubelet's healthz answered; the Node is being
	// checked.
	RemedyVerifying = "remedy-verifying"
)
