package sdnotify

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
)

// listen makes a unixgram socket standing in for systemd's notify socket and
// points NOTIFY_SOCKET at it. addr is a path, or "" for a path in a
// temporary directory.
func listen(t *testing.T, addr string) *net.UnixConn {
	t.Helper()
	if addr == "" {
		// os.MkdirTemp rather than t.TempDir: a socket path must fit in
		// 108 bytes, and test names make t.TempDir's long.
		dir, err := os.MkdirTemp("", "sdnotify")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		addr = filepath.Join(dir, "notify")
	}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", addr)
	return conn
}

// recv returns the next datagram, failing the test when none comes within
// 5s (a bound for a broken test, not a wait for a timer).
func recv(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// pending returns what is already queued on conn without waiting.
func pending(t *testing.T, conn *net.UnixConn) []string {
	t.Helper()
	var got []string
	buf := make([]byte, 4096)
	for {
		if err := conn.SetReadDeadline(time.Now()); err != nil {
			t.Fatal(err)
		}
		n, err := conn.Read(buf)
		if err != nil {
			return got
		}
		got = append(got, string(buf[:n]))
	}
}

func noWatchdog(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
}

func TestNotify(t *testing.T) {
	tests := []struct {
		name string
		addr string
	}{
		{"path socket", ""},
		// systemd's NOTIFY_SOCKET may also name an abstract socket.
		{"abstract socket", fmt.Sprintf("@hotplugd-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			noWatchdog(t)
			conn := listen(t, tt.addr)
			n := New(zap.NewNop())
			steps := []struct {
				send func() error
				want string
			}{
				{func() error { return n.Ready("cpu=2 memory=8Gi hugepages-2Mi=0") }, "READY=1\nSTATUS=cpu=2 memory=8Gi hugepages-2Mi=0"},
				{func() error { return n.Ready("") }, "READY=1"},
				{func() error { return n.Status("cpu=1\nmemory=8Gi") }, "STATUS=cpu=1 memory=8Gi"},
				{n.Stopping, "STOPPING=1"},
			}
			for _, s := range steps {
				if err := s.send(); err != nil {
					t.Fatal(err)
				}
				if got := recv(t, conn); got != s.want {
					t.Errorf("received %q, want %q", got, s.want)
				}
			}
		})
	}
}

func TestNotifyOutsideSystemd(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n := New(nil)
	for name, f := range map[string]func() error{
		"Ready":    func() error { return n.Ready("x") },
		"Status":   func() error { return n.Status("x") },
		"Stopping": n.Stopping,
	} {
		if err := f(); err != nil {
			t.Errorf("%s: %v, want a no-op", name, err)
		}
	}
	if d := n.WatchdogInterval(); d != 0 {
		t.Errorf("WatchdogInterval() = %v, want 0 without NOTIFY_SOCKET", d)
	}
	returned := make(chan error, 1)
	go func() { returned <- n.RunWatchdog(context.Background(), nil) }()
	select {
	case err := <-returned:
		if err != nil {
			t.Errorf("RunWatchdog: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("RunWatchdog without a watchdog did not return")
	}
}

func TestNotifyError(t *testing.T) {
	noWatchdog(t)
	missing := filepath.Join(t.TempDir(), "gone")
	t.Setenv("NOTIFY_SOCKET", missing)
	err := New(nil).Ready("cpu=2")
	want := "sdnotify: send READY=1 to " + missing + ": "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Ready to a missing socket: %v, want %q...", err, want)
	}
	if !errors.Is(err, syscall.ENOENT) {
		t.Errorf("Ready to a missing socket: %v, want ENOENT", err)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	tests := []struct {
		name     string
		usec     string
		pid      string
		want     time.Duration
		wantWarn bool
	}{
		{"set for this process", "30000000", pid, 30 * time.Second, false},
		{"set without pid", "200000", "", 200 * time.Millisecond, false},
		{"set for another process", "200000", strconv.Itoa(os.Getpid() + 1), 0, false},
		{"not set", "", "", 0, false},
		{"not a number", "30s", pid, 0, true},
		{"not positive", "0", pid, 0, true},
		{"bad pid", "200000", "self", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listen(t, "")
			t.Setenv("WATCHDOG_USEC", tt.usec)
			t.Setenv("WATCHDOG_PID", tt.pid)
			core, logs := observer.New(zapcore.WarnLevel)
			n := New(zap.New(core))
			if got := n.WatchdogInterval(); got != tt.want {
				t.Errorf("WatchdogInterval() = %v, want %v", got, tt.want)
			}
			if warned := logs.Len() > 0; warned != tt.wantWarn {
				t.Errorf("warned = %v (%v), want %v", warned, logs.All(), tt.wantWarn)
			}
		})
	}
}

// TestRunWatchdog runs the real ticker against a notify socket, as systemd
// would see it with WatchdogSec=200ms.
func TestRunWatchdog(t *testing.T) {
	conn := listen(t, "")
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	n := New(zaptest.NewLogger(t))
	if got := n.WatchdogInterval(); got != 200*time.Millisecond {
		t.Fatalf("WatchdogInterval() = %v, want 200ms", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- n.RunWatchdog(ctx, func() bool { return true }) }()
	for range 2 {
		if got := recv(t, conn); got != "WATCHDOG=1" {
			t.Errorf("received %q, want WATCHDOG=1", got)
		}
	}
	cancel()
	if err := <-returned; err != nil {
		t.Errorf("RunWatchdog after cancel: %v, want nil", err)
	}
}

// TestRunWatchdogUnhealthy drives the ticker by hand: no ping goes out while
// healthy() is false, and pings resume when it turns true.
func TestRunWatchdogUnhealthy(t *testing.T) {
	conn := listen(t, "")
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	core, logs := observer.New(zapcore.InfoLevel)
	n := New(zap.New(core))
	ticks := make(chan time.Time) // unbuffered: a send returns once the loop has the tick
	var period time.Duration
	n.newTicker = func(d time.Duration) (<-chan time.Time, func()) {
		period = d
		return ticks, func() {}
	}
	health := []bool{false, false, true}
	calls := 0
	healthy := func() bool { calls++; return health[calls-1] }

	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- n.RunWatchdog(ctx, healthy) }()
	for range health {
		ticks <- time.Time{}
	}
	if got := recv(t, conn); got != "WATCHDOG=1" {
		t.Errorf("received %q, want WATCHDOG=1", got)
	}
	cancel()
	if err := <-returned; err != nil {
		t.Errorf("RunWatchdog after cancel: %v, want nil", err)
	}
	// Every send happened before RunWatchdog returned: anything more is queued.
	if extra := pending(t, conn); len(extra) > 0 {
		t.Errorf("pings while unhealthy: %q", extra)
	}
	if period != 15*time.Second {
		t.Errorf("ping period %v, want half of WatchdogSec=30s", period)
	}
	if calls != 3 {
		t.Errorf("healthy() called %d times, want once per tick (3)", calls)
	}
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	want := []string{
		"unhealthy: withholding watchdog pings; systemd restarts the daemon when this lasts",
		"healthy again: watchdog pings resumed",
	}
	if diff := cmp.Diff(want, msgs); diff != "" {
		t.Errorf("unexpected logs (-want +got):\n%s", diff)
	}
}

// TestRunWatchdogSendError keeps pinging after a failed ping.
func TestRunWatchdogSendError(t *testing.T) {
	listen(t, "")
	t.Setenv("WATCHDOG_USEC", "200000")
	t.Setenv("WATCHDOG_PID", "")
	core, logs := observer.New(zapcore.WarnLevel)
	n := New(zap.New(core))
	ticks := make(chan time.Time)
	n.newTicker = func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }
	var sent []string
	n.send = func(state string) error {
		sent = append(sent, state)
		return errors.New("connection refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan error, 1)
	go func() { returned <- n.RunWatchdog(ctx, nil) }()
	ticks <- time.Time{}
	ticks <- time.Time{}
	ticks <- time.Time{} // the loop takes it only after trying the second ping
	cancel()
	if err := <-returned; err != nil {
		t.Errorf("RunWatchdog: %v, want nil", err)
	}
	if len(sent) != 3 {
		t.Errorf("tried %d pings, want 3", len(sent))
	}
	if logs.FilterMessage("watchdog ping failed").Len() != 3 {
		t.Errorf("failed pings not logged: %v", logs.All())
	}
}
