package kubeletctl

import (
	"context"
	"io"
)

// Controller stops and starts the kubelet. Implementations wait until the
// operation has finished (unit inactive/active, command exited).
type Controller interface {
	// Stop stops the kubelet and returns once it is stopped.
	Stop(ctx context.Context) error
	// Start starts the kubelet and returns once it is running.
	Start(ctx context.Context) error
	// String names it for logs and events, e.g. `systemd unit
	// kubelet.service` or `commands`.
	String() string
	// Close releases what it holds (Systemd's bus connection); Stop and
	// Start may fail afterwards. It is idempotent. A job or command already
	// running is not stopped by it.
	io.Closer
}

var (
	_ Controller = (*Systemd)(nil)
	_ Controller = (*Commands)(nil)
)
