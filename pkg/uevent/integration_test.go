//go:build linux

package uevent

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hotplugd/hotplugd/internal/machinetest"
	"golang.org/x/sys/unix"
)

// The integration tests read the real kernel's uevents. They change the
// machine only through machinetest (cpu1 offline, restored), and make
// bursts of synthetic memory uevents by writing "online" to
// /sys/devices/system/memory/memoryN/uevent, which only sends an event.

// listen opens a Listener for t, skipping t when the kernel refuses.
func listen(t *testing.T, cfg Config) *Listener {
	t.Helper()
	l, err := Listen(cfg)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EPROTONOSUPPORT) {
		t.Skipf("uevent: cannot listen to uevents here: %v", err)
	}
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// requireCPU1Online skips t unless cpu1 exists, is online and can be
// offlined.
func requireCPU1Online(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/sys/devices/system/cpu/cpu1/online")
	if err != nil {
		t.Skipf("uevent: cpu1 cannot be hot-plugged here: %v", err)
	}
	if strings.TrimSpace(string(b)) != "1" {
		t.Skip("uevent: cpu1 is offline")
	}
}

// memoryUeventFiles returns every memory block's uevent file.
func memoryUeventFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("/sys/devices/system/memory/memory*/uevent")
	if err != nil || len(files) == 0 {
		t.Skipf("uevent: no memory blocks in /sys/devices/system/memory (%v)", err)
	}
	return files
}

// writeSynthetic writes action to a uevent file: the kernel sends a uevent
// with SYNTH_UUID=0 and changes nothing.
func writeSynthetic(t *testing.T, file, action string) {
	t.Helper()
	if err := os.WriteFile(file, []byte(action), 0); err != nil {
		if errors.Is(err, os.ErrPermission) || errors.Is(err, unix.EROFS) {
			t.Skipf("uevent: %s is not writable here: %v", file, err)
		}
		t.Fatalf("uevent: write %q to %s: %v", action, file, err)
	}
}

// collector is a Handler that passes what it gets to channels. While
// hold is open, the first event blocks until it is closed.
type collector struct {
	events    chan Event
	overflows chan error
	lost      int // events the channel had no room for

	once    sync.Once
	blocked chan struct{} // closed when the first event arrives
	hold    chan struct{} // nil: never block
}

func newCollector(n int) *collector {
	return &collector{
		events:    make(chan Event, n),
		overflows: make(chan error, 100),
		blocked:   make(chan struct{}),
	}
}

func (c *collector) Event(e Event) {
	c.once.Do(func() {
		close(c.blocked)
		if c.hold != nil {
			<-c.hold
		}
	})
	select {
	case c.events <- e:
	default:
		c.lost++
	}
}

func (c *collector) Overflow(err error) { c.overflows <- err }

// until returns the events received up to and including the first for
// which match is true.
func (c *collector) until(t *testing.T, match func(Event) bool) []Event {
	t.Helper()
	var got []Event
	timeout := time.After(5 * time.Second)
	for {
		select {
		case e := <-c.events:
			got = append(got, e)
			if match(e) {
				return got
			}
		case <-timeout:
			t.Fatalf("uevent: no matching event within 5s; got %d others", len(got))
		}
	}
}

func isCPU1(action Action) func(Event) bool {
	return func(e Event) bool { return e.Action == action && e.DevPath == "/devices/system/cpu/cpu1" }
}

// summary is what the tests compare of an Event.
type summary struct {
	Action    Action
	DevPath   string
	Subsystem string
	Synthetic bool
}

func summarize(events []Event) []summary {
	var s []summary
	for _, e := range events {
		s = append(s, summary{e.Action, e.DevPath, e.Subsystem, e.Synthetic})
	}
	return s
}

// TestIntegrationListen needs no privilege: anyone may read uevents, and
// without CAP_NET_ADMIN Listen falls back to SO_RCVBUF, capped by
// net.core.rmem_max.
func TestIntegrationListen(t *testing.T) {
	const asked = 64 << 20 // more than rmem_max on common systems (4 MiB here)
	l := listen(t, Config{ReceiveBuffer: asked})
	got := l.ReceiveBuffer()
	if os.Geteuid() == 0 {
		if got != 2*asked {
			t.Errorf("as root, asked for %d bytes, got a %d-byte receive buffer, want twice that", asked, got)
		}
		return
	}
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Skipf("uevent: %v", err)
	}
	rmemMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * min(asked, rmemMax); got != want {
		t.Errorf("unprivileged, asked for %d bytes, got a %d-byte receive buffer, want 2 x min(asked, rmem_max) = %d", asked, got, want)
	}
}

func TestIntegrationCPUOfflineOnline(t *testing.T) {
	m := machinetest.Acquire(t)
	requireCPU1Online(t)
	l := listen(t, Config{})
	h := newCollector(1000)
	stop := run(t, l, h)

	t.Run("offline", func(t *testing.T) {
		m.SetCPUOnline(t, 1, false)
	}) // machinetest puts cpu1 back online as the subtest ends.
	got := h.until(t, isCPU1(ActionOnline))
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	close(h.events)
	for e := range h.events {
		got = append(got, e)
	}

	want := []summary{
		{ActionOffline, "/devices/system/cpu/cpu1", "cpu", false},
		{ActionOnline, "/devices/system/cpu/cpu1", "cpu", false},
	}
	if diff := cmp.Diff(want, summarize(got)); diff != "" {
		t.Errorf("unexpected relevant events (-want +got):\n%s", diff)
	}
	for _, e := range got {
		if e.Seqnum == 0 || !strings.HasPrefix(e.Env["MODALIAS"], "cpu:") {
			t.Errorf("event lacks SEQNUM or MODALIAS: %+v", e)
		}
	}
	st := l.Stats()
	if st.Irrelevant < 2 {
		t.Errorf("%d irrelevant uevents dropped, want at least cpuid's remove and add; stats %+v", st.Irrelevant, st)
	}
	if st.Overflows != 0 {
		t.Errorf("overflow: stats %+v", st)
	}
	t.Logf("stats %+v; receive buffer %d bytes", st, l.ReceiveBuffer())
}

func TestIntegrationBurst(t *testing.T) {
	const rounds = 50
	machinetest.Acquire(t)
	files := memoryUeventFiles(t)
	l := listen(t, Config{ReceiveBuffer: 16 << 20})
	if l.ReceiveBuffer() < 16<<20 {
		t.Skipf("uevent: the kernel granted a %d-byte receive buffer, not 16 MiB (no CAP_NET_ADMIN?)", l.ReceiveBuffer())
	}
	written := rounds * len(files)
	h := &burstCounter{want: written, done: make(chan struct{})}
	stop := run(t, l, h)

	start := time.Now()
	for range rounds {
		for _, f := range files {
			writeSynthetic(t, f, "online")
		}
	}
	wrote := time.Since(start)
	select {
	case <-h.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("received %d of %d synthetic memory uevents within 10s; stats %+v", h.received(), written, l.Stats())
	}
	received := time.Since(start)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := l.Stats()
	t.Logf("burst: wrote %d synthetic memory uevents (%d blocks x %d) in %v; received all %d in %v; receive buffer %d bytes; stats %+v",
		written, len(files), rounds, wrote.Round(time.Millisecond), h.received(), received.Round(time.Millisecond), l.ReceiveBuffer(), st)
	if h.overflows.Load() != 0 || st.Overflows != 0 || st.Dropped != 0 {
		t.Errorf("uevents were lost with a 16 MiB buffer: %d Overflow calls; stats %+v", h.overflows.Load(), st)
	}
}

// burstCounter counts synthetic memory online events until it has want.
type burstCounter struct {
	want      int
	n         atomic.Int64
	overflows atomic.Int64
	done      chan struct{}
}

func (b *burstCounter) Event(e Event) {
	if e.Synthetic && e.Subsystem == "memory" && e.Action == ActionOnline {
		if b.n.Add(1) == int64(b.want) {
			close(b.done)
		}
	}
}

func (b *burstCounter) Overflow(error) { b.overflows.Add(1) }

func (b *burstCounter) received() int64 { return b.n.Load() }

func TestIntegrationOverflow(t *testing.T) {
	const burst = 4000
	m := machinetest.Acquire(t)
	requireCPU1Online(t)
	files := memoryUeventFiles(t)
	l := listen(t, Config{ReceiveBuffer: 64 << 10})
	if got := l.ReceiveBuffer(); got > 256<<10 {
		t.Fatalf("asked for a 64 KiB receive buffer, the kernel granted %d bytes", got)
	}
	h := newCollector(2 * burst)
	h.hold = make(chan struct{})
	stop := run(t, l, h)

	// The handler blocks on the first event while the burst fills the
	// queue.
	writeSynthetic(t, files[0], "online")
	select {
	case <-h.blocked:
	case <-time.After(5 * time.Second):
		close(h.hold)
		t.Fatal("no uevent within 5s")
	}
	written := 0
	for written < burst {
		for _, f := range files {
			writeSynthetic(t, f, "online")
			written++
		}
	}
	close(h.hold)

	var overflow error
	select {
	case overflow = <-h.overflows:
	case <-time.After(5 * time.Second):
		t.Fatalf("no Overflow within 5s of a %d-event burst into a %d-byte buffer; stats %+v", written, l.ReceiveBuffer(), l.Stats())
	}
	var o *OverflowError
	if !errors.As(overflow, &o) || (!errors.Is(overflow, unix.ENOBUFS) && o.To <= o.From+1) {
		t.Errorf("Overflow(%v): want an *OverflowError for ENOBUFS or a gap", overflow)
	}

	// Run goes on: a later cpu1 offline event arrives.
	t.Run("cpu1 offline after overflow", func(t *testing.T) {
		m.SetCPUOnline(t, 1, false)
		h.until(t, isCPU1(ActionOffline))
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	st := l.Stats()
	t.Logf("overflow: wrote %d synthetic uevents with the handler blocked; %v; receive buffer %d bytes; stats %+v",
		written+1, overflow, l.ReceiveBuffer(), st)
	if st.Dropped == 0 {
		t.Errorf("the kernel's drop counter is 0 after Overflow: stats %+v", st)
	}
}
