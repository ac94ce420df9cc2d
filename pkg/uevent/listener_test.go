package uevent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// A step is what the fake socket does on one read.
type step struct {
	data  []byte  // the datagram
	pid   uint32  // its sender
	err   error   // returned instead of a datagram
	idle  bool    // the queue is empty here: a read that does not wait gets EAGAIN
	drops *uint32 // the kernel's drop counter from this step on
}

func drops(n uint32) *uint32 { return &n }

// fakeConn plays its steps, then blocks until the read deadline is set in
// the past or it is closed, like the netlink socket.
type fakeConn struct {
	mu       sync.Mutex
	steps    []step
	more     func() step // after steps, if set: an endless stream
	dropped  uint32
	dropsErr error
	expired  chan struct{} // closed by a read deadline in the past
	closedC  chan struct{}
	closed   bool
	blocked  chan struct{} // closed when a read blocks with no steps left
}

func newFakeConn(steps ...step) *fakeConn {
	return &fakeConn{
		steps:   steps,
		expired: make(chan struct{}),
		closedC: make(chan struct{}),
		blocked: make(chan struct{}),
	}
}

func (c *fakeConn) recv(b []byte, wait bool) (int, uint32, error) {
	c.mu.Lock()
	for {
		select {
		case <-c.expired:
			c.mu.Unlock()
			return 0, 0, os.ErrDeadlineExceeded
		default:
		}
		if c.closed {
			c.mu.Unlock()
			return 0, 0, os.ErrClosed
		}
		var s step
		switch {
		case len(c.steps) > 0:
			s, c.steps = c.steps[0], c.steps[1:]
		case c.more != nil:
			s = c.more()
		default:
			expired := c.expired
			select {
			case <-c.blocked:
			default:
				close(c.blocked)
			}
			c.mu.Unlock()
			if !wait {
				return 0, 0, unix.EAGAIN
			}
			select {
			case <-expired:
				return 0, 0, os.ErrDeadlineExceeded
			case <-c.closedC:
				return 0, 0, os.ErrClosed
			}
		}
		if s.drops != nil {
			c.dropped = *s.drops
		}
		if s.idle {
			if !wait {
				c.mu.Unlock()
				return 0, 0, unix.EAGAIN
			}
			continue
		}
		c.mu.Unlock()
		if s.err != nil {
			return 0, 0, s.err
		}
		copy(b, s.data)
		return len(s.data), s.pid, nil
	}
}

func (c *fakeConn) drops() (uint32, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped, c.dropsErr
}

func (c *fakeConn) setReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	past := !t.IsZero() && t.Before(time.Now())
	select {
	case <-c.expired:
		if !past {
			c.expired = make(chan struct{})
		}
	default:
		if past {
			close(c.expired)
		}
	}
	return nil
}

func (c *fakeConn) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.closed = true
		close(c.closedC)
	}
	return nil
}

// recorder is a Handler that records its calls as strings.
type recorder struct {
	t     *testing.T
	calls chan string
}

func newRecorder(t *testing.T) *recorder { return &recorder{t: t, calls: make(chan string, 1000)} }

func (r *recorder) Event(e Event) {
	r.calls <- fmt.Sprintf("event %s %s %d", e.Action, e.DevPath, e.Seqnum)
}

func (r *recorder) Overflow(err error) {
	var o *OverflowError
	if !errors.As(err, &o) {
		r.t.Errorf("Overflow(%v): not an *OverflowError", err)
	}
	r.calls <- "overflow " + err.Error()
}

// wait returns the next n calls.
func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	timeout := time.After(5 * time.Second)
	for len(got) < n {
		select {
		case c := <-r.calls:
			got = append(got, c)
		case <-timeout:
			t.Fatalf("got %d calls, want %d: %q", len(got), n, got)
		}
	}
	return got
}

// rest returns the calls not yet waited for.
func (r *recorder) rest() []string {
	var got []string
	for {
		select {
		case c := <-r.calls:
			got = append(got, c)
		default:
			return got
		}
	}
}

// run starts l.Run and returns a function that cancels it and returns its
// error.
func run(t *testing.T, l *Listener, h Handler) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errC := make(chan error, 1)
	go func() { errC <- l.Run(ctx, h) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errC:
			case <-time.After(5 * time.Second):
				err = errors.New("Run did not return within 5s of cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// uevent makes a kernel datagram.
func uevent(action Action, devpath, subsystem string, seq uint64, extra ...string) []byte {
	fields := []string{"ACTION=" + string(action), "DEVPATH=" + devpath, "SUBSYSTEM=" + subsystem}
	fields = append(fields, extra...)
	if seq != 0 {
		fields = append(fields, "SEQNUM="+strconv.FormatUint(seq, 10))
	}
	return datagram(string(action)+"@"+devpath, fields...)
}

func mem(seq uint64) step {
	return step{data: uevent(ActionOnline, "/devices/system/memory/memory"+strconv.FormatUint(seq%192, 10), "memory", seq, "SYNTH_UUID=0")}
}

func memEvent(seq uint64) string {
	return fmt.Sprintf("event online /devices/system/memory/memory%d %d", seq%192, seq)
}

func cpuid(seq uint64) step {
	return step{data: uevent(ActionRemove, "/devices/virtual/cpuid/cpu1", "cpuid", seq)}
}

func TestRunDeliversRelevantEvents(t *testing.T) {
	c := newFakeConn(
		cpuid(1),
		step{data: uevent(ActionOffline, "/devices/system/cpu/cpu1", "cpu", 2, "MODALIAS=cpu:type:x86")},
		step{data: uevent(ActionChange, "/devices/virtual/thermal/thermal_zone0", "thermal", 3)},
		mem(4),
		step{data: []byte("garbage without an at sign\x00")},
		step{data: uevent(ActionOnline, "/devices/system/cpu/cpu1", "cpu", 5), pid: 1234},
		step{data: append(uevent(ActionAdd, "/devices/system/cpu/cpu1", "cpu", 5), make([]byte, maxDatagram)...)},
		step{data: uevent(ActionAdd, "/devices/system/node/node1", "node", 5)},
		step{data: uevent(ActionBind, "/devices/system/cpu/cpu3", "cpu", 6)},
	)
	l := newListener(c, 1<<20, zap.NewNop())
	h := newRecorder(t)
	stop := run(t, l, h)

	got := h.wait(t, 4)
	<-c.blocked
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{
		"event offline /devices/system/cpu/cpu1 2",
		memEvent(4),
		"event add /devices/system/node/node1 5",
		"event bind /devices/system/cpu/cpu3 6",
	}
	if diff := cmp.Diff(want, append(got, h.rest()...)); diff != "" {
		t.Errorf("unexpected handler calls (-want +got):\n%s", diff)
	}
	wantStats := Stats{Datagrams: 9, Delivered: 4, Irrelevant: 2, Malformed: 2, Foreign: 1}
	if diff := cmp.Diff(wantStats, l.Stats()); diff != "" {
		t.Errorf("unexpected stats (-want +got):\n%s", diff)
	}
}

func TestRunReportsLoss(t *testing.T) {
	enobufs := "overflow uevent: receive queue overflowed"
	tests := []struct {
		name      string
		steps     []step
		dropsErr  error
		want      []string
		wantStats Stats
	}{
		{
			name: "ENOBUFS is reported once the queue is drained, and Run goes on",
			steps: []step{
				mem(10), {err: unix.ENOBUFS, drops: drops(803)}, mem(11), mem(12), {idle: true},
				mem(816), {data: uevent(ActionOffline, "/devices/system/cpu/cpu1", "cpu", 817)},
			},
			want: []string{
				memEvent(10), memEvent(11), memEvent(12),
				enobufs + " (803 dropped): no buffer space available",
				memEvent(816), "event offline /devices/system/cpu/cpu1 817",
			},
			wantStats: Stats{Datagrams: 5, Delivered: 5, Overflows: 1, Dropped: 803},
		},
		{
			name:      "ENOBUFS with nothing queued",
			steps:     []step{{err: unix.ENOBUFS, drops: drops(7)}},
			want:      []string{enobufs + " (7 dropped): no buffer space available"},
			wantStats: Stats{Overflows: 1, Dropped: 7},
		},
		{
			name:      "a second ENOBUFS before the queue is drained is the same loss",
			steps:     []step{mem(10), {err: unix.ENOBUFS, drops: drops(3)}, {err: unix.ENOBUFS, drops: drops(9)}, mem(11), {idle: true}, mem(21)},
			want:      []string{memEvent(10), memEvent(11), enobufs + " (9 dropped): no buffer space available", memEvent(21)},
			wantStats: Stats{Datagrams: 3, Delivered: 3, Overflows: 1, Dropped: 9},
		},
		{
			name:      "gaps before the queue is drained are covered by the ENOBUFS report",
			steps:     []step{mem(10), {err: unix.ENOBUFS, drops: drops(5)}, mem(11), mem(20), {idle: true}, mem(30)},
			want:      []string{memEvent(10), memEvent(11), memEvent(20), enobufs + " (5 dropped): no buffer space available", memEvent(30)},
			wantStats: Stats{Datagrams: 4, Delivered: 4, Overflows: 1, Dropped: 5, Unseen: 8 + 9 - 5},
		},
		{
			name:      "gap with drops",
			steps:     []step{mem(10), {data: mem(15).data, drops: drops(4)}},
			want:      []string{memEvent(10), "overflow uevent: SEQNUM jumped from 10 to 15 (4 dropped)", memEvent(15)},
			wantStats: Stats{Datagrams: 2, Delivered: 2, Overflows: 1, Dropped: 4},
		},
		{
			name:      "gap without drops: uevents of other network namespaces",
			steps:     []step{mem(10), mem(15)},
			want:      []string{memEvent(10), memEvent(15)},
			wantStats: Stats{Datagrams: 2, Delivered: 2, Unseen: 4},
		},
		{
			name:      "gap when the drop counter cannot be read",
			steps:     []step{mem(10), mem(15)},
			dropsErr:  unix.ENOPROTOOPT,
			want:      []string{memEvent(10), "overflow uevent: SEQNUM jumped from 10 to 15", memEvent(15)},
			wantStats: Stats{Datagrams: 2, Delivered: 2, Overflows: 1, Unseen: 4},
		},
		{
			name:      "gap across irrelevant datagrams",
			steps:     []step{cpuid(10), cpuid(11), {data: mem(14).data, drops: drops(2)}},
			want:      []string{"overflow uevent: SEQNUM jumped from 11 to 14 (2 dropped)", memEvent(14)},
			wantStats: Stats{Datagrams: 3, Delivered: 1, Irrelevant: 2, Overflows: 1, Dropped: 2},
		},
		{
			name:      "SEQNUM going back is not a loss",
			steps:     []step{mem(10), mem(12), mem(11)},
			want:      []string{memEvent(10), memEvent(12), memEvent(11)},
			wantStats: Stats{Datagrams: 3, Delivered: 3, Unseen: 1},
		},
		{
			name:      "the first datagram has no predecessor",
			steps:     []step{mem(500)},
			want:      []string{memEvent(500)},
			wantStats: Stats{Datagrams: 1, Delivered: 1},
		},
		{
			name: "datagrams without SEQNUM are not compared",
			steps: []step{
				mem(10),
				{data: uevent(ActionAdd, "/devices/system/node/node1", "node", 0), drops: drops(1)},
				mem(11),
			},
			want:      []string{memEvent(10), "event add /devices/system/node/node1 0", memEvent(11)},
			wantStats: Stats{Datagrams: 3, Delivered: 3, Dropped: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newFakeConn(tt.steps...)
			c.dropsErr = tt.dropsErr
			l := newListener(c, 1<<20, zap.NewNop())
			h := newRecorder(t)
			stop := run(t, l, h)

			got := h.wait(t, len(tt.want))
			<-c.blocked
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if diff := cmp.Diff(tt.want, append(got, h.rest()...)); diff != "" {
				t.Errorf("unexpected handler calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantStats, l.Stats()); diff != "" {
				t.Errorf("unexpected stats (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOverflowErrorIsENOBUFS(t *testing.T) {
	var err error = &OverflowError{Err: unix.ENOBUFS}
	if !errors.Is(err, unix.ENOBUFS) {
		t.Errorf("errors.Is(%v, ENOBUFS) = false", err)
	}
	err = &OverflowError{From: 1, To: 3}
	if errors.Is(err, unix.ENOBUFS) {
		t.Errorf("errors.Is(%v, ENOBUFS) = true", err)
	}
}

func TestRunReturnsPromptlyOnCancel(t *testing.T) {
	tests := []struct {
		name string
		conn func() *fakeConn
	}{
		{"idle socket", func() *fakeConn { return newFakeConn() }},
		{"after datagrams", func() *fakeConn { return newFakeConn(mem(1), cpuid(2), mem(3)) }},
		{"during an endless burst", func() *fakeConn {
			c := newFakeConn()
			seq := uint64(0)
			c.more = func() step { seq++; return mem(seq) }
			return c
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.conn()
			l := newListener(c, 1<<20, zap.NewNop())
			h := &discard{}
			ctx, cancel := context.WithCancel(context.Background())
			errC := make(chan error, 1)
			go func() { errC <- l.Run(ctx, h) }()
			if c.more == nil {
				<-c.blocked
			} else {
				h.waitEvents(100)
			}

			start := time.Now()
			cancel()
			select {
			case err := <-errC:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
				if d := time.Since(start); d > 100*time.Millisecond {
					t.Errorf("Run returned %v after cancel, want < 100ms", d)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Run did not return within 5s of cancel")
			}

			// The listener can run again.
			c.mu.Lock()
			c.steps, c.more = []step{mem(1000)}, nil
			c.mu.Unlock()
			h2 := newRecorder(t)
			stop := run(t, l, h2)
			if diff := cmp.Diff([]string{memEvent(1000)}, h2.wait(t, 1)); diff != "" {
				t.Errorf("unexpected handler calls on the second Run (-want +got):\n%s", diff)
			}
			if err := stop(); err != nil {
				t.Errorf("second Run: %v", err)
			}
		})
	}
}

// discard is a Handler that counts events.
type discard struct {
	mu      sync.Mutex
	n       int
	reached chan struct{}
	want    int
}

func (d *discard) Event(Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.reached != nil && d.n >= d.want {
		close(d.reached)
		d.reached = nil
	}
}

func (d *discard) Overflow(error) {}

func (d *discard) waitEvents(n int) {
	d.mu.Lock()
	if d.n >= n {
		d.mu.Unlock()
		return
	}
	c := make(chan struct{})
	d.reached, d.want = c, n
	d.mu.Unlock()
	<-c
}

func TestRunCanceledBeforeStart(t *testing.T) {
	c := newFakeConn(mem(1))
	l := newListener(c, 1<<20, zap.NewNop())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := newRecorder(t)
	if err := l.Run(ctx, h); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := h.rest(); len(got) != 0 {
		t.Errorf("handler called after cancel: %q", got)
	}
}

func TestRunErrors(t *testing.T) {
	t.Run("socket error", func(t *testing.T) {
		c := newFakeConn(mem(1), step{err: os.NewSyscallError("recvfrom", unix.EBADF)}, mem(2))
		l := newListener(c, 1<<20, zap.NewNop())
		err := l.Run(context.Background(), newRecorder(t))
		var op *OpError
		if !errors.As(err, &op) || op.Op != "receive" || !errors.Is(err, unix.EBADF) {
			t.Fatalf("Run error = %v, want an *OpError receive with EBADF", err)
		}
		if want := "uevent: receive: recvfrom: bad file descriptor"; err.Error() != want {
			t.Errorf("Run error = %q, want %q", err, want)
		}
	})
	t.Run("closed while running", func(t *testing.T) {
		c := newFakeConn()
		l := newListener(c, 1<<20, zap.NewNop())
		errC := make(chan error, 1)
		go func() { errC <- l.Run(context.Background(), newRecorder(t)) }()
		<-c.blocked
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errC:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Run error = %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return within 5s of Close")
		}
	})
	t.Run("second Run while running", func(t *testing.T) {
		c := newFakeConn()
		l := newListener(c, 1<<20, zap.NewNop())
		stop := run(t, l, newRecorder(t))
		<-c.blocked
		err := l.Run(context.Background(), newRecorder(t))
		if err == nil || !strings.Contains(err.Error(), "already running") {
			t.Errorf("second Run error = %v, want already running", err)
		}
		if err := stop(); err != nil {
			t.Errorf("first Run: %v", err)
		}
	})
}

func TestListenConfig(t *testing.T) {
	_, err := Listen(Config{ReceiveBuffer: -1})
	if err == nil || err.Error() != "uevent: receive buffer -1 is negative" {
		t.Errorf("Listen error = %v", err)
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{&OpError{Op: "dial NETLINK_KOBJECT_UEVENT", Err: unix.EPERM}, "uevent: dial NETLINK_KOBJECT_UEVENT: operation not permitted"},
		{&OverflowError{Err: unix.ENOBUFS}, "uevent: receive queue overflowed: no buffer space available"},
		{&OverflowError{Err: unix.ENOBUFS, Dropped: 3}, "uevent: receive queue overflowed (3 dropped): no buffer space available"},
		{&OverflowError{From: 7, To: 9}, "uevent: SEQNUM jumped from 7 to 9"},
		{&OverflowError{From: 7, To: 9, Dropped: 1}, "uevent: SEQNUM jumped from 7 to 9 (1 dropped)"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// The socket queues uevents between two Runs: a loss there is reported by
// the second Run, and SEQNUMs are compared across them.
func TestRunStateOutlivesRun(t *testing.T) {
	c := newFakeConn(mem(10))
	l := newListener(c, 1<<20, zap.NewNop())
	h := newRecorder(t)
	stop := run(t, l, h)
	got := h.wait(t, 1)
	<-c.blocked
	if err := stop(); err != nil {
		t.Fatalf("first Run: %v", err)
	}

	c.mu.Lock()
	c.steps = []step{{err: unix.ENOBUFS, drops: drops(4)}, mem(11), {idle: true}, mem(16), {data: mem(20).data, drops: drops(6)}}
	c.blocked = make(chan struct{})
	c.mu.Unlock()
	stop = run(t, l, h)
	got = append(got, h.wait(t, 5)...)
	<-c.blocked
	if err := stop(); err != nil {
		t.Fatalf("second Run: %v", err)
	}
	want := []string{
		memEvent(10),
		memEvent(11),
		"overflow uevent: receive queue overflowed (4 dropped): no buffer space available",
		memEvent(16),
		"overflow uevent: SEQNUM jumped from 16 to 20 (2 dropped)",
		memEvent(20),
	}
	if diff := cmp.Diff(want, append(got, h.rest()...)); diff != "" {
		t.Errorf("unexpected handler calls (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Stats{Datagrams: 4, Delivered: 4, Overflows: 2, Dropped: 6, Unseen: 1}, l.Stats()); diff != "" {
		t.Errorf("unexpected stats (-want +got):\n%s", diff)
	}
}
