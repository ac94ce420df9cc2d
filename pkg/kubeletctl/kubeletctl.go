package kubeletctl

import (
	"context"
	"io"
)

// Restarter asks the kubelet's supervisor to restart the kubelet. The
// supervisor owns the restart: once asked, the kubelet's stop and its start
// (with the state-file repair that runs in the start) happen whatever
// becomes of the caller.
type Restarter interface {
	// Restart asks for one restart and returns once the supervisor has
	// carried it out (the new kubelet started, or the start failed), or
	// when ctx ends first: the restart then goes on without the caller.
	Restart(ctx context.Context) error
	// String names it for logs and events, e.g. `systemd unit
	// kubelet.service` or `restart command`.
	String() string
	// Close releases what it holds (Systemd's bus connection); a restart
	// already asked for goes on. It is idempotent.
	io.Closer
}

var (
	_ Restarter = (*Systemd)(nil)
	_ Restarter = (*Command)(nil)
)
