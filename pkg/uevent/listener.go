package uevent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// DefaultReceiveBuffer is the receive buffer Listen asks for when
// Config.ReceiveBuffer is 0: room for more than 10,000 uevents (a 1 TiB
// memory hot-add is 8192 of them with 128 MiB blocks).
const DefaultReceiveBuffer = 16 << 20

// maxDatagram is the read buffer. The kernel builds a uevent in 2048 bytes
// (UEVENT_BUFFER_SIZE) plus the ACTION@DEVPATH header; anything longer is
// reported as truncated and skipped.
const maxDatagram = 16 << 10

// A Handler receives what a Listener reads. Run calls it on its own
// goroutine, one call at a time: while a call runs nothing is read and the
// kernel queues uevents in the receive buffer, so a Handler must return
// quickly (hand the event to another goroutine without blocking).
type Handler interface {
	// Event is called with every relevant event (see Event.Relevant), in
	// the order the kernel sent them.
	Event(Event)
	// Overflow is called when uevents were lost, with an *OverflowError:
	// the receiver must re-read all the state it follows. Run calls it once
	// the loss is over (the socket's queue has been drained, so the kernel
	// delivers again): state read after Overflow is called includes every
	// change whose uevent was lost.
	Overflow(err error)
}

// Config configures a Listener. The zero value is ready to use.
type Config struct {
	// ReceiveBuffer is the socket receive buffer to ask for, in bytes; 0
	// means DefaultReceiveBuffer. Listen sets it with SO_RCVBUFFORCE when
	// the process may (root or CAP_NET_ADMIN), with no lower or upper
	// bound, otherwise with SO_RCVBUF, which net.core.rmem_max caps. The
	// kernel doubles the value for its bookkeeping: see
	// Listener.ReceiveBuffer.
	ReceiveBuffer int
	// Logger receives the listener's logs as it is given (the caller names
	// it, e.g. log.Named("uevent")); nil means none.
	Logger *zap.Logger
}

// A Listener reads kernel uevents from a NETLINK_KOBJECT_UEVENT socket.
type Listener struct {
	c       conn
	log     *zap.Logger
	rcvbuf  int
	running atomic.Bool
	closed  atomic.Bool
	stats   counters
	r       *reader // used by one Run at a time
}

// conn is the socket Run reads: the netlink socket, or a fake in tests.
type conn interface {
	// recv reads one datagram into b and returns its full length, which is
	// more than len(b) when it was truncated, and the sender's netlink port
	// ID (0 is the kernel). When wait is false and no datagram is queued it
	// returns unix.EAGAIN instead of waiting.
	recv(b []byte, wait bool) (n int, pid uint32, err error)
	// drops returns the kernel's count of datagrams it dropped for this
	// socket because the receive queue was full (SK_MEMINFO_DROPS).
	drops() (uint32, error)
	setReadDeadline(t time.Time) error
	close() error
}

// Listen opens a NETLINK_KOBJECT_UEVENT socket, binds it to the kernel's
// multicast group (1; group 2 is udevd's) and sets its receive buffer. The
// socket queues uevents from then on, also before Run is called. It must be
// closed with Close.
//
// Uevents are sent only to sockets in the initial network namespace: in a
// pod, Listen succeeds but receives nothing unless the pod uses the host
// network.
func Listen(cfg Config) (*Listener, error) {
	if cfg.ReceiveBuffer < 0 {
		return nil, fmt.Errorf("uevent: receive buffer %d is negative", cfg.ReceiveBuffer)
	}
	size := cfg.ReceiveBuffer
	if size == 0 {
		size = DefaultReceiveBuffer
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}

	c, granted, err := dial(size, log)
	if err != nil {
		return nil, err
	}
	return newListener(c, granted, log), nil
}

func newListener(c conn, rcvbuf int, log *zap.Logger) *Listener {
	l := &Listener{c: c, log: log, rcvbuf: rcvbuf}
	// The socket is new: the kernel has dropped nothing for it yet.
	l.r = &reader{l: l, buf: make([]byte, maxDatagram), dropsKnown: true}
	return l
}

// ReceiveBuffer returns the receive buffer the kernel granted, in bytes, as
// getsockopt(SO_RCVBUF) read it after Listen set it: twice what was asked
// for, or twice net.core.rmem_max when that capped it.
func (l *Listener) ReceiveBuffer() int { return l.rcvbuf }

// Close closes the socket. A Run still reading returns an error that
// matches net.ErrClosed; to stop Run cleanly, cancel its context and close
// afterwards.
func (l *Listener) Close() error {
	l.closed.Store(true)
	if err := l.c.close(); err != nil {
		return &OpError{Op: "close", Err: err}
	}
	return nil
}

// Run reads uevents until ctx is done, passes the relevant ones to
// h.Event and drops the rest. It returns nil soon after ctx is done, also
// while the socket is idle or a burst is being read.
//
// Run never stops because uevents were lost: on ENOBUFS it keeps reading,
// and calls h.Overflow once it has drained the queue. It also calls
// h.Overflow when SEQNUMs jump and the kernel's drop counter shows that
// datagrams were dropped; a jump without drops is normal (uevents of
// devices in other network namespaces, such as every pod's loopback and
// veth, take SEQNUMs but are sent only to that namespace) and is only
// counted in Stats.Unseen. Malformed datagrams and datagrams that were not
// sent by the kernel are logged at debug level and skipped. Run returns an
// *OpError for any other socket error.
//
// Only one Run may run at a time.
func (l *Listener) Run(ctx context.Context, h Handler) error {
	if !l.running.CompareAndSwap(false, true) {
		return errors.New("uevent: Run is already running")
	}
	defer l.running.Store(false)

	// A previous Run may have left the deadline in the past.
	if err := l.c.setReadDeadline(time.Time{}); err != nil {
		return l.opError("set read deadline", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-ctx.Done():
			// Wake up the blocked read; Run sees ctx.Err() and returns.
			_ = l.c.setReadDeadline(time.Unix(0, 1))
		case <-done:
		}
	})
	defer func() {
		close(done)
		wg.Wait()
	}()

	r := l.r
	r.h = h
	for ctx.Err() == nil {
		if err := r.next(); err != nil {
			if ctx.Err() != nil {
				break
			}
			return err
		}
	}
	return nil
}

// reader is the state of the reads. It outlives a Run: the socket queues
// uevents also between two Runs.
type reader struct {
	l   *Listener
	h   Handler
	buf []byte

	seq        uint64         // highest SEQNUM seen, 0 before the first
	pending    *OverflowError // ENOBUFS seen, reported when the queue is drained
	drops      uint32         // the kernel's drop counter at the last report
	dropsKnown bool
	// unexplained counts drops that no SEQNUM gap has shown yet, to tell
	// them from uevents of other network namespaces in Stats.Unseen.
	unexplained uint64
}

// next reads and handles one datagram, or reports a pending overflow.
func (r *reader) next() error {
	l := r.l
	n, pid, err := l.c.recv(r.buf, r.pending == nil)
	switch {
	case err == nil:
	case errors.Is(err, unix.ENOBUFS):
		// The kernel reports ENOBUFS before the datagrams still queued, and
		// drops every new one until the queue is empty. Report the loss
		// then, when it is complete.
		if r.pending == nil {
			r.pending = &OverflowError{Err: unix.ENOBUFS}
		}
		return nil
	case errors.Is(err, unix.EAGAIN) && r.pending != nil:
		o := r.pending
		r.pending = nil
		o.Dropped = r.newDrops()
		r.overflow(o)
		return nil
	default:
		return l.opError("receive", err)
	}

	l.stats.datagrams.Add(1)
	if n > len(r.buf) {
		l.stats.malformed.Add(1)
		l.log.Debug("skipping truncated uevent", zap.Int("length", n), zap.Int("buffer", len(r.buf)))
		return nil
	}
	if pid != 0 {
		// Only a process with CAP_NET_ADMIN can send to the kernel's group;
		// udevd does the same check.
		l.stats.foreign.Add(1)
		l.log.Debug("skipping uevent not sent by the kernel", zap.Uint32("pid", pid))
		return nil
	}
	e, err := Parse(r.buf[:n])
	if err != nil {
		l.stats.malformed.Add(1)
		l.log.Debug("skipping malformed uevent", zap.Error(err))
		return nil
	}
	r.checkSeqnum(e.Seqnum)
	if !e.Relevant() {
		l.stats.irrelevant.Add(1)
		return nil
	}
	l.stats.delivered.Add(1)
	r.h.Event(e)
	return nil
}

// checkSeqnum compares the SEQNUM of every datagram, relevant or not, with
// the previous one.
func (r *reader) checkSeqnum(seq uint64) {
	if seq == 0 {
		return
	}
	prev := r.seq
	if seq <= prev {
		// The kernel takes a SEQNUM before it broadcasts, without a lock
		// around both: two CPUs can send theirs in the other order.
		r.l.log.Debug("SEQNUM went back", zap.Uint64("from", prev), zap.Uint64("to", seq))
		return
	}
	r.seq = seq
	if prev == 0 || seq == prev+1 {
		return
	}
	missing := seq - prev - 1
	if r.pending != nil {
		// The kernel queued these datagrams before it began to drop: a gap
		// between them is not a loss, and the pending report covers the
		// loss that follows them.
		r.unseen(missing, prev, seq)
		return
	}
	dropped := r.newDrops()
	if r.dropsKnown && dropped == 0 {
		r.unseen(missing, prev, seq)
		return
	}
	r.overflow(&OverflowError{From: prev, To: seq, Dropped: dropped})
	r.unseen(missing, prev, seq)
}

// unseen accounts for missing SEQNUMs between from and to: as many as the
// kernel dropped and no earlier gap accounted for are the drops; the rest
// are uevents of other network namespaces.
func (r *reader) unseen(missing, from, to uint64) {
	d := min(missing, r.unexplained)
	r.unexplained -= d
	if n := missing - d; n > 0 {
		r.l.stats.unseen.Add(n)
		r.l.log.Debug("SEQNUM gap without drops: uevents of other network namespaces",
			zap.Uint64("from", from), zap.Uint64("to", to), zap.Uint64("unseen", n))
	}
}

// newDrops returns how many datagrams the kernel dropped since the last
// call, and 0 when it cannot tell (then r.dropsKnown is false).
func (r *reader) newDrops() uint64 {
	d, err := r.l.c.drops()
	if err != nil {
		if r.dropsKnown {
			r.l.log.Debug("cannot read the socket's drop counter", zap.Error(err))
		}
		r.dropsKnown = false
		return 0
	}
	var n uint64
	if r.dropsKnown {
		n = uint64(d - r.drops) // the kernel's counter is 32 bits and wraps
	}
	r.drops, r.dropsKnown = d, true
	r.unexplained += n
	return n
}

func (r *reader) overflow(o *OverflowError) {
	r.l.stats.overflows.Add(1)
	// The Handler decides how loudly to log it.
	r.l.log.Debug("uevents were lost", zap.Error(o))
	r.h.Overflow(o)
}

func (l *Listener) opError(op string, err error) error {
	if l.closed.Load() {
		err = net.ErrClosed
	}
	return &OpError{Op: op, Err: err}
}

// Stats counts what a Listener read since Listen, for logs and metrics.
type Stats struct {
	// Datagrams is every datagram read, including skipped ones.
	Datagrams uint64
	// Delivered counts relevant events passed to Handler.Event.
	Delivered uint64
	// Irrelevant counts well-formed uevents Run dropped (cpuid, thermal...).
	Irrelevant uint64
	// Malformed counts datagrams Parse rejected or that were truncated.
	Malformed uint64
	// Foreign counts datagrams not sent by the kernel, dropped.
	Foreign uint64
	// Overflows counts Handler.Overflow calls.
	Overflows uint64
	// Dropped is the kernel's count of uevents it dropped for this socket
	// because the receive queue was full (SK_MEMINFO_DROPS, 32 bits).
	Dropped uint64
	// Unseen counts SEQNUMs skipped that the kernel's drop counter does not
	// account for: uevents the kernel sent only to other network namespaces
	// (or, when the drop counter cannot be read, lost ones).
	Unseen uint64
}

type counters struct {
	datagrams, delivered, irrelevant, malformed, foreign, overflows, unseen atomic.Uint64
}

// Stats returns the listener's counters. It may be called at any time,
// also while Run runs.
func (l *Listener) Stats() Stats {
	s := Stats{
		Datagrams:  l.stats.datagrams.Load(),
		Delivered:  l.stats.delivered.Load(),
		Irrelevant: l.stats.irrelevant.Load(),
		Malformed:  l.stats.malformed.Load(),
		Foreign:    l.stats.foreign.Load(),
		Overflows:  l.stats.overflows.Load(),
		Unseen:     l.stats.unseen.Load(),
	}
	if d, err := l.c.drops(); err == nil {
		s.Dropped = uint64(d)
	}
	return s
}
