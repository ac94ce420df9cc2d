package kubeletctl

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
)

// The D-Bus tests run a private dbus-daemon (Debian package dbus) on a
// socket in the test's temporary directory and export a fake systemd on it:
// go-systemd, godbus and the bus daemon are the real ones.

const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// testBus is a dbus-daemon run by a test.
type testBus struct {
	socket  string
	address string
	cmd     *exec.Cmd
	stderr  *bytes.Buffer
}

// startBus starts a dbus-daemon on a socket in a temporary directory,
// skipping the test when there is no dbus-daemon. It is stopped when the
// test ends.
func startBus(t *testing.T) *testBus {
	t.Helper()
	dir := t.TempDir()
	socket := filepath.Join(dir, "bus")
	// A socket path must fit in 108 bytes; t.TempDir's can be longer under
	// a long TMPDIR. And it goes into a D-Bus address as it is, where a
	// character of the test's name such as ',' or '=' would need escaping.
	if len(socket) > 100 || strings.ContainsFunc(socket, needsAddressEscape) {
		d, err := os.MkdirTemp("", "kubeletctl")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		socket = filepath.Join(d, "bus")
	}
	return startBusAt(t, socket)
}

// needsAddressEscape tells whether r must be escaped in a D-Bus address
// value (the D-Bus specification's "optionally-escaped bytes" need not).
func needsAddressEscape(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_/.\\*", r))
}

// startBusAt starts a dbus-daemon listening on socket.
func startBusAt(t *testing.T, socket string) *testBus {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skipf("SKIPPED: no dbus-daemon to run a private bus (%v): install the Debian package dbus to run the D-Bus tests", err)
	}
	config := socket + ".conf"
	if err := os.WriteFile(config, fmt.Appendf(nil, busConfig, socket), 0o600); err != nil {
		t.Fatal(err)
	}
	b := &testBus{socket: socket, stderr: new(bytes.Buffer)}
	b.cmd = exec.Command(bin, "--config-file="+config, "--nofork", "--nopidfile", "--nosyslog", "--print-address=1")
	b.cmd.Stderr = b.stderr
	// Should the test binary die without its cleanups, so does the bus.
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	t.Cleanup(func() { b.stop(t) })
	// The daemon prints its address once it listens.
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		b.address = strings.TrimSpace(s)
	case <-time.After(10 * time.Second):
	}
	if b.address == "" {
		b.stop(t)
		t.Fatalf("dbus-daemon printed no address; stderr: %s", b.stderr)
	}
	return b
}

// stop terminates the daemon (it removes its socket) and waits for it. It
// may be called more than once.
func (b *testBus) stop(t *testing.T) {
	t.Helper()
	if b.cmd.ProcessState != nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	exited := make(chan struct{})
	go func() {
		_ = b.cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-exited
		t.Errorf("dbus-daemon did not exit on SIGTERM; killed it")
	}
}

// fakeSystemd answers the calls go-systemd makes for Systemd: StartUnit,
// StopUnit and RestartUnit on org.freedesktop.systemd1.Manager, and Properties.Get of
// org.freedesktop.systemd1.Unit LoadState and ActiveState on the units'
// objects, and sends JobRemoved when a job ends, as systemd does.
type fakeSystemd struct {
	conn *dbus.Conn

	mu    sync.Mutex
	units map[string]*fakeUnit // by unit name; others are "not-found"
	calls []string             // manager calls: "StopUnit kubelet.service replace"
	jobs  uint32
	// result is what the next jobs end with; "" is "done".
	result string
	// hold leaves jobs queued forever: no JobRemoved, no state change.
	hold bool
	// callErr, when set, is the answer to StartUnit, StopUnit and
	// RestartUnit.
	callErr *dbus.Error
	// activating is how many ActiveState reads after a start or restart
	// answer "activating" before "active"; -1 means forever.
	activating int
	// afterStart, when set, is the ActiveState after a start or restart
	// job is done.
	afterStart string
}

type fakeUnit struct {
	active     string
	activating int // reads of ActiveState left answering "activating"
	// masked makes systemd refuse to start or restart the unit, as it
	// does for a unit linked to /dev/null.
	masked bool
}

// newFakeSystemd connects to the bus at address, takes systemd's name and
// serves units, a map of unit name to ActiveState.
func newFakeSystemd(t *testing.T, address string, units map[string]string) *fakeSystemd {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatalf("fake systemd: connect to %s: %v", address, err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fakeSystemd{conn: conn, units: map[string]*fakeUnit{}}
	for name, active := range units {
		f.units[name] = &fakeUnit{active: active}
	}
	if err := conn.Export(fakeManager{f}, "/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager"); err != nil {
		t.Fatal(err)
	}
	if err := conn.ExportSubtree(fakeUnitObject{f}, "/org/freedesktop/systemd1/unit", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake systemd: request name: %v, %v", reply, err)
	}
	return f
}

func (f *fakeSystemd) set(change func(f *fakeSystemd)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f)
}

func (f *fakeSystemd) activeState(unit string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if u, ok := f.units[unit]; ok {
		return u.active
	}
	return ""
}

func (f *fakeSystemd) managerCalls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeSystemd) job(verb, name, mode string) (dbus.ObjectPath, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, verb+" "+name+" "+mode)
	if f.callErr != nil {
		return "", f.callErr
	}
	u, ok := f.units[name]
	if !ok {
		return "", dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit " + name + " not found."})
	}
	if u.masked && verb != "StopUnit" {
		return "", dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{"Unit " + name + " is masked."})
	}
	f.jobs++
	id := f.jobs
	path := dbus.ObjectPath(fmt.Sprintf("/org/freedesktop/systemd1/job/%d", id))
	if f.hold {
		return path, nil
	}
	result := f.result
	if result == "" {
		result = "done"
	}
	// A restart job ends as a start job does.
	starts := verb == "StartUnit" || verb == "RestartUnit"
	switch {
	case verb == "StopUnit" && result == "done":
		u.active = "inactive"
	case starts && result == "done" && f.afterStart != "":
		u.active = f.afterStart
	case starts && result == "done" && f.activating != 0:
		u.active, u.activating = "activating", f.activating
	case starts && result == "done":
		u.active = "active"
	case starts:
		u.active = "failed"
	}
	// systemd answers the call, runs the job, then signals its end.
	go func() {
		_ = f.conn.Emit("/org/freedesktop/systemd1", "org.freedesktop.systemd1.Manager.JobRemoved", id, path, name, result)
	}()
	return path, nil
}

// fakeManager is the org.freedesktop.systemd1.Manager interface.
type fakeManager struct{ f *fakeSystemd }

func (m fakeManager) StartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return m.f.job("StartUnit", name, mode)
}

func (m fakeManager) StopUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return m.f.job("StopUnit", name, mode)
}

func (m fakeManager) RestartUnit(name, mode string) (dbus.ObjectPath, *dbus.Error) {
	return m.f.job("RestartUnit", name, mode)
}

// fakeUnitObject is org.freedesktop.DBus.Properties on every unit object.
type fakeUnitObject struct{ f *fakeSystemd }

func (o fakeUnitObject) Get(msg dbus.Message, iface, property string) (dbus.Variant, *dbus.Error) {
	if iface != "org.freedesktop.systemd1.Unit" {
		e := dbus.MakeUnknownInterfaceError(iface)
		return dbus.Variant{}, &e
	}
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	f := o.f
	f.mu.Lock()
	defer f.mu.Unlock()
	var u *fakeUnit
	for name, unit := range f.units {
		if path == dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sdbus.PathBusEscape(name)) {
			u = unit
		}
	}
	switch property {
	case "LoadState":
		if u == nil {
			return dbus.MakeVariant("not-found"), nil
		}
		return dbus.MakeVariant("loaded"), nil
	case "ActiveState":
		if u == nil {
			return dbus.MakeVariant("inactive"), nil
		}
		state := u.active
		if state == "activating" && u.activating >= 0 {
			if u.activating == 0 {
				u.active, state = "active", "active"
			}
			u.activating--
		}
		return dbus.MakeVariant(state), nil
	}
	return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{"Unknown property " + property})
}

// newTestSystemd starts a bus and a fake systemd serving kubelet.service
// in ActiveState active, and connects a Systemd to them.
func newTestSystemd(t *testing.T) (*Systemd, *fakeSystemd, *testBus) {
	t.Helper()
	bus := startBus(t)
	fake := newFakeSystemd(t, bus.address, map[string]string{"kubelet.service": "active"})
	s, err := NewSystemd(t.Context(), SystemdOptions{BusAddress: bus.address, Log: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatalf("NewSystemd: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	s.poll = time.Millisecond
	return s, fake, bus
}

func TestSystemdStopStart(t *testing.T) {
	s, fake, _ := newTestSystemd(t)
	if got, want := s.String(), "systemd unit kubelet.service"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if got := fake.activeState("kubelet.service"); got != "inactive" {
		t.Errorf("after Stop the unit is %q, want inactive", got)
	}
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if got := fake.activeState("kubelet.service"); got != "active" {
		t.Errorf("after Start the unit is %q, want active", got)
	}
	want := []string{"StopUnit kubelet.service replace", "StartUnit kubelet.service replace"}
	if diff := cmp.Diff(want, fake.managerCalls()); diff != "" {
		t.Errorf("unexpected calls to systemd (-want +got):\n%s", diff)
	}
}

// TestSystemdSystemBus checks that no address means DBUS_SYSTEM_BUS_ADDRESS,
// and that a unit name without a suffix is a service.
func TestSystemdSystemBus(t *testing.T) {
	bus := startBus(t)
	fake := newFakeSystemd(t, bus.address, map[string]string{"kubelet.service": "active"})
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
	s, err := NewSystemd(t.Context(), SystemdOptions{Unit: "kubelet"})
	if err != nil {
		t.Fatalf("NewSystemd: %v", err)
	}
	defer s.Close()
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if diff := cmp.Diff([]string{"StopUnit kubelet.service replace"}, fake.managerCalls()); diff != "" {
		t.Errorf("unexpected calls to systemd (-want +got):\n%s", diff)
	}
}

// op is the method of s named "stop", "start" or "restart".
func op(s *Systemd, name string) func(context.Context) error {
	switch name {
	case "stop":
		return s.Stop
	case "start":
		return s.Start
	case "restart":
		return s.Restart
	}
	panic("no operation " + name)
}

// TestSystemdUnitName checks that NewSystemd names the unit as systemctl
// does: a name without a unit type's suffix is a service, even one with
// dots in it.
func TestSystemdUnitName(t *testing.T) {
	bus := startBus(t)
	newFakeSystemd(t, bus.address, map[string]string{
		"kubelet.service":                       "active",
		"snap.kubelite.daemon-kubelite.service": "active",
		"kubelet.socket":                        "active",
	})
	tests := []struct{ name, in, want string }{
		{"default", "", "kubelet.service"},
		{"no suffix", "kubelet", "kubelet.service"},
		{"service", "kubelet.service", "kubelet.service"},
		{"dots but no suffix", "snap.kubelite.daemon-kubelite", "snap.kubelite.daemon-kubelite.service"},
		{"another type", "kubelet.socket", "kubelet.socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSystemd(t.Context(), SystemdOptions{Unit: tt.in, BusAddress: bus.address})
			if err != nil {
				t.Fatalf("NewSystemd: %v", err)
			}
			defer s.Close()
			if got := s.Unit(); got != tt.want {
				t.Errorf("Unit() = %q, want %q", got, tt.want)
			}
			if got, want := s.String(), "systemd unit "+tt.want; got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
		})
	}
}

// TestSystemdRestart checks what Restart makes of systemd's answer, its
// job's result and the unit's state once the job is done.
func TestSystemdRestart(t *testing.T) {
	tests := []struct {
		name       string
		change     func(f *fakeSystemd) // the fake's behaviour; nil for the normal course
		wantErr    []string             // what the error contains; nil means success
		wantActive string               // the unit's ActiveState afterwards
	}{
		{
			name:       "job done, unit active",
			wantActive: "active",
		},
		{
			name:       "activating a while",
			change:     func(f *fakeSystemd) { f.activating = 3 },
			wantActive: "active",
		},
		{
			name:       "job failed",
			change:     func(f *fakeSystemd) { f.result = "failed" },
			wantErr:    []string{`kubeletctl: restart kubelet.service: job 1 finished with result "failed", not "done" (see journalctl -u kubelet.service)`},
			wantActive: "failed",
		},
		{
			name:       "job done, unit failed",
			change:     func(f *fakeSystemd) { f.afterStart = "failed" },
			wantErr:    []string{"kubeletctl: restart kubelet.service: job 1 done, but the unit is failed (see journalctl -u kubelet.service)"},
			wantActive: "failed",
		},
		{
			name:       "masked",
			change:     func(f *fakeSystemd) { f.units["kubelet.service"].masked = true },
			wantErr:    []string{"kubeletctl: restart kubelet.service: the unit is masked (systemctl unmask kubelet.service)", "Unit kubelet.service is masked."},
			wantActive: "active",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fake, _ := newTestSystemd(t)
			if tt.change != nil {
				fake.set(tt.change)
			}
			err := s.Restart(t.Context())
			switch {
			case tt.wantErr == nil && err != nil:
				t.Errorf("Restart: %v", err)
			case tt.wantErr != nil && err == nil:
				t.Errorf("Restart succeeded, want an error")
			}
			for _, want := range tt.wantErr {
				if err != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if diff := cmp.Diff([]string{"RestartUnit kubelet.service replace"}, fake.managerCalls()); diff != "" {
				t.Errorf("unexpected calls to systemd (-want +got):\n%s", diff)
			}
			if got := fake.activeState("kubelet.service"); got != tt.wantActive {
				t.Errorf("after Restart the unit is %q, want %q", got, tt.wantActive)
			}
		})
	}
}

func TestSystemdJobResult(t *testing.T) {
	tests := []struct {
		op     string
		result string
	}{
		{"stop", "failed"},
		{"stop", "canceled"},
		{"stop", "timeout"},
		{"start", "failed"},
		{"start", "dependency"},
		{"start", "skipped"},
		{"restart", "failed"},
		{"restart", "canceled"},
		{"restart", "timeout"},
		{"restart", "dependency"},
	}
	for _, tt := range tests {
		t.Run(tt.op+" "+tt.result, func(t *testing.T) {
			s, fake, _ := newTestSystemd(t)
			fake.set(func(f *fakeSystemd) { f.result = tt.result })
			err := op(s, tt.op)(t.Context())
			if err == nil {
				t.Fatalf("%s succeeded with job result %q", tt.op, tt.result)
			}
			want := fmt.Sprintf("kubeletctl: %s kubelet.service: job 1 finished with result %q", tt.op, tt.result)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		})
	}
}

// TestSystemdActiveState checks what Start makes of the unit's state once
// its job is done.
func TestSystemdActiveState(t *testing.T) {
	tests := []struct {
		name       string
		activating int    // reads answering activating; -1 forever
		afterStart string // state after the job, "" for the normal course
		timeout    bool   // Start gets a ctx that ends
		wantErr    string // "" means success
	}{
		{name: "active at once"},
		{name: "activating a while", activating: 3},
		{name: "activating forever", activating: -1, timeout: true, wantErr: "job 1 done, but the unit is activating: context deadline exceeded"},
		{name: "failed at once", afterStart: "failed", wantErr: "kubeletctl: start kubelet.service: job 1 done, but the unit is failed (see journalctl -u kubelet.service)"},
		{name: "inactive", afterStart: "inactive", wantErr: "job 1 done, but the unit is inactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fake, _ := newTestSystemd(t)
			fake.set(func(f *fakeSystemd) { f.activating, f.afterStart = tt.activating, tt.afterStart })
			ctx := t.Context()
			if tt.timeout {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			err := s.Start(ctx)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Start: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Start error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestSystemdUnknownUnit(t *testing.T) {
	const hint = "set --kubelet-unit to the kubelet's systemd unit"

	t.Run("NewSystemd", func(t *testing.T) {
		bus := startBus(t)
		newFakeSystemd(t, bus.address, map[string]string{"kubelet.service": "active"})
		s, err := NewSystemd(t.Context(), SystemdOptions{Unit: "kubelet-typo.service", BusAddress: bus.address})
		if err == nil {
			s.Close()
			t.Fatal("NewSystemd succeeded for an unknown unit")
		}
		if !errors.Is(err, ErrNoSuchUnit) {
			t.Errorf("error %q does not match ErrNoSuchUnit", err)
		}
		for _, want := range []string{"kubelet-typo.service", hint} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
		}
	})

	// The unit file is removed, and systemd reloaded, after NewSystemd.
	for _, name := range []string{"stop", "start", "restart"} {
		t.Run(name+" after the unit is gone", func(t *testing.T) {
			s, fake, _ := newTestSystemd(t)
			fake.set(func(f *fakeSystemd) { delete(f.units, "kubelet.service") })
			err := op(s, name)(t.Context())
			if !errors.Is(err, ErrNoSuchUnit) {
				t.Fatalf("%s = %v, want an error matching ErrNoSuchUnit", name, err)
			}
			for _, want := range []string{"kubeletctl: " + name + " kubelet.service: no such unit", "Unit kubelet.service not found.", hint} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestSystemdCallErrors checks the explanations added to systemd's errors.
func TestSystemdCallErrors(t *testing.T) {
	tests := []struct {
		name       string
		err        *dbus.Error
		want       string
		noSuchUnit bool
	}{
		{
			name:       "no such unit",
			err:        dbus.NewError("org.freedesktop.systemd1.NoSuchUnit", []any{"Unit kubelet.service not loaded."}),
			want:       "kubeletctl: stop kubelet.service: no such unit",
			noSuchUnit: true,
		},
		{
			name: "masked",
			err:  dbus.NewError("org.freedesktop.systemd1.UnitMasked", []any{"Unit kubelet.service is masked."}),
			want: "the unit is masked (systemctl unmask kubelet.service)",
		},
		{
			name: "access denied",
			err:  dbus.NewError("org.freedesktop.DBus.Error.AccessDenied", []any{"Access denied"}),
			want: "managing units needs root",
		},
		{
			name: "interactive authorization",
			err:  dbus.NewError("org.freedesktop.DBus.Error.InteractiveAuthorizationRequired", []any{"Interactive authentication required."}),
			want: "managing units needs root",
		},
		{
			name: "other",
			err:  dbus.NewError("org.freedesktop.systemd1.TransactionIsDestructive", []any{"Transaction is destructive."}),
			want: "kubeletctl: stop kubelet.service: Transaction is destructive.",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, fake, _ := newTestSystemd(t)
			fake.set(func(f *fakeSystemd) { f.callErr = tt.err })
			err := s.Stop(t.Context())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Stop error = %v, want one containing %q", err, tt.want)
			}
			if got := errors.Is(err, ErrNoSuchUnit); got != tt.noSuchUnit {
				t.Errorf("errors.Is(%q, ErrNoSuchUnit) = %v, want %v", err, got, tt.noSuchUnit)
			}
		})
	}
}

// TestSystemdCancelPendingJob cancels a Stop and a Restart waiting for a
// job that never ends: they return, saying the job goes on in systemd, and
// cancel nothing there.
func TestSystemdCancelPendingJob(t *testing.T) {
	for _, name := range []string{"stop", "restart"} {
		t.Run(name, func(t *testing.T) {
			bus := startBus(t)
			fake := newFakeSystemd(t, bus.address, map[string]string{"kubelet.service": "active"})
			fake.set(func(f *fakeSystemd) { f.hold = true })
			// The call logs "job queued" once systemd answered it: from
			// then on it waits for the job.
			queued := make(chan struct{})
			var once sync.Once
			log := zaptest.NewLogger(t, zaptest.WrapOptions(zap.Hooks(func(e zapcore.Entry) error {
				if e.Message == "job queued" {
					once.Do(func() { close(queued) })
				}
				return nil
			})))
			s, err := NewSystemd(t.Context(), SystemdOptions{BusAddress: bus.address, Log: log})
			if err != nil {
				t.Fatalf("NewSystemd: %v", err)
			}
			defer s.Close()

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			returned := make(chan error, 1)
			go func() { returned <- op(s, name)(ctx) }()
			select {
			case <-queued:
			case err := <-returned:
				t.Fatalf("%s returned before its job was queued: %v", name, err)
			case <-time.After(10 * time.Second):
				t.Fatal("no job queued")
			}
			cancel()
			select {
			case err := <-returned:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("%s = %v, want an error matching context.Canceled", name, err)
				}
				if want := "kubeletctl: " + name + " kubelet.service: waiting for job 1 (the job goes on in systemd)"; !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not return after ctx was canceled", name)
			}
			if got := fake.activeState("kubelet.service"); got != "active" {
				t.Errorf("the unit is %q, want it untouched (active)", got)
			}
			if calls := fake.managerCalls(); len(calls) != 1 {
				t.Errorf("calls to systemd %q, want one job and no cancellation", calls)
			}
		})
	}
}

// TestSystemdContextOfNew checks that the end of NewSystemd's ctx does not
// end the connection, as go-systemd's NewSystemConnectionContext would: it
// hands ctx to godbus, which closes the connection when ctx ends.
func TestSystemdContextOfNew(t *testing.T) {
	bus := startBus(t)
	fake := newFakeSystemd(t, bus.address, map[string]string{"kubelet.service": "active"})

	ctx, cancel := context.WithCancel(t.Context())
	conn, err := dial(ctx, bus.address)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	cancel()
	// godbus derives a connection's context from the one it is given,
	// so a tie to ctx would show at once.
	if err := conn.Context().Err(); err != nil || !conn.Connected() {
		t.Errorf("connection ended with the ctx of dial: %v", err)
	}
	if _, err := dial(ctx, bus.address); !errors.Is(err, context.Canceled) {
		t.Errorf("dial with an ended ctx = %v, want context.Canceled", err)
	}

	ctx, cancel = context.WithCancel(t.Context())
	s, err := NewSystemd(ctx, SystemdOptions{BusAddress: bus.address})
	if err != nil {
		t.Fatalf("NewSystemd: %v", err)
	}
	defer s.Close()
	first := s.conn
	cancel()
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop after NewSystemd's ctx ended: %v", err)
	}
	if s.conn != first {
		t.Error("Stop had to reconnect")
	}
	if diff := cmp.Diff([]string{"StopUnit kubelet.service replace"}, fake.managerCalls()); diff != "" {
		t.Errorf("unexpected calls to systemd (-want +got):\n%s", diff)
	}
}

// TestSystemdReconnect restarts the bus daemon between two calls.
func TestSystemdReconnect(t *testing.T) {
	s, _, bus := newTestSystemd(t)
	if err := s.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	bus.stop(t)
	// Wait for the connection to notice, as it would long before the
	// next restart of the kubelet; the 10s are a bound for a broken test.
	for deadline := time.Now().Add(10 * time.Second); s.conn.Connected(); {
		if time.Now().After(deadline) {
			t.Fatal("the connection did not notice the end of the bus")
		}
		time.Sleep(time.Millisecond)
	}
	bus2 := startBusAt(t, bus.socket)
	fake2 := newFakeSystemd(t, bus2.address, map[string]string{"kubelet.service": "inactive"})
	if err := s.Start(t.Context()); err != nil {
		t.Fatalf("Start on the restarted bus: %v", err)
	}
	if diff := cmp.Diff([]string{"StartUnit kubelet.service replace"}, fake2.managerCalls()); diff != "" {
		t.Errorf("unexpected calls to the new systemd (-want +got):\n%s", diff)
	}
}

func TestSystemdConnectError(t *testing.T) {
	address := "unix:path=" + filepath.Join(t.TempDir(), "no-bus")
	s, err := NewSystemd(t.Context(), SystemdOptions{BusAddress: address})
	if err == nil {
		s.Close()
		t.Fatal("NewSystemd succeeded without a bus")
	}
	for _, want := range []string{"kubeletctl: connect to systemd on the bus at " + address, "no such file or directory", "/run/dbus/system_bus_socket"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestSystemdClosed(t *testing.T) {
	s, fake, _ := newTestSystemd(t)
	conn := s.conn
	// The caller closes whichever controller it got, as an io.Closer.
	var c io.Closer = s
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if conn.Connected() {
		t.Error("the D-Bus connection is still open after Close")
	}
	if err := c.Close(); err != nil { // twice is fine
		t.Errorf("second Close() = %v", err)
	}
	if err := s.Stop(t.Context()); err == nil || !strings.Contains(err.Error(), "controller closed") {
		t.Errorf("Stop after Close = %v, want a closed error", err)
	}
	if calls := fake.managerCalls(); len(calls) != 0 {
		t.Errorf("systemd called after Close: %q", calls)
	}
}
