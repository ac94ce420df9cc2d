package sdnotify

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"go.uber.org/zap"
)

// Notifier sends sd_notify messages to systemd. Its methods are safe for
// concurrent use.
type Notifier struct {
	log      *zap.Logger
	socket   string        // NOTIFY_SOCKET; "" outside systemd
	watchdog time.Duration // WATCHDOG_USEC for this process; 0 when not set

	// Seams for tests.
	send      func(state string) error
	newTicker func(d time.Duration) (ticks <-chan time.Time, stop func())
}

// New reads the sd_notify environment. log may be nil. An invalid
// WATCHDOG_USEC is logged and disables the watchdog pings; WATCHDOG_PID
// naming another process (the variables were inherited) disables them too.
func New(log *zap.Logger) *Notifier {
	if log == nil {
		log = zap.NewNop()
	}
	n := &Notifier{
		log:       log,
		socket:    os.Getenv("NOTIFY_SOCKET"),
		send:      sdNotify,
		newTicker: newTicker,
	}
	if n.socket == "" {
		log.Debug("not started by systemd with a notify socket: sd_notify disabled")
		return n
	}
	wd, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("ignoring the watchdog settings systemd passed", zap.Error(err))
		wd = 0
	}
	n.watchdog = wd
	log.Debug("sd_notify enabled", zap.String("socket", n.socket), zap.Duration("watchdog", wd))
	return n
}

// Ready tells systemd that start-up is finished, with status as the STATUS=
// line shown by `systemctl status` (none when empty).
func (n *Notifier) Ready(status string) error {
	state := daemon.SdNotifyReady
	if status != "" {
		state += "\nSTATUS=" + oneLine(status)
	}
	return n.notify(state)
}

// Status sets the STATUS= line shown by `systemctl status`.
func (n *Notifier) Status(status string) error {
	return n.notify("STATUS=" + oneLine(status))
}

// Stopping tells systemd that the daemon is shutting down.
func (n *Notifier) Stopping() error {
	return n.notify(daemon.SdNotifyStopping)
}

// WatchdogInterval is the WatchdogSec= of the unit, or 0 when the watchdog is
// not enabled for this process.
func (n *Notifier) WatchdogInterval() time.Duration {
	return n.watchdog
}

// RunWatchdog sends WATCHDOG=1 every WatchdogInterval()/2 for as long as ctx
// is not done, but only when healthy returns true (healthy may be nil:
// always healthy). Skipping the ping while the daemon is unhealthy is the
// point: systemd then kills and restarts it once WatchdogSec passes without
// one. It returns nil when ctx is done, and at once when there is no
// watchdog. A failed ping is logged; the next tick tries again.
func (n *Notifier) RunWatchdog(ctx context.Context, healthy func() bool) error {
	if n.watchdog <= 0 {
		return nil
	}
	ticks, stop := n.newTicker(n.watchdog / 2)
	defer stop()
	unhealthy := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticks:
		}
		if healthy != nil && !healthy() {
			if !unhealthy {
				n.log.Warn("unhealthy: withholding watchdog pings; systemd restarts the daemon when this lasts", zap.Duration("watchdog", n.watchdog))
			}
			unhealthy = true
			continue
		}
		if unhealthy {
			n.log.Info("healthy again: watchdog pings resumed")
			unhealthy = false
		}
		if err := n.notify(daemon.SdNotifyWatchdog); err != nil {
			n.log.Warn("watchdog ping failed", zap.Error(err))
		}
	}
}

func (n *Notifier) notify(state string) error {
	if n.socket == "" {
		return nil
	}
	if err := n.send(state); err != nil {
		first, _, _ := strings.Cut(state, "\n")
		return fmt.Errorf("sdnotify: send %s to %s: %w", first, n.socket, err)
	}
	return nil
}

// sdNotify sends state to NOTIFY_SOCKET.
func sdNotify(state string) error {
	_, err := daemon.SdNotify(false, state)
	return err
}

func newTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// oneLine keeps a status on its line: a newline would start another
// assignment in the datagram.
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
