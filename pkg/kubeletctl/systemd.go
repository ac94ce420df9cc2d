package kubeletctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"go.uber.org/zap"
)

// DefaultUnit is the kubelet's systemd unit on kubeadm and most
// distributions' hosts.
const DefaultUnit = "kubelet.service"

// defaultSystemBus is the system bus when DBUS_SYSTEM_BUS_ADDRESS is not set
// (the D-Bus specification's default).
const defaultSystemBus = "unix:path=/run/dbus/system_bus_socket"

// ErrNoSuchUnit is matched (errors.Is) by the error for a unit systemd does
// not know.
var ErrNoSuchUnit = errors.New("no such unit")

// SystemdOptions configures NewSystemd.
type SystemdOptions struct {
	// Unit is the kubelet's unit; "" means DefaultUnit. A name without a
	// type suffix gets ".service", as systemctl does.
	Unit string
	// BusAddress is the D-Bus address; "" means the system bus
	// (DBUS_SYSTEM_BUS_ADDRESS or unix:path=/run/dbus/system_bus_socket),
	// which is also where a DaemonSet mounts the host's socket.
	BusAddress string
	// Log receives what is done; nil means no logging.
	Log *zap.Logger
}

// Systemd restarts the kubelet's systemd unit over D-Bus (and starts it,
// for a record left by an earlier hotplugd that stopped it itself). It reconnects on
// the next call when the bus connection was lost (the bus daemon restarted).
// Its methods are safe for concurrent use, but a Stop and a Start racing
// each other replace each other's jobs, as systemctl would.
type Systemd struct {
	unit    string
	address string
	log     *zap.Logger
	// poll is how often a unit in a transitional ActiveState, and the
	// connection while waiting for a job, are looked at again.
	poll time.Duration

	mu     sync.Mutex
	conn   *sdbus.Conn // nil before connecting and after Close
	closed bool
}

// NewSystemd connects to systemd on the bus and checks that it knows the
// unit (LoadState "loaded"), so that a wrong unit name is reported at start
// rather than on the first restart. ctx bounds the connection and the check,
// not the life of the connection. Call Close when done.
func NewSystemd(ctx context.Context, o SystemdOptions) (*Systemd, error) {
	unit := ParseUnitName(o.Unit)
	if unit == "" {
		unit = DefaultUnit
	}
	address := o.BusAddress
	if address == "" {
		address = systemBus()
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	s := &Systemd{
		unit:    unit,
		address: address,
		log:     log.With(zap.String("unit", unit)),
		poll:    200 * time.Millisecond,
	}
	if err := s.checkLoaded(ctx); err != nil {
		s.Close()
		return nil, err
	}
	s.log.Debug("connected to systemd", zap.String("bus", address))
	return s, nil
}

// Unit is the unit's name (kubelet.service).
func (s *Systemd) Unit() string { return s.unit }

// String names the controller for logs and events.
func (s *Systemd) String() string {
	return "systemd unit " + s.unit
}

// Close closes the bus connection; Restart, Stop, Start and Inspect fail
// afterwards. It may be called more than once, and always returns nil
// (io.Closer). A job already queued keeps running in systemd.
func (s *Systemd) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	return nil
}

// Stop stops the unit (StopUnit, mode "replace"), waits for the job and
// checks that the unit is then inactive or failed.
func (s *Systemd) Stop(ctx context.Context) error {
	return s.do(ctx, "stop", (*sdbus.Conn).StopUnitContext, func(state string) bool {
		return state == "inactive" || state == "failed"
	})
}

// Start starts the unit (StartUnit, mode "replace"), waits for the job and
// checks that the unit is then active, waiting while it is activating.
func (s *Systemd) Start(ctx context.Context) error {
	return s.do(ctx, "start", (*sdbus.Conn).StartUnitContext, func(state string) bool {
		return state == "active"
	})
}

// Restart asks systemd to restart the unit (RestartUnit, mode "replace":
// one job that stops the kubelet and starts it again, its ExecStartPre
// commands first, owned by systemd whatever becomes of the caller), waits
// for the job and checks that the unit is then active, waiting while it is
// activating. A job that does not end "done" is an error naming its result;
// a failed start is then systemd's to retry (the unit's Restart= policy).
func (s *Systemd) Restart(ctx context.Context) error {
	return s.do(ctx, "restart", (*sdbus.Conn).RestartUnitContext, func(state string) bool {
		return state == "active"
	})
}

// jobFunc is StopUnitContext, StartUnitContext or RestartUnitContext.
type jobFunc func(c *sdbus.Conn, ctx context.Context, name, mode string, ch chan<- string) (int, error)

func (s *Systemd) do(ctx context.Context, verb string, queue jobFunc, settled func(activeState string) bool) error {
	conn, err := s.connection(ctx)
	if err != nil {
		return err
	}
	began := time.Now()
	// Buffered: go-systemd sends the result while holding the lock all
	// jobs share, and nobody reads it once ctx has ended.
	done := make(chan string, 1)
	id, err := queue(conn, ctx, s.unit, "replace", done)
	if err != nil {
		return s.callError(verb, err)
	}
	s.log.Debug("job queued", zap.String("op", verb), zap.Int("job", id))
	if err := s.wait(ctx, conn, verb, id, done); err != nil {
		return err
	}
	state, err := s.settle(ctx, conn)
	if err != nil {
		return fmt.Errorf("kubeletctl: %s %s: job %d done, but the unit is %s: %w", verb, s.unit, id, stateOrUnknown(state), err)
	}
	if !settled(state) {
		return fmt.Errorf("kubeletctl: %s %s: job %d done, but the unit is %s (see journalctl -u %s)", verb, s.unit, id, state, s.unit)
	}
	s.log.Info("kubelet unit "+verb+" done", zap.Int("job", id), zap.String("active_state", state), zap.Duration("took", time.Since(began)))
	return nil
}

// wait waits for the job's result on done.
func (s *Systemd) wait(ctx context.Context, conn *sdbus.Conn, verb string, id int, done <-chan string) error {
	// The JobRemoved signal never comes on a connection that is gone;
	// look at it now and then rather than wait for ctx.
	tick := time.NewTicker(s.poll)
	defer tick.Stop()
	for {
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("kubeletctl: %s %s: job %d finished with result %q, not \"done\" (see journalctl -u %s)", verb, s.unit, id, result, s.unit)
			}
			return nil
		case <-ctx.Done():
			return fmt.Errorf("kubeletctl: %s %s: waiting for job %d (the job goes on in systemd): %w", verb, s.unit, id, ctx.Err())
		case <-tick.C:
			if !conn.Connected() {
				return fmt.Errorf("kubeletctl: %s %s: lost the connection to the bus at %s while waiting for job %d", verb, s.unit, s.address, id)
			}
		}
	}
}

// settle returns the unit's ActiveState once it is not in transition
// (activating, deactivating, reloading, refreshing). A Type=simple unit is
// active as soon as its job is done; other types, and a unit waiting to be
// restarted after a crash, are activating for a while.
func (s *Systemd) settle(ctx context.Context, conn *sdbus.Conn) (string, error) {
	var tick *time.Ticker
	var state string // the last one read
	for {
		p, err := conn.GetUnitPropertyContext(ctx, s.unit, "ActiveState")
		if err != nil {
			if ctx.Err() != nil {
				return state, ctx.Err()
			}
			return state, fmt.Errorf("read ActiveState: %w", err)
		}
		var ok bool
		if state, ok = p.Value.Value().(string); !ok {
			return "", fmt.Errorf("read ActiveState: got %s, want a string", p.Value.Signature())
		}
		switch state {
		case "activating", "deactivating", "reloading", "refreshing":
		default:
			return state, nil
		}
		if tick == nil {
			tick = time.NewTicker(s.poll)
			defer tick.Stop()
		}
		select {
		case <-ctx.Done():
			return state, ctx.Err()
		case <-tick.C:
		}
	}
}

func stateOrUnknown(state string) string {
	if state == "" {
		return "in an unknown state"
	}
	return state
}

// checkLoaded requires the unit's LoadState to be "loaded". systemd loads a
// unit on demand when its object is asked for a property, and answers
// "not-found" for a unit without a unit file.
func (s *Systemd) checkLoaded(ctx context.Context) error {
	conn, err := s.connection(ctx)
	if err != nil {
		return err
	}
	p, err := conn.GetUnitPropertyContext(ctx, s.unit, "LoadState")
	if err != nil {
		return s.callError("check", err)
	}
	switch state, _ := p.Value.Value().(string); state {
	case "loaded":
		return nil
	case "not-found":
		return s.noSuchUnit("check", `systemd: LoadState "not-found"`)
	default:
		return fmt.Errorf("kubeletctl: check %s: LoadState is %q, not \"loaded\" (see systemctl status %s)", s.unit, state, s.unit)
	}
}

// connection returns the bus connection, connecting when there is none or
// the last one was lost.
func (s *Systemd) connection(ctx context.Context) (*sdbus.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("kubeletctl: %s: controller closed", s.unit)
	}
	if s.conn != nil {
		if s.conn.Connected() {
			return s.conn, nil
		}
		s.log.Info("lost the connection to the bus: reconnecting", zap.String("bus", s.address))
		s.conn.Close()
		s.conn = nil
	}
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return dial(ctx, s.address) })
	if err != nil {
		return nil, fmt.Errorf("kubeletctl: connect to systemd on the bus at %s: %w (is D-Bus running on the host? a pod needs the host's /run/dbus/system_bus_socket mounted and root; hosts without systemd need a restart command, --kubelet-restart-command)", s.address, err)
	}
	s.conn = conn
	return conn, nil
}

// dial opens a private, authenticated connection to the bus at address.
// It is not go-systemd's NewSystemConnectionContext: that passes ctx to
// godbus, which closes the connection when ctx ends, so a context meant to
// bound the connecting would also end the connection.
func dial(ctx context.Context, address string) (*dbus.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	conn, err := dbus.Dial(address)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	// EXTERNAL with the numeric uid, as go-systemd does: no user lookup.
	err = conn.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))})
	if err == nil {
		err = conn.Hello()
	}
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// callError explains the errors systemd answers a call with.
func (s *Systemd) callError(verb string, err error) error {
	var name, msg string
	var e dbus.Error
	var pe *dbus.Error
	switch {
	case errors.As(err, &e):
		name, msg = e.Name, e.Error()
	case errors.As(err, &pe) && pe != nil:
		name, msg = pe.Name, pe.Error()
	}
	switch name {
	case "org.freedesktop.systemd1.NoSuchUnit":
		return s.noSuchUnit(verb, "systemd: "+strconv.Quote(msg))
	case "org.freedesktop.systemd1.UnitMasked":
		return fmt.Errorf("kubeletctl: %s %s: the unit is masked (systemctl unmask %s): %w", verb, s.unit, s.unit, err)
	case "org.freedesktop.DBus.Error.AccessDenied", "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired":
		return fmt.Errorf("kubeletctl: %s %s: %w (managing units needs root, or a polkit rule granting org.freedesktop.systemd1.manage-units)", verb, s.unit, err)
	}
	return fmt.Errorf("kubeletctl: %s %s: %w", verb, s.unit, err)
}

func (s *Systemd) noSuchUnit(verb, detail string) error {
	return fmt.Errorf("kubeletctl: %s %s: %w (%s): set --kubelet-unit to the kubelet's systemd unit, see systemctl list-units '*kubelet*'", verb, s.unit, ErrNoSuchUnit, detail)
}

// systemBus is DBUS_SYSTEM_BUS_ADDRESS, else the specification's default.
func systemBus() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return defaultSystemBus
}

// UnitFileState is systemd's UnitFileState of a unit ("enabled",
// "disabled", "masked", ...), read over the bus at address ("": the
// system bus) on a connection of its own.
func UnitFileState(ctx context.Context, address, unit string) (string, error) {
	if address == "" {
		address = systemBus()
	}
	conn, err := sdbus.NewConnection(func() (*dbus.Conn, error) { return dial(ctx, address) })
	if err != nil {
		return "", fmt.Errorf("kubeletctl: connect to systemd on the bus at %s: %w", address, err)
	}
	defer conn.Close()
	p, err := conn.GetUnitPropertyContext(ctx, unit, "UnitFileState")
	if err != nil {
		return "", fmt.Errorf("kubeletctl: %s: UnitFileState: %w", unit, err)
	}
	s, ok := p.Value.Value().(string)
	if !ok {
		return "", fmt.Errorf("kubeletctl: %s: UnitFileState is %v, not a string", unit, p.Value)
	}
	return s, nil
}
